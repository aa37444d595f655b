"""A run snapshot merged from another machine, and the identity conflicts it may record.

A run is matched by its global id, never by its name; one whose name is taken here by another
id is stored as `NAME@HOST` (`_free_name`). Only a snapshot from the run's own host folder
changes a run known here: it fills in what is missing, a newer one (by `updated_at`) updates
status, step and settings, `last_step` only moves forward. An identity field (arm, seed, ...)
recorded with another value elsewhere, or any field of a snapshot in another machine's folder,
is kept in `sync_run_conflicts` and the local value stands; `run_field_conflicts` reads them
back for `ccpo runs show`.
"""

from __future__ import annotations

import datetime
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.names import check_run_name, host_label, qualified_run_name
from ccpo_cli.store.db import utc_now
from ccpo_cli.store.sync_format import RUN_COLUMNS, RUN_IDENTITY, RUN_PROGRESS
from ccpo_cli.store.sync_read import check_step, synced_time


def _free_name(db: sqlite_utils.Database, name: str, host: str | None, uid: str) -> str:
    def taken(candidate: str) -> bool:
        return (
            next(db.table("runs").rows_where("name = ?", [candidate], limit=1, select="id"), None)
            is not None
        )

    candidates = [
        name,
        qualified_run_name(name, host or "unknown-host"),
        qualified_run_name(name, f"{host_label(host)[:55]}-{uid[:8]}"),
    ]
    for candidate in candidates:
        if not taken(candidate):
            return candidate
    raise InvalidInput(f"run {name!r} of {host}: every name ccpo would give it here is taken")


def _checked_snapshot(row: dict[str, Any], where: str) -> tuple[str, str]:
    """The snapshot's global id and name, once what a run row must hold is checked (a usable
    id, a run name, its created and updated times, a number of steps); InvalidInput naming
    `where` otherwise."""
    uid = row.get("uid")
    if not isinstance(uid, str) or not 8 <= len(uid) <= 64 or not uid.isalnum():
        raise InvalidInput(f"{where}: a run without a usable global id ({uid!r})")
    name = check_run_name(row.get("name"), f"{where}: run name")
    if not row.get("created_at") or not row.get("updated_at"):
        raise InvalidInput(f"{where}: run {name!r} lacks its created/updated times")
    synced_time(row["created_at"], "created_at", where)
    synced_time(row["updated_at"], "updated_at", where)
    total = row.get("total_steps")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise InvalidInput(f"{where}: run {name!r}: total_steps {total!r} is not a number of steps")
    return uid, name


def _own_snapshot_changes(
    db: sqlite_utils.Database, local: dict[str, Any], row: dict[str, Any], where: str
) -> dict[str, Any]:
    """What a snapshot from the run's own host changes: an identity field only where none is
    recorded (another value is a conflict), progress where the snapshot is newer, the furthest
    step and the earliest creation time."""
    created = synced_time(row["created_at"], "created_at", where)
    updated = synced_time(row["updated_at"], "updated_at", where)
    changes: dict[str, Any] = {}
    for column in RUN_IDENTITY:
        remote = row.get(column)
        if remote is None or remote == local[column]:
            continue
        if local[column] is None:
            changes[column] = remote
        else:
            _field_conflict(db, local, column, remote, where)
    newer = updated > _local_time(local["updated_at"])
    for column in RUN_PROGRESS:
        remote = row.get(column)
        if remote is not None and remote != local[column] and (local[column] is None or newer):
            changes[column] = remote
    steps = [step for step in (local["last_step"], row.get("last_step")) if step is not None]
    if steps and max(steps) != local["last_step"]:
        changes["last_step"] = max(steps)
    if created < _local_time(local["created_at"], default=created):
        changes["created_at"] = row["created_at"]
    if newer:
        changes["updated_at"] = row["updated_at"]
    return changes


def merge_run(
    db: sqlite_utils.Database,
    row: dict[str, Any],
    where: str,
    host_folder: str | None = None,
    *,
    this_machines: bool = False,
) -> tuple[dict[str, Any], str]:
    """A run snapshot. Only a snapshot from the run's own host folder changes a run known here;
        one in another machine's folder changes nothing and is recorded where it differs (in
        `sync_run_conflicts`): a foreign snapshot of this machine's run is a conflict, never a
        replacement, and so is any pulled snapshot of this machine's own run (`this_machines`,
    store/sync_trust.py). A run not known here is taken from whichever folder holds it."""
    uid, name = _checked_snapshot(row, where)
    local = next(db.table("runs").rows_where("uid = ?", [uid], limit=1), None)
    check_step(row.get("last_step"), None, "last_step", where)
    # A run of this machine is written by this machine only, whatever folder a part is in.
    own = not this_machines and (
        host_folder is None or host_label(row.get("host") or "") == host_folder
    )
    if local is None:
        new = {column: row.get(column) for column in RUN_COLUMNS}
        new["name"] = _free_name(db, name, row.get("host"), uid)
        db.table("runs").insert(new)
        return next(db.table("runs").rows_where("uid = ?", [uid], limit=1)), "new"
    if (
        not own
    ):  # another machine's folder: it changes nothing of the run here, only says where it differs
        differing = [
            column
            for column in (*RUN_IDENTITY, *RUN_PROGRESS, "last_step")
            if row.get(column) is not None and row.get(column) != local[column]
        ]
        for column in differing:
            _field_conflict(db, local, column, row.get(column), where)
        return local, "conflict" if differing else "same"
    changes = _own_snapshot_changes(db, local, row, where)
    if changes:
        db.table("runs").update(local["id"], changes)
        return db.table("runs").get(local["id"]), "updated"
    return local, "same"


def _local_time(value: str | None, default: datetime.datetime | None = None) -> datetime.datetime:
    if not value:
        return default or datetime.datetime.min.replace(tzinfo=datetime.UTC)
    when = datetime.datetime.fromisoformat(value)
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def _field_conflict(
    db: sqlite_utils.Database, local: dict[str, Any], column: str, remote: Any, where: str
) -> None:
    db.table("sync_run_conflicts").insert(
        {
            "run_id": local["id"],
            "field": column,
            "local_value": str(local[column])[:2000],
            "remote_value": str(remote)[:2000],
            "origin": where,
            "recorded_at": utc_now(),
        },
        ignore=True,
    )


def run_field_conflicts(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """Identity fields of a run that another machine recorded with another value."""
    return list(db.table("sync_run_conflicts").rows_where("run_id = ?", [run_id], order_by="id"))
