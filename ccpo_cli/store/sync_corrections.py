"""Corrections to the record travel with `ccpo sync`: retractions and settled conflicts.

A retraction (store/retractions.py) names a local evaluation id, which means nothing on another
machine; in a part it names the evaluation by its content hash (or the whole run), so every
machine retracts the same result. A conflict resolution travels as the group it settles (step,
split, evaluation seed) and the content hash of the result it kept; merging it settles the
same group here exactly as `ccpo runs resolve` would (retractions.resolve_by_content), so the
retractions a resolution implies are derived again rather than sent. Two machines that settled
one conflict alike hold one item (its key is the group and the kept content, not the time).

A pull merges parts in table order, so the evaluations and conflicts of a dataset commit are
here before the corrections that name them; a correction whose evaluation or open conflict is
still not here is counted `not_here` and changes nothing. Nothing here talks to the Hub.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal, overload

import sqlite_utils

from ccpo_cli.errors import InvalidInput

# The part tables of this module, in merge order: resolutions first (they derive their own
# retractions), then the retractions a person made.
TABLES = ("resolutions", "retractions")
RETRACTION_COLUMNS = (
    "run_uid",
    "scope",
    "content_hash",
    "step",
    "reason",
    "retracted_by",
    "recorded_at",
)
RESOLUTION_COLUMNS = (
    "run_uid",
    "step",
    "split",
    "eval_seed",
    "kept_value",
    "kept_content_hash",
    "reason",
    "resolved_by",
    "recorded_at",
)


def schemas(pa: Any) -> dict[str, list[tuple[str, Any]]]:
    text, integer, real = pa.string(), pa.int64(), pa.float64()
    return {
        "retractions": [
            ("run_uid", text),
            ("scope", text),
            ("content_hash", text),
            ("step", integer),
            ("reason", text),
            ("retracted_by", text),
            ("recorded_at", text),
        ],
        "resolutions": [
            ("run_uid", text),
            ("step", integer),
            ("split", text),
            ("eval_seed", integer),
            ("kept_value", real),
            ("kept_content_hash", text),
            ("reason", text),
            ("resolved_by", text),
            ("recorded_at", text),
        ],
    }


def item_parts(table: str, row: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two machines' rows the same correction (for `store.sync_format.item_key`)."""
    if table == "retractions":
        return (row["scope"], row["content_hash"])
    return (row["step"], row["split"], row["eval_seed"], row["kept_content_hash"])


def export_rows(
    db: sqlite_utils.Database, table: str, run: dict[str, Any]
) -> Iterator[list[dict[str, Any]]]:
    """A run's corrections in part form: its retractions made by a person (those a resolution
    implies are derived again where it is merged) and its resolutions."""
    uid = run["uid"]
    if table == "retractions":
        rows = [
            dict(row, run_uid=uid)
            for row in db.query(
                "SELECT CASE WHEN r.evaluation_id IS NULL THEN 'run' ELSE 'evaluation' END AS scope, "
                "e.content_hash AS content_hash, r.step AS step, r.reason AS reason, r.retracted_by AS retracted_by, "
                "r.recorded_at AS recorded_at FROM retractions r LEFT JOIN evaluations e ON e.id = r.evaluation_id "
                "WHERE r.run_id = ? AND r.resolution_id IS NULL ORDER BY r.id",
                [run["id"]],
            )
        ]
    else:
        rows = [
            dict({key: row[key] for key in RESOLUTION_COLUMNS if key != "run_uid"}, run_uid=uid)
            for row in db.table("conflict_resolutions").rows_where(
                "run_id = ?", [run["id"]], order_by="id"
            )
        ]
    if rows:
        yield rows


# Overloads so that a required text (the default) is typed `str`: a missing one raises instead.
@overload
def _text(row: dict[str, Any], key: str, where: str, *, required: Literal[True] = True) -> str: ...
@overload
def _text(row: dict[str, Any], key: str, where: str, *, required: bool) -> str | None: ...
def _text(row: dict[str, Any], key: str, where: str, *, required: bool = True) -> str | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 1000:
        raise InvalidInput(f"{where}: a correction whose {key} is not a short text")
    return value


def _merge_resolution(
    db: sqlite_utils.Database, row: dict[str, Any], local: dict[str, Any], where: str
) -> str:
    from ccpo_cli.store.retractions import resolve_by_content

    step = row.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise InvalidInput(f"{where}: a resolution without a step")
    done = resolve_by_content(
        db,
        local["name"],
        local["id"],
        step=step,
        split=_text(row, "split", where),
        eval_seed=row.get("eval_seed"),
        kept_content_hash=_text(row, "kept_content_hash", where),
        reason=_text(row, "reason", where, required=False),
        by=_text(row, "resolved_by", where),
    )
    if done is not None:
        return "new"
    same = db.table("conflict_resolutions").count_where(
        "run_id = ? AND step = ? AND split = ? AND eval_seed IS ? AND kept_content_hash = ?",
        [local["id"], step, row["split"], row.get("eval_seed"), row["kept_content_hash"]],
    )
    return "duplicate" if same else "not_here"


def merge_row(
    db: sqlite_utils.Database, table: str, row: dict[str, Any], local: dict[str, Any], where: str
) -> str:
    """Apply one correction to run `local`; the outcome (new, duplicate, not_here)."""
    if table == "resolutions":
        # A merged correction is not a change of the run on this machine (as a merged evaluation
        # is not): the snapshot time stays the one its own machine recorded.
        updated_at = db.table("runs").get(local["id"])["updated_at"]
        try:
            return _merge_resolution(db, row, local, where)
        finally:
            db.table("runs").update(local["id"], {"updated_at": updated_at})
    return _merge_retraction(db, row, local, where)


def _merge_retraction(
    db: sqlite_utils.Database, row: dict[str, Any], local: dict[str, Any], where: str
) -> str:
    """Retract here what the part's retraction names: the whole run, or the evaluations with
    its content hash (not_here when none is here yet)."""
    from ccpo_cli.store.retractions import retraction_row

    scope = row.get("scope")
    reason, by = _text(row, "reason", where), _text(row, "retracted_by", where)
    if scope == "run":
        if db.table("retractions").count_where(
            "run_id = ? AND evaluation_id IS NULL", [local["id"]]
        ):
            return "duplicate"
        recorded_at = _text(row, "recorded_at", where)
        db.table("retractions").insert(
            retraction_row(local["id"], None, None, reason, by, recorded_at)
        )
        return "new"
    if scope != "evaluation":
        raise InvalidInput(f"{where}: a retraction of scope {scope!r} (expected run or evaluation)")
    found = [
        item["id"]
        for item in db.table("evaluations").rows_where(
            "run_id = ? AND content_hash = ?",
            [local["id"], _text(row, "content_hash", where)],
            select="id",
        )
    ]
    if not found:
        return "not_here"
    taken = {
        item["evaluation_id"]
        for item in db.table("retractions").rows_where(
            f"evaluation_id IN ({', '.join('?' for _ in found)})", found, select="evaluation_id"
        )
    }
    fresh = [evaluation for evaluation in found if evaluation not in taken]
    for evaluation in fresh:
        recorded_at = _text(row, "recorded_at", where)
        db.table("retractions").insert(
            retraction_row(local["id"], evaluation, row.get("step"), reason, by, recorded_at)
        )
    return "new" if fresh else "duplicate"
