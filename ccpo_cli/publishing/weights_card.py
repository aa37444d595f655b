"""Weights always get a card: the README committed when the full card of a run is refused.

The full card (cards/) refuses a run it cannot describe honestly yet, e.g. a 6-step run whose
window holds fewer evaluations than a window mean needs. Its weights may be on the Hub all the
same (the uploader sends a checkpoint before the card that names it), and weights without a
README are weights nobody can place. So when a card is refused and weights of the run are up,
the uploader commits this note instead: which run, which weights (step, revision, commit), why
there is no full card, and the evaluations runs.db holds, each as recorded. It claims nothing
else: no window mean, no comparison, no trend.

The note lives in its own fenced region (cards/fences.py markers), so a README already on the
Hub (a full card from earlier, or the owner's own text) keeps every line: the region is
replaced when present and appended when not. A later full card replaces the whole README as
usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlite_utils
import yaml

from ccpo_cli.cards.lint import HUB_ID
from ccpo_cli.store import get_run, run_evaluations
from ccpo_cli.vocabulary import FINAL

REGION_NAME = "weights-note"
BEGIN = f"<!-- ccpo:begin {REGION_NAME} -->"
END = f"<!-- ccpo:end {REGION_NAME} -->"
# Rows of the evaluation table; a longer run keeps its newest ones and says how many are left out.
MAX_ROWS = 60


def _cell(value: Any) -> str:
    # Names come from files and logs: a pipe or a newline would break the table.
    return " ".join(str(value).replace("|", "/").split())


def weights_note(
    db: sqlite_utils.Database, run: str, *, weights: Mapping[str, Any], reason: str, status: str
) -> str:
    """The fenced region: the weights, why no full card, the evaluations as recorded."""
    row = get_run(db, run)
    evaluations = run_evaluations(db, run)
    revision = weights.get("revision") or weights.get("commit")
    total = row.get("total_steps")
    where = f"step {row.get('last_step')}" + (f" of {total}" if total else "")
    lines = [
        BEGIN,
        "## Weights without a full card",
        "",
        f"These are the weights of ccpo run `{_cell(run)}` (arm `{_cell(row.get('arm'))}`, seed "
        f"{_cell(row.get('seed'))}, {'finished' if status == FINAL else 'training'} at {where}): the checkpoint of "
        f"step {weights.get('step')}, revision `{_cell(revision)}`, commit `{str(weights.get('commit'))[:12]}`.",
        "",
        f"ccpo did not build the full card for this run: {_cell(reason)}. This note states only what runs.db "
        "records; it gives no window mean, no comparison and no trend.",
        "",
    ]
    if evaluations:
        shown = evaluations[-MAX_ROWS:]
        lines += ["| step | held-out success (%) | episodes |", "|---:|---:|---:|"]
        lines += [
            f"| {e['step']} | {e['success_rate']:.1f} | {e.get('episodes') or 'not recorded'} |"
            for e in shown
        ]
        if len(evaluations) > len(shown):
            lines += [
                "",
                f"The {len(evaluations) - len(shown)} earlier evaluations are left out of this table.",
            ]
    else:
        lines.append("No evaluation of this run is recorded.")
    lines.append(END)
    return "\n".join(lines) + "\n"


def weights_readme(
    db: sqlite_utils.Database,
    run: str,
    remote: str | None,
    *,
    weights: Mapping[str, Any],
    reason: str,
    status: str,
    license: str | None,
) -> str:  # noqa: A002 - the metadata key
    """The README to commit: the Hub's own with the note's region replaced or appended, or a new
    one with the metadata ccpo knows (license, base model, tags)."""
    note = weights_note(db, run, weights=weights, reason=reason, status=status)
    if remote is not None:
        if BEGIN in remote and END in remote:
            head, rest = remote.split(BEGIN, 1)
            return head + note.rstrip("\n") + rest.split(END, 1)[1]
        return remote.rstrip("\n") + "\n\n" + note
    row = get_run(db, run)
    config = row.get("config") if isinstance(row.get("config"), Mapping) else {}
    metadata: dict[str, Any] = {"tags": ["ccpo", "reinforcement-learning"]}
    chosen_license = license or config.get("license")
    if chosen_license:
        metadata["license"] = str(chosen_license)
    if row.get("base_model") and HUB_ID.match(str(row["base_model"])):
        metadata["base_model"] = str(row["base_model"])
    header = yaml.safe_dump(metadata, sort_keys=True).strip()
    return f"---\n{header}\n---\n\n# {_cell(run)}\n\n{note}"


def commit_weights_card(
    session,
    db: sqlite_utils.Database,
    run: str,
    *,
    weights: Mapping[str, Any],
    reason: str,
    status: str,
    license: str | None,
    key: str,
    message: str,
    scratch: Path,
) -> dict[str, Any]:
    """Commit the weights note as README.md against the head ccpo read (the Hub's README, if
    any, is kept around the note)."""
    from huggingface_hub import CommitOperationAdd

    from ccpo_cli.cards.staging import README_PATH, sha256_text
    from ccpo_cli.hub_repo import remote_readme

    head = session.head()
    head_sha = getattr(head, "sha", None)
    names = {sibling.rfilename for sibling in (head.siblings or [])}
    remote = remote_readme(session, head_sha, scratch) if README_PATH in names else None
    text = weights_readme(
        db, run, remote, weights=weights, reason=reason, status=status, license=license
    )
    data = text.encode("utf-8")
    commit_id, landed = session.commit(
        "committing the weights card",
        [CommitOperationAdd(README_PATH, data)],
        message=message,
        key=key,
        since=head_sha,
        parent=head_sha,
        size_bytes=len(data),
    )
    return {
        "commit_id": commit_id,
        "card_hash": sha256_text(text),
        "found_landed": landed,
        "commit_url": session.commit_url(commit_id),
    }
