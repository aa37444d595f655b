"""What a `ccpo sync` part is: its tables, columns and parquet schema, and the item keys.

A part holds the rows of one table of one run (`TABLES`, in merge order; checkpoint rows are
not among them: they name files on the machine that wrote them). Its schema is stamped with
the table and `PART_FORMAT`. An item key says what makes two rows on two machines the same
(a run snapshot, one result, a fact, a correction, a publication, one logged scalar); `sync_items` records which
keys a database knows to be in a dataset (`known_items`). Writing parts is sync_export.py,
reading them sync_read.py, merging them sync_merge.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import sqlite_utils

from ccpo_cli.extras import require_extra
from ccpo_cli.store import metrics, sync_corrections
from ccpo_cli.store.db import utc_now
from ccpo_cli.store.evaluation_content import RESULT_FIELDS
from ccpo_cli.store.records import IDENTITY_FIELDS
from ccpo_cli.store.sync_corrections import TABLES as CORRECTION_TABLES

PART_FORMAT = "1"
# Merge order: a run before the rows that belong to it, evaluations before the conflicts
# recorded against them.
TABLES = (
    "runs",
    "evaluations",
    "conflicts",
    "facts",
    "publications",
    *CORRECTION_TABLES,
    metrics.SYNC_TABLE,
)
# Rows per parquet row group and per merged batch: memory stays flat whatever the run's size.
CHUNK_ROWS = 256

RUN_COLUMNS = (
    "uid",
    "host",
    "name",
    "kind",
    "arm",
    "arm_fingerprint",
    "arm_flags",
    "arm_overrides",
    "base_model",
    "benchmark",
    "seed",
    "backend",
    "total_steps",
    "last_step",
    "status",
    "hardware",
    "data_order_seed",
    "git_commit",
    "git_dirty",
    "package_versions",
    "config",
    "step1_rollout_hash",
    "created_at",
    "updated_at",
)
RUN_INTEGERS = {"seed", "total_steps", "last_step", "data_order_seed", "git_dirty"}
# Fixed when the run is made (the step-1 hash once step 1 is done); another value elsewhere is
# a conflict, not an update.
RUN_IDENTITY = (*IDENTITY_FIELDS, "host", "step1_rollout_hash")
# Progress and settings: a newer snapshot replaces them.
RUN_PROGRESS = tuple(
    column
    for column in RUN_COLUMNS
    if column not in {*RUN_IDENTITY, "uid", "name", "last_step", "created_at", "updated_at"}
)
EPISODE_FIELDS = (
    "episode_index",
    "game_id",
    "task_type",
    "won",
    "turns",
    "invalid_turns",
    "reward",
)


def pyarrow_modules():
    """pyarrow and its parquet module, or one line saying how to install them."""
    return require_extra("sync", "pyarrow", what="parquet parts"), require_extra(
        "sync", "pyarrow.parquet", what="parquet parts"
    )


# The parquet type of a part's column, by its name: a count, a step or a seed is an integer, a
# rate or a sampling setting a real, anything else text (a run's integers are RUN_INTEGERS).
_INTEGER_COLUMNS = {
    "step",
    "episodes",
    "successes",
    "eval_seed",
    "source_line",
    "checkpoint_step",
    "episode_index",
    "won",
    "turns",
    "invalid_turns",
}
_REAL_COLUMNS = {"success_rate", "mean_turns", "temperature", "train_success_rate", "reward"}


def part_schemas() -> dict[str, Any]:
    pa, _ = pyarrow_modules()

    def typed(names: Sequence[str]) -> list[tuple[str, Any]]:
        return [
            (
                name,
                pa.int64()
                if name in _INTEGER_COLUMNS
                else pa.float64()
                if name in _REAL_COLUMNS
                else pa.string(),
            )
            for name in names
        ]

    task_type = pa.struct(typed(("task_type", "episodes", "successes", "success_rate")))
    episode = pa.struct(typed((*EPISODE_FIELDS, "extra")))
    run_uid = ("run_uid", pa.string())
    columns = {
        "runs": [
            (name, pa.int64() if name in RUN_INTEGERS else pa.string()) for name in RUN_COLUMNS
        ],
        "evaluations": [
            run_uid,
            *typed(PART_COLUMNS["evaluations"]),
            ("task_types", pa.list_(task_type)),
            ("episode_rows", pa.list_(episode)),
        ],
        **{
            table: [run_uid, *typed(PART_COLUMNS[table])]
            for table in ("conflicts", "facts", "publications")
        },
        **sync_corrections.schemas(pa),
        metrics.SYNC_TABLE: metrics.sync_schema(pa),
    }
    return {
        table: pa.schema(fields, metadata={"ccpo_table": table, "ccpo_part_format": PART_FORMAT})
        for table, fields in columns.items()
    }


# --- item keys: what makes two rows on two machines the same item ---------------------------


def _digest(*parts: Any) -> str:
    return hashlib.sha256(
        json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def run_snapshot_digest(row: dict[str, Any]) -> str:
    """A run snapshot's digest: every synced column but the name, which is local (NAME@HOST)."""
    return _digest({column: row.get(column) for column in RUN_COLUMNS if column != "name"})


def item_key(table: str, row: dict[str, Any]) -> str:
    """The key of one exported row (the row as in its part), the same on every machine."""
    if table == "runs":
        return f"run:{row['uid']}:{run_snapshot_digest(row)}"
    uid = row["run_uid"]
    if table in ("evaluations", "conflicts"):
        # One result, kept or in conflict: which of two differing results a database keeps
        # depends on which it saw first, and either way the dataset holds both.
        return f"result:{uid}:{row['content_hash']}"
    if table == "facts":
        return f"fact:{uid}:{_digest(row['key'], row['value'])}"
    if table in CORRECTION_TABLES:
        return f"{table}:{uid}:{_digest(*sync_corrections.item_parts(table, row))}"
    if table == metrics.SYNC_TABLE:
        return f"metric:{uid}:{_digest(*metrics.item_parts(row))}"
    return f"publication:{uid}:{_digest(*(row.get(name) for name in ('repo_id', 'revision', 'commit_id', 'card_hash', 'status', 'checkpoint_step', 'url', 'published_at')))}"


def known_items(db: sqlite_utils.Database, repo_id: str, keys: Sequence[str]) -> set[str]:
    if not keys:
        return set()
    marks = ", ".join("?" for _ in keys)
    return {
        row["item_key"]
        for row in db.query(
            f"SELECT item_key FROM sync_items WHERE repo_id = ? AND item_key IN ({marks})",
            [repo_id, *keys],
        )
    }


def note_items(
    db: sqlite_utils.Database,
    repo_id: str,
    items: Iterable[tuple[str, int | None]],
    *,
    direction: str,
    commit_id: str | None,
    part: str,
) -> None:
    """Record that the dataset `repo_id` holds these items (item key, the local run's id),
    pushed from here or merged from it (`direction`), so that a push leaves them out; an item
    noted before keeps its first row."""
    db.table("sync_items").insert_all(
        (
            {
                "repo_id": repo_id,
                "item_key": key,
                "run_id": run_id,
                "direction": direction,
                "commit_id": commit_id,
                "part": part,
                "recorded_at": utc_now(),
            }
            for key, run_id in items
        ),
        ignore=True,
    )


def run_export_row(run: dict[str, Any]) -> dict[str, Any]:
    return {column: run[column] for column in RUN_COLUMNS}


CHECKPOINT_COLUMNS = ("step", "path", "sha256", "size_bytes", "created_at")
PUBLICATION_COLUMNS = (
    "repo_id",
    "revision",
    "commit_id",
    "card_hash",
    "status",
    "checkpoint_step",
    "url",
    "published_at",
)
# The columns a part gives of a row of these tables (beside the run's `run_uid`), and the
# table of runs.db each is read from and merged into.
PART_COLUMNS = {
    "evaluations": (
        *RESULT_FIELDS,
        "train_success_rate",
        "source_file",
        "source_line",
        "content_hash",
        "recorded_at",
    ),
    "conflicts": (
        "step",
        "split",
        "eval_seed",
        "content_hash",
        "content",
        "source_file",
        "source_line",
        "recorded_at",
    ),
    "facts": ("key", "value", "source", "recorded_at"),
    "publications": PUBLICATION_COLUMNS,
    "checkpoints": CHECKPOINT_COLUMNS,
}
SOURCE_TABLES = {"facts": "run_facts"}  # a part table named otherwise than its runs.db table


def part_table(path_in_repo: str) -> str | None:
    """The table a part holds, from its file name (None: not a ccpo part)."""
    name = path_in_repo.rsplit("/", 1)[-1]
    table = name.split("-", 1)[0]
    return table if name.endswith(".parquet") and table in TABLES else None
