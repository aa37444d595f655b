"""Rows of `ccpo sync` parts merged into runs.db with the store's own rules.

Everything goes through the store's writers, so the rules are those of a local write:
identical evaluation content is one row (its content hash recomputed from the row, a part
whose rows do not match refused), a different result for the same run, step, split and eval
seed is a recorded conflict (both values kept), a fact is kept once per value, a publication
once per identical row, a checkpoint row (a Ray task's return only) once per step and path.
Run snapshots are merged by sync_runs.py, corrections by sync_corrections.py, logged
scalars by metrics.py (a value once per run, name and step). A pulled row of one of this
machine's own runs is never merged here: sync_trust.py holds it for `sync accept`. With an
`Origin`, every merged row is also recorded as being in that dataset (`sync_items`), so
merging a part twice changes nothing.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import metrics, sync_corrections, sync_trust
from ccpo_cli.store.db import write_transaction
from ccpo_cli.store.evaluation_content import content_hash, evaluation_content
from ccpo_cli.store.facts import record_facts
from ccpo_cli.store.records import record_evaluation_outcome
from ccpo_cli.store.sync_corrections import TABLES as CORRECTION_TABLES
from ccpo_cli.store.sync_export import Chunk
from ccpo_cli.store.sync_format import (
    CHECKPOINT_COLUMNS,
    EPISODE_FIELDS,
    PUBLICATION_COLUMNS,
    TABLES,
    item_key,
    known_items,
    note_items,
    run_export_row,
)
from ccpo_cli.store.sync_read import check_step, synced_time
from ccpo_cli.store.sync_runs import merge_run


@dataclass(frozen=True)
class Origin:
    """Where merged rows come from: a dataset commit and the part within it."""

    repo_id: str
    commit_id: str
    part: str


@dataclass
class MergeCounts:
    """Per table, how many merged rows were new, the same as a row here, conflicts, ..."""

    by_table: dict[str, Counter] = field(default_factory=dict)
    # The item keys of this machine's runs' own rows, per (run id, table), read once per merge.
    own_keys: dict = field(default_factory=dict, repr=False, compare=False)

    def add(self, table: str, outcome: str) -> None:
        self.by_table.setdefault(table, Counter())[outcome] += 1

    def update(self, other: MergeCounts) -> None:
        for table, counts in other.by_table.items():
            self.by_table.setdefault(table, Counter()).update(counts)

    def total(self, outcome: str) -> int:
        return sum(counts[outcome] for counts in self.by_table.values())

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {
            table: dict(sorted(counts.items())) for table, counts in sorted(self.by_table.items())
        }


def _local_run(db: sqlite_utils.Database, uid: Any, where: str) -> dict[str, Any]:
    row = next(db.table("runs").rows_where("uid = ?", [uid], limit=1), None)
    if row is None:
        raise InvalidInput(
            f"{where}: rows of run {uid!r}, which neither this database nor the dataset's run "
            "parts hold"
        )
    return row


def folder_host(path_in_repo: str | None) -> str | None:
    """The host folder a dataset part sits in (`data/HOST/RUN/...`); None outside a dataset."""
    parts = (path_in_repo or "").split("/")
    return parts[1] if len(parts) >= 4 and parts[0] == "data" else None


def _episode_argument(episode: dict[str, Any]) -> dict[str, Any]:
    argument = {key: episode[key] for key in EPISODE_FIELDS}
    if episode.get("extra"):
        extra = json.loads(episode["extra"])
        argument.update({key: value for key, value in extra.items() if key not in argument})
    return argument


def _evaluation_arguments(row: dict[str, Any]) -> dict[str, Any]:
    types = {
        entry["task_type"]: {
            "episodes": entry["episodes"],
            "successes": entry["successes"],
            "success": entry["success_rate"],
        }
        for entry in row.get("task_types") or []
    }
    return {
        "split": row["split"],
        "episodes": row["episodes"],
        "successes": row["successes"],
        "success_rate": row["success_rate"],
        "mean_turns": row["mean_turns"],
        "temperature": row["temperature"],
        "eval_seed": row["eval_seed"],
        "task_types": types,
        "episode_rows": [_episode_argument(episode) for episode in row.get("episode_rows") or []],
    }


def _conflict_arguments(row: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        content = json.loads(row["content"])
    except (TypeError, ValueError):
        raise InvalidInput(f"{where}: a conflict whose content is not JSON") from None
    if not isinstance(content, dict) or content_hash(content) != row["content_hash"]:
        raise InvalidInput(
            f"{where}: a conflict whose content does not match its hash {row['content_hash']}"
        )
    return {
        "split": content.get("split"),
        "episodes": content.get("episodes"),
        "successes": content.get("successes"),
        "success_rate": content.get("success_rate"),
        "mean_turns": content.get("mean_turns"),
        "temperature": content.get("temperature"),
        "eval_seed": content.get("eval_seed"),
        "task_types": content.get("task_types") or {},
        "episode_rows": [
            _episode_argument(episode) for episode in content.get("episodes_rows") or []
        ],
    }


def _reached(db: sqlite_utils.Database, run_id: int) -> int:
    """The last step recorded here (total and last step; only the run's own machine moves them
    forward): a merged row past it is refused (an injected step 7 of a 4-step run once became
    its best)."""
    run = db.table("runs").get(run_id)
    return max(step for step in (run["total_steps"], run["last_step"], 0) if isinstance(step, int))


def _merge_evaluation(
    db: sqlite_utils.Database, table: str, row: dict[str, Any], run_id: int, where: str
) -> str:
    check_step(row["step"], _reached(db, run_id), "an evaluation at step", where)
    synced_time(row["recorded_at"], "recorded_at", where)
    if table == "evaluations":
        arguments = _evaluation_arguments(row)
        try:
            checked = evaluation_content(row["step"], **arguments).content_hash
        except InvalidInput as error:
            raise InvalidInput(f"{where}: step {row['step']}: {error}") from None
        if checked != row["content_hash"]:
            raise InvalidInput(
                f"{where}: the evaluation of step {row['step']} does not match its content hash "
                f"({row['content_hash']}); the part was altered or written by another ccpo"
            )
        arguments["train_success_rate"] = row["train_success_rate"]
    else:
        arguments = _conflict_arguments(row, where)
    updated_at = db.table("runs").get(run_id)["updated_at"]
    outcome = record_evaluation_outcome(
        db,
        run_id,
        row["step"],
        source_file=row["source_file"],
        source_line=row["source_line"],
        **arguments,
    )
    if outcome.outcome == "new":
        # A merged row is not a change of the run on this machine: its snapshot time stays the
        # one its own machine recorded, so that machine's later snapshots still count as newer.
        db.table("runs").update(run_id, {"updated_at": updated_at})
    return outcome.outcome


def _merge_fact(db: sqlite_utils.Database, row: dict[str, Any], run_id: int, where: str) -> str:
    try:
        value = json.loads(row["value"])
    except (TypeError, ValueError):
        raise InvalidInput(f"{where}: fact {row['key']!r} holds no JSON value") from None
    if (
        next(
            db.table("run_facts").rows_where(
                "run_id = ? AND key = ? AND value = ?", [run_id, row["key"], row["value"]], limit=1
            ),
            None,
        )
        is not None
    ):
        return "duplicate"
    try:
        conflicts = record_facts(db, run_id, {row["key"]: value}, row["source"])
    except InvalidInput as error:
        raise InvalidInput(f"{where}: {error} (written by a newer ccpo?)") from None
    return "conflict" if conflicts else "new"


def _merge_checkpoint(db: sqlite_utils.Database, row: dict[str, Any], run_id: int) -> str:
    """A checkpoint row once per (run, step, path). A retried task writes the file again, and its
    bytes differ (the file records the wall time); the row of the first stands, counted `rewritten`."""
    same = next(
        db.table("checkpoints").rows_where(
            "run_id = ? AND step = ? AND path = ?", [run_id, row["step"], row["path"]], limit=1
        ),
        None,
    )
    if same is None:
        db.table("checkpoints").insert(
            dict({key: row[key] for key in CHECKPOINT_COLUMNS}, run_id=run_id)
        )
        return "new"
    return "duplicate" if same["sha256"] in (None, row["sha256"]) else "rewritten"


def _merge_publication(db: sqlite_utils.Database, row: dict[str, Any], run_id: int) -> str:
    where = " AND ".join(f"{column} IS ?" for column in PUBLICATION_COLUMNS)
    values = [row[column] for column in PUBLICATION_COLUMNS]
    if (
        next(
            db.table("publications").rows_where(
                f"run_id = ? AND {where}", [run_id, *values], limit=1
            ),
            None,
        )
        is not None
    ):
        return "duplicate"
    db.table("publications").insert(dict(zip(PUBLICATION_COLUMNS, values), run_id=run_id))
    return "new"


def merge_rows(
    db: sqlite_utils.Database,
    table: str,
    rows: Iterable[dict[str, Any]],
    *,
    where: str,
    origin: Origin | None = None,
    counts: MergeCounts | None = None,
) -> MergeCounts:
    """Merge rows of one table (in part form) into the database, in one transaction.

    With an `origin`, every row is also recorded as being in that dataset (`sync_items`)."""
    counts = counts if counts is not None else MergeCounts()
    with write_transaction(db):
        for row in rows:
            try:
                _merge_one(db, table, row, where, origin, counts)
            except (TypeError, ValueError, KeyError, AttributeError) as error:
                # A row of the right columns holding something else (hand-made or damaged): refused,
                # and the transaction leaves nothing of the part behind.
                raise InvalidInput(
                    f"{where}: a row of {table} that ccpo cannot read ({type(error).__name__}: "
                    f"{' '.join(str(error).split())[:200]})"
                ) from None
    return counts


def _merge_run_snapshot(
    db: sqlite_utils.Database, row: dict[str, Any], where: str, origin: Origin | None
) -> tuple[dict[str, Any], str, str | None]:
    """Merge a run's snapshot: the local run, the outcome, and the item key of the merged
    snapshot when the dataset itself gives it (None: it is still to be pushed)."""
    before = next(db.table("runs").rows_where("uid = ?", [row.get("uid")], limit=1), None)
    local, outcome = merge_run(
        db,
        row,
        where,
        folder_host(origin.part if origin else None),
        this_machines=origin is not None and sync_trust.is_this_machines(before),
    )
    # A run that held nothing unpushed is, once merged, what the dataset itself gives:
    # its merged snapshot need not be pushed back. One with local changes still is.
    if (
        origin is not None
        and outcome == "updated"
        and before is not None  # always so: only a run already here is updated
        and known_items(db, origin.repo_id, [item_key("runs", run_export_row(before))])
    ):
        return local, outcome, item_key("runs", run_export_row(local))
    return local, outcome, None


def _merge_one(
    db: sqlite_utils.Database,
    table: str,
    row: dict[str, Any],
    where: str,
    origin: Origin | None,
    counts: MergeCounts,
) -> None:
    derived_key = None
    if table == "runs":
        local, outcome, derived_key = _merge_run_snapshot(db, row, where, origin)
    else:
        local = _local_run(db, row.get("run_uid"), where)
        if origin is not None and sync_trust.is_this_machines(local):
            # Only this machine writes its runs: a pulled row it lacks waits for `sync accept`.
            outcome = sync_trust.hold_unless_known(db, table, row, local, origin, counts.own_keys)
        elif table in ("evaluations", "conflicts"):
            outcome = _merge_evaluation(db, table, row, local["id"], where)
        elif table == "facts":
            outcome = _merge_fact(db, row, local["id"], where)
        elif table == "checkpoints" and origin is None:
            outcome = _merge_checkpoint(db, row, local["id"])
        elif table == "publications":
            outcome = _merge_publication(db, row, local["id"])
        elif table in CORRECTION_TABLES:
            outcome = sync_corrections.merge_row(db, table, row, local, where)
        elif table == metrics.SYNC_TABLE:
            check_step(row.get("step"), _reached(db, local["id"]), "a metric at step", where)
            outcome = metrics.merge_row(db, row, local, where)
        else:
            raise InvalidInput(f"{where}: rows of table {table!r}, which ccpo does not merge here")
    counts.add(table, outcome)
    if origin is not None:
        keys = (key for key in (item_key(table, row), derived_key) if key is not None)
        note_items(
            db,
            origin.repo_id,
            ((key, local["id"]) for key in keys),
            direction="pull",
            commit_id=origin.commit_id,
            part=origin.part,
        )


def merge_chunks(db: sqlite_utils.Database, chunks: Iterable[Chunk], *, where: str) -> MergeCounts:
    """Merge exported chunks (a Ray task's records, checkpoints included) in `TABLES` order, all
    in one transaction."""
    order = (*TABLES, "checkpoints")
    ordered = sorted(chunks, key=lambda chunk: order.index(chunk.table))
    counts = MergeCounts()
    with write_transaction(db):
        for chunk in ordered:
            merge_rows(db, chunk.table, chunk.rows, where=where, counts=counts)
    return counts
