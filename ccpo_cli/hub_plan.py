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


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Files of a model folder by their path in the repository (hidden files and folders skipped)."""
    if not folder.is_dir():
        raise InvalidInput(f"--checkpoint {folder}: not a folder")
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            found[relative.as_posix()] = path
    if not found:
        raise InvalidInput(f"--checkpoint {folder}: the folder holds no files")
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
