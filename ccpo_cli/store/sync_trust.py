"""Only this machine writes its own runs: what a pull may change of them.

A run created here (`runs.host` is this machine's label, store/records.py `this_host`) is
written only by this machine. A pulled part, in whatever host folder it sits (this machine's
own folder included: anyone who can write the dataset can place a part there), never changes
such a run directly:

- a run snapshot that differs is kept field by field in `sync_run_conflicts` (sync_runs.py),
  the local values standing;
- an evaluation, a conflicting result, a fact, a publication, a retraction or a settled
  conflict that this database does not already hold is *held* in `sync_held_rows`: it is in no
  number (compare, cards, exports read only the standing rows), `ccpo runs show` lists it, and
  `ccpo sync accept RUN` merges it as a local write would, `ccpo sync reject RUN` sets it aside
  (a forged retraction is undone by rejecting it; it never took effect).

A row this database already holds (its own rows, pushed and pulled back) is a duplicate, as
before. Runs of other machines merge by the rules of sync_merge.py.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import utc_now, write_transaction
from ccpo_cli.store.records import this_host
from ccpo_cli.store.sync_format import item_key

HELD, ACCEPTED, REJECTED = "held", "accepted", "rejected"


def is_this_machines(run: dict[str, Any] | None) -> bool:
    return run is not None and run.get("host") == this_host()


def _local_keys(
    db: sqlite_utils.Database, run: dict[str, Any], table: str, cache: dict
) -> set[str]:
    from ccpo_cli.store.sync_export import _table_rows

    key = (run["id"], table)
    if key not in cache:
        cache[key] = {item_key(table, row) for rows in _table_rows(db, table, run) for row in rows}
    return cache[key]


def hold_unless_known(
    db: sqlite_utils.Database,
    table: str,
    row: dict[str, Any],
    run: dict[str, Any],
    origin: Any,
    cache: dict,
) -> str:
    """A pulled row of this machine's run: `duplicate` when this database holds it already,
    else kept in sync_held_rows (`held`; `duplicate` when it is held already)."""
    key = item_key(table, row)
    if key in _local_keys(db, run, table, cache):
        return "duplicate"
    inserted = db.execute(
        "INSERT OR IGNORE INTO sync_held_rows (run_id, part_table, item_key, row, repo_id, "
        "commit_id, part, state, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            run["id"],
            table,
            key,
            json.dumps(row, default=str, sort_keys=True),
            origin.repo_id,
            origin.commit_id,
            origin.part,
            HELD,
            utc_now(),
        ],
    ).rowcount
    return "held" if inserted else "duplicate"


def held_rows(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """Every row a pull held for run `run_id` (held, accepted or rejected), oldest first, with
    what it is (`summary`) instead of the whole row."""
    shown = []
    for held in db.table("sync_held_rows").rows_where("run_id = ?", [run_id], order_by="id"):
        row = json.loads(held["row"])
        summary = {
            key: row[key]
            for key in ("step", "split", "success_rate", "scope", "reason", "key", "status")
            if key in row
        }
        shown.append(
            {
                "id": held["id"],
                "table": held["part_table"],
                "state": held["state"],
                "summary": summary,
                "repo_id": held["repo_id"],
                "commit_id": held["commit_id"],
                "part": held["part"],
                "recorded_at": held["recorded_at"],
                "settled_at": held["settled_at"],
                "settled_by": held["settled_by"],
            }
        )
    return shown


def settle_held(
    db: sqlite_utils.Database, run: dict[str, Any], ids: list[int] | None, *, accept: bool, by: str
) -> list[dict[str, Any]]:
    """Accept (merge as a local write would) or reject the held rows `ids` of `run` (every held
    row when None). InvalidInput for an id that is not a held row of that run; a row settled
    already is left as it is. Returns each settled row with its outcome."""
    from ccpo_cli.store.sync_merge import MergeCounts, merge_rows

    held = {
        row["id"]: row
        for row in db.table("sync_held_rows").rows_where(
            "run_id = ? AND state = ?", [run["id"], HELD], order_by="id"
        )
    }
    chosen = sorted(held) if ids is None else list(dict.fromkeys(ids))
    unknown = [identifier for identifier in chosen if identifier not in held]
    if unknown:
        raise InvalidInput(
            f"run {run['name']!r}: no held row {', '.join(map(str, unknown))} (ccpo runs show "
            f"{run['name']} lists them)"
        )
    settled = []
    with write_transaction(db):
        for identifier in chosen:
            row = held[identifier]
            outcome = REJECTED
            if accept:
                counts = MergeCounts()
                merge_rows(
                    db,
                    row["part_table"],
                    [json.loads(row["row"])],
                    where=f"held row {identifier} ({row['part']})",
                    counts=counts,
                )
                outcome = next(iter(counts.by_table[row["part_table"]]))
            db.table("sync_held_rows").update(
                identifier,
                {
                    "state": ACCEPTED if accept else REJECTED,
                    "settled_at": utc_now(),
                    "settled_by": by,
                },
            )
            settled.append({"id": identifier, "table": row["part_table"], "outcome": outcome})
    return settled


__all__ = ["held_rows", "hold_unless_known", "is_this_machines", "settle_held"]
