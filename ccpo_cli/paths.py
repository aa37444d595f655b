"""Where the shipped data (configs/, templates/) lives, and the one digest of a file's bytes.

In a wheel they sit inside the package (force-included by the build); in a source checkout
or an editable install they sit at the repository root.
"""

import hashlib
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def _shipped(name: str) -> Path:
    inside = _PACKAGE_DIR / name
    if inside.is_dir():
        return inside
    return _PACKAGE_DIR.parent / name


def configs_dir() -> Path:
    return _shipped("configs")


def templates_dir() -> Path:
    return _shipped("templates")


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks (checkpoints run to gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()
