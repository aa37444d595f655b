"""Rows of runs.db as parquet parts, and parts merged back in with the store's own rules.

This is the database side of `ccpo sync` (the Hub side is `ccpo_cli/hub_sync.py`) and of
`ccpo matrix --ray-address` (a Ray task returns the rows of its seed block, and only the driver
writes its runs.db). Rows travel per run and per table: run snapshots, evaluations (with their
per-type results and every episode), recorded conflicts, run facts, publications and
corrections. Checkpoint rows stay behind: they name files on the machine that wrote them.

By job: the part format and item keys are `sync_format.py`, writing rows and parts
`sync_export.py`, reading a downloaded part within its bounds `sync_read.py`, merging rows
`sync_merge.py` (run snapshots and their identity conflicts `sync_runs.py`, corrections
`sync_corrections.py`). This module is the sync ledger: which parts were merged, pushed or
refused (`sync_parts`), which rows a dataset holds (`sync_items`), each push and pull
(`sync_log`).

What a database knows to be in a dataset is in `sync_items`, so a push exports only the rest
and merging a part twice changes nothing. Every merged item also records the dataset commit it
was merged from, which `dataset_sources` reads back for `ccpo runs show`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import inserted_id, utc_now, write_transaction
from ccpo_cli.store.sync_export import PartFile
from ccpo_cli.store.sync_format import item_key, note_items
from ccpo_cli.store.sync_merge import MergeCounts, Origin, merge_rows
from ccpo_cli.store.sync_read import read_part


def part_already_merged(
    db: sqlite_utils.Database, repo_id: str, path_in_repo: str, blob_id: str | None
) -> bool:
    row = next(
        db.table("sync_parts").rows_where(
            "repo_id = ? AND path = ?", [repo_id, path_in_repo], limit=1
        ),
        None,
    )
    # A part whose download failed is tried again by the next pull.
    if row is None or row["direction"] == FAILED:
        return False
    return blob_id is None or row["blob_id"] in (None, blob_id)


FAILED = "failed"
_PART_SEGMENTS = 4  # data/HOST/RUN/FILE


def part_path_problem(path_in_repo: str) -> str | None:
    """Why a listed part path is not one ccpo wrote (`data/HOST/RUN/FILE`, no `..`, no empty or
    control-character segment, no backslash), or None."""
    segments = path_in_repo.split("/")
    if len(segments) != _PART_SEGMENTS or segments[0] != "data":
        return "not a path of the form data/HOST/RUN/FILE"
    if any(segment in ("", ".", "..") for segment in segments) or "\\" in path_in_repo:
        return "a path with an empty, '.' or '..' segment or a backslash"
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path_in_repo):
        return "a path with control characters"
    return None


class PullBudgetSpent(InvalidInput):
    """A part that would take a pull past its row or database-growth budget."""


@dataclass
class PullBudget:
    """What one pull may add to runs.db, over all its parts: rows merged and bytes of database
    growth (a 17 KB part once grew runs.db by 200 MB). `used` says whether a part was merged
    under it already (then a part over the rest waits for the next pull instead of being
    refused)."""

    max_rows: int
    max_growth_bytes: int
    rows: int = 0
    start_bytes: int | None = None

    @property
    def used(self) -> bool:
        return self.rows > 0

    def charge(self, db: sqlite_utils.Database, rows: int, where: str) -> None:
        size = _database_bytes(db)
        if self.start_bytes is None:
            self.start_bytes = size
        if self.rows + rows > self.max_rows:
            raise PullBudgetSpent(
                f"{where}: merging it would pass the pull's budget of {self.max_rows} rows"
            )
        if size - self.start_bytes > self.max_growth_bytes:
            raise PullBudgetSpent(
                f"{where}: merging it would grow runs.db by more than the pull's budget of "
                f"{self.max_growth_bytes / (1 << 20):.0f} MiB"
            )

    def spend(self, rows: int) -> None:
        self.rows += rows


def _database_bytes(db: sqlite_utils.Database) -> int:
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    return int(pages) * int(db.execute("PRAGMA page_size").fetchone()[0])


def merge_part(
    db: sqlite_utils.Database,
    local_path: Path,
    origin: Origin,
    *,
    blob_id: str | None = None,
    size_bytes: int | None = None,
    budget: PullBudget | None = None,
) -> MergeCounts:
    """Merge one downloaded part (`origin.part` in the dataset, `local_path` here) and note it
    as merged, all in one transaction (a pull stopped half-way keeps the parts it finished, and
    the next pull goes on from there). With a `budget`, a part that would pass it raises
    PullBudgetSpent and leaves nothing behind."""
    path_in_repo = origin.part
    table, batches = read_part(local_path, path_in_repo)
    counts = MergeCounts()
    merged = 0
    with write_transaction(db):
        for rows in batches:
            if budget is not None:
                budget.charge(db, merged + len(rows), path_in_repo)
            merge_rows(db, table, rows, where=path_in_repo, origin=origin, counts=counts)
            merged += len(rows)
        if budget is not None:
            budget.charge(db, merged, path_in_repo)  # the growth of the last batch too
        _record_part(db, origin, "pull", blob_id=blob_id, size_bytes=size_bytes)
    if budget is not None:
        budget.spend(merged)
    return counts


def record_failed_part(
    db: sqlite_utils.Database, origin: Origin, *, blob_id: str | None, size_bytes: int | None
) -> None:
    """Note a part whose download failed (direction `failed`): this pull goes on without it,
    the next one tries it again."""
    _record_part(db, origin, FAILED, blob_id=blob_id, size_bytes=size_bytes)


def record_refused_part(
    db: sqlite_utils.Database, origin: Origin, *, blob_id: str | None, size_bytes: int | None
) -> None:
    """Note a part a pull refused (direction `refused`): later pulls skip it, nothing of it is merged."""
    _record_part(db, origin, "refused", blob_id=blob_id, size_bytes=size_bytes)


def _record_part(
    db: sqlite_utils.Database,
    origin: Origin,
    direction: str,
    *,
    blob_id: str | None,
    size_bytes: int | None,
) -> None:
    with write_transaction(db):
        db.table("sync_parts").insert(
            {
                "repo_id": origin.repo_id,
                "path": origin.part,
                "blob_id": blob_id,
                "size_bytes": size_bytes,
                "direction": direction,
                "commit_id": origin.commit_id,
                "recorded_at": utc_now(),
            },
            replace=True,
        )


def mark_pushed(
    db: sqlite_utils.Database, repo_id: str, commit_id: str, parts: Sequence[PartFile]
) -> int:
    """After the dataset commit `commit_id` holds `parts`: their rows are known to be there
    (the next push leaves them out). Returns the number of rows marked."""
    marked = 0
    with write_transaction(db):
        for part in parts:
            _, batches = read_part(part.local_path, part.path_in_repo)
            for rows in batches:
                uids = {row["uid"] if part.table == "runs" else row["run_uid"] for row in rows}
                local = {
                    row["uid"]: row["id"]
                    for row in db.query(
                        f"SELECT id, uid FROM runs WHERE uid IN ({', '.join('?' for _ in uids)})",
                        list(uids),
                    )
                }
                note_items(
                    db,
                    repo_id,
                    (
                        (
                            item_key(part.table, row),
                            local.get(row["uid"] if part.table == "runs" else row["run_uid"]),
                        )
                        for row in rows
                    ),
                    direction="push",
                    commit_id=commit_id,
                    part=part.path_in_repo,
                )
                marked += len(rows)
            db.table("sync_parts").insert(
                {
                    "repo_id": repo_id,
                    "path": part.path_in_repo,
                    "blob_id": None,
                    "size_bytes": part.size_bytes,
                    "direction": "push",
                    "commit_id": commit_id,
                    "recorded_at": utc_now(),
                },
                replace=True,
            )
    return marked


def log_sync(
    db: sqlite_utils.Database,
    repo_id: str,
    direction: str,
    commit_id: str | None,
    *,
    revision: str | None,
    parts: int,
    counts: MergeCounts | None = None,
    rows: int = 0,
) -> int:
    """Record one push or pull with the dataset commit it made or was built from."""
    with write_transaction(db):
        row = {
            "repo_id": repo_id,
            "direction": direction,
            "commit_id": commit_id,
            "revision": revision,
            "parts": parts,
            "rows_new": counts.total("new") if counts else rows,
            "rows_duplicate": (counts.total("duplicate") + counts.total("same")) if counts else 0,
            "rows_conflict": counts.total("conflict") if counts else 0,
            "recorded_at": utc_now(),
        }
        return inserted_id(db.table("sync_log").insert(row))


def sync_history(db: sqlite_utils.Database, repo_id: str | None = None) -> list[dict[str, Any]]:
    """Every push and pull (of one dataset, or all), oldest first."""
    where, values = ("repo_id = ?", [repo_id]) if repo_id else (None, [])
    return list(db.table("sync_log").rows_where(where, values, order_by="id"))


def dataset_sources(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """The dataset commits a run's pulled rows were merged from: [{"repo_id", "commit_id",
    "rows", "first_merged_at"}], oldest first. Empty for a run whose rows are all local."""
    return list(
        db.query(
            "SELECT repo_id, commit_id, COUNT(*) AS rows, MIN(recorded_at) AS first_merged_at FROM sync_items "
            "WHERE run_id = ? AND direction = 'pull' GROUP BY repo_id, commit_id ORDER BY first_merged_at",
            [run_id],
        )
    )
