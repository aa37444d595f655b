"""A folder for what the tests build once and share: the shipped game sets and the generated
game folders, made by the ALFWorld engine in seconds to minutes each.

It is shared by every pytest-xdist worker of a run and by later runs of the same code: its name
is a hash of the game-making code (ccpo_cli/envs) and the engine's version, so a change to either
gets a new, empty folder. Writers fill a scratch folder and rename it into place (an atomic step
on one file system), so two workers that build the same thing at once both end with a whole one.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _code_key() -> str:
    digest = hashlib.sha256()
    for source in sorted((ROOT / "ccpo_cli" / "envs").glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for package in ("alfworld", "textworld"):
        try:
            digest.update(f"{package}=={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{package} absent".encode())
    return digest.hexdigest()[:16]


SHARED = Path(tempfile.gettempdir()) / f"ccpo-test-cache-{_code_key()}"


def built_once(name: str, build: Callable[[Path], object]) -> Path:
    """SHARED/name, made by `build(folder)` the first time any worker asks for it."""
    folder = SHARED / name
    if folder.is_dir():
        return folder
    SHARED.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=SHARED))
    try:
        build(scratch / name)
        try:
            (scratch / name).rename(folder)
        except OSError:
            pass  # another worker finished first; its folder is the same
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return folder
