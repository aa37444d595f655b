"""What a card publish would do, worked out without the network: the settings and the plan.

The endpoint (`--endpoint`, else HF_ENDPOINT, else the public Hub) and a new repository's
visibility (private unless `--public`); a model folder's files as a checkpoint commit would
hold them (`checkpoint_files`, refusing files the card commit owns); the commits of a publish
with every file's size and sha256 and the commit messages (`commit_plan`), which `--dry-run`
writes as `commit_plan.json` in the staging folder. It reads local files only; the commits
themselves are made by hub.py through hub_repo.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ccpo_cli.cards.staging import README_PATH, StagedCard
from ccpo_cli.errors import InvalidInput
from ccpo_cli.paths import file_sha256
from ccpo_cli.vocabulary import FINAL, INTERIM

PUBLIC_ENDPOINT = "https://huggingface.co"
PLAN_FILE = "commit_plan.json"


# --- settings ----------------------------------------------------------------------------


def resolve_endpoint(explicit: str | None = None) -> str:
    """--endpoint, else HF_ENDPOINT, else the public Hub."""
    endpoint = explicit or os.environ.get("HF_ENDPOINT") or PUBLIC_ENDPOINT
    return endpoint.rstrip("/")


# A branch name as `git check-ref-format --branch` accepts it (and the Hub with it), bounded.
MAX_REVISION_CHARS = 255
_REVISION_FORBIDDEN = set(" ~^:?*[\\") | {chr(code) for code in range(32)} | {chr(127)}


def check_revision(revision: str, where: str = "--revision") -> str:
    """`revision` when it is a valid git branch name, else InvalidInput (exit 3) saying why."""
    text = str(revision)
    problems = []
    if not text or len(text) > MAX_REVISION_CHARS:
        problems.append(f"1 to {MAX_REVISION_CHARS} characters")
    if any(character in _REVISION_FORBIDDEN for character in text) or not text.isprintable():
        problems.append("no spaces, control characters or any of ~ ^ : ? * [ \\")
    if ".." in text or "@{" in text or "//" in text or text == "@":
        problems.append("no '..', '@{' or '//', and not '@'")
    if text.startswith(("/", "-")) or text.endswith(("/", ".", ".lock")):
        problems.append("not starting with '/' or '-', not ending with '/', '.' or '.lock'")
    if any(part.startswith(".") for part in text.split("/")):
        problems.append("no part starting with '.'")
    if problems:
        shown = text.encode("unicode_escape").decode("ascii")[:80]
        raise InvalidInput(
            f"{where} {shown!r}: not a valid git branch name ({'; '.join(problems)})"
        )
    return text


def default_private(status: str, explicit: bool | None) -> bool:
    """A new repository is private unless the user says --public: interim and final cards alike
    (a final card is still a claim the owner may want to check before the world reads it)."""
    return True if explicit is None else explicit


# --- the plan ----------------------------------------------------------------------------


def _file_entry(path_in_repo: str, local: Path, source: str) -> dict[str, Any]:
    return {
        "path_in_repo": path_in_repo,
        "size": local.stat().st_size,
        "sha256": file_sha256(local),
        "source": source,
    }


def _inside(link: Path, root: Path) -> bool:
    """Whether `link` (a symbolic link) resolves to somewhere under `root`."""
    try:
        return link.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a loop of links
        return False


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Files of a model folder by their path in the repository (hidden files and folders
    skipped). The folder is walked without following links: a symbolic link that leaves the
    folder is refused (exit 3), never read (its target's contents are not the checkpoint's to
    upload); a link to a file inside it is that file, a link to a folder inside it is not walked
    twice."""
    if not folder.is_dir():
        raise InvalidInput(f"--checkpoint {folder}: not a folder")
    root = folder.resolve()
    found: dict[str, Path] = {}
    leaving: list[str] = []
    for current, folders, names in os.walk(folder, followlinks=False):
        here = Path(current)
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        for name in list(folders):
            if (here / name).is_symlink():
                folders.remove(name)
                if not _inside(here / name, root):
                    leaving.append((here / name).relative_to(folder).as_posix())
        for name in sorted(names):
            path = here / name
            relative = path.relative_to(folder)
            if name.startswith("."):
                continue
            if path.is_symlink() and not _inside(path, root):
                leaving.append(relative.as_posix())
                continue
            if path.is_file():
                found[relative.as_posix()] = path
    if leaving:
        raise InvalidInput(
            f"--checkpoint {folder}: {', '.join(sorted(leaving)[:5])} "
            f"{'is a symbolic link' if len(leaving) == 1 else 'are symbolic links'} leading out of the folder; "
            "ccpo uploads only the folder's own files (copy them in, or give the folder they point into)"
        )
    if not found:
        raise InvalidInput(f"--checkpoint {folder}: the folder holds no files")
    found = dict(sorted(found.items()))
    clashes = sorted(
        set(found) & {README_PATH, "results/ccpo_summary.json", "results/learning_curve.png"}
    )
    if clashes:
        raise InvalidInput(
            f"--checkpoint {folder}: holds {', '.join(clashes)}, which the card commit owns"
        )
    return found


def commit_plan(
    staged: StagedCard,
    *,
    repo_id: str,
    revision: str,
    private: bool,
    endpoint: str,
    checkpoint: Path | None = None,
) -> dict[str, Any]:
    """What a publish would do: the commits, their files with sizes and sha256, the repository
    settings. Pure: it reads local files only."""
    card_files = [_file_entry(path, local, "card") for path, local in staged.files.items()]
    commits = []
    if checkpoint is not None:
        commits.append(
            {
                "purpose": "checkpoint",
                "commit_message": checkpoint_message(staged),
                "files": [
                    _file_entry(path, local, "checkpoint")
                    for path, local in checkpoint_files(checkpoint).items()
                ],
                "verify": "remote file list, sizes and sha256 at the commit it made must match the local folder",
                "tag": None
                if staged.context.summary["checkpoint_step"] is None
                else f"step-{staged.context.summary['checkpoint_step']}",
            }
        )
    commits.append(
        {
            "purpose": "card",
            "commit_message": card_message(staged),
            "files": card_files,
            "parent_commit": "the head of the revision at publish time (a concurrent edit fails with 412)",
            "readme": "merged into the remote README's ccpo regions if the remote README exists and differs",
            "tag": FINAL if staged.context.status == FINAL else None,
        }
    )
    return {
        "repo_id": repo_id,
        "revision": revision,
        "private": private,
        "endpoint": endpoint,
        "run": staged.context.run,
        "status": staged.context.status,
        "card_hash": staged.card_hash,
        "checkpoint_step": staged.context.summary["checkpoint_step"],
        "staging": str(staged.folder),
        "commits": commits,
    }


def card_message(staged: StagedCard) -> str:
    context = staged.context
    summary = context.summary
    if context.status == INTERIM:
        total = summary["total_steps"]
        of_total = f" of {total}" if total is not None else ", total steps not recorded"
        return f"ccpo: interim card for {context.run} (step {summary['last_step']}{of_total})"
    return f"ccpo: final card for {context.run}"


def checkpoint_message(staged: StagedCard) -> str:
    return f"ccpo: checkpoint of {staged.context.run} at step {staged.context.summary['checkpoint_step']}"


def write_plan(plan: dict[str, Any], folder: Path) -> Path:
    path = folder / PLAN_FILE
    path.write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    return path
