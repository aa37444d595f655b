"""Reading runs.db: runs, their evaluations with per-type results, conflicts.

Everything returns plain dicts and lists, so the report and card layers never write SQL.
Single tables are read with sqlite-utils' `rows_where`; the summaries that join or count
across tables are SQL run through `db.query`.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from ccpo_cli.store.records import STANDING, run_id

_JSON_COLUMNS = ("package_versions", "config")


def _decode_run(row: dict[str, Any]) -> dict[str, Any]:
    for column in _JSON_COLUMNS:
        if row.get(column) is not None:
            try:
                row[column] = json.loads(row[column])
            except ValueError:
                pass  # stored by someone else as plain text; show it as it is
    if row.get("git_dirty") is not None:
        row["git_dirty"] = bool(row["git_dirty"])
    return row


# Counts over the standing evaluations (retracted ones left out) and the open conflicts (a
# settled one, store/retractions.py, no longer is).
_RUN_SUMMARY = f"""
    SELECT runs.*,
           (SELECT COUNT(*) FROM evaluations WHERE run_id = runs.id AND {STANDING}) AS n_evaluations,
           (SELECT MAX(step) FROM evaluations WHERE run_id = runs.id AND {STANDING}) AS last_eval_step,
           (SELECT COUNT(*) FROM conflicts WHERE run_id = runs.id
                AND id NOT IN (SELECT conflict_id FROM settled_conflicts)) AS n_conflicts,
           (SELECT COUNT(*) FROM conflicts WHERE run_id = runs.id
                AND id IN (SELECT conflict_id FROM settled_conflicts)) AS n_settled_conflicts,
           (SELECT COUNT(*) FROM retractions WHERE run_id = runs.id AND evaluation_id IS NOT NULL) AS n_retracted
    FROM runs
"""


def _with_retraction(db: sqlite_utils.Database, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from ccpo_cli.store.retractions import retracted_runs

    retracted = retracted_runs(db) if rows else {}
    for row in rows:
        row["retracted"] = retracted.get(row["id"])
    return rows


def list_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Every run (all columns, JSON decoded) with n_evaluations and last_eval_step (of its standing
    evaluations), n_conflicts (open), n_settled_conflicts, n_retracted (retracted evaluations) and
    retracted (the retraction of the whole run, or None), ordered by name."""
    return _with_retraction(
        db, [_decode_run(row) for row in db.query(_RUN_SUMMARY + " ORDER BY runs.name")]
    )


def get_run(db: sqlite_utils.Database, run: str | int) -> dict[str, Any]:
    """One run as a dict (as in `list_runs`); InvalidInput if it does not exist."""
    identifier = run_id(db, run)
    return _with_retraction(
        db, [_decode_run(next(db.query(_RUN_SUMMARY + " WHERE runs.id = ?", [identifier])))]
    )[0]


def run_evaluations(
    db: sqlite_utils.Database,
    run: str | int,
    *,
    split: str | None = "heldout",
    include_retracted: bool = False,
) -> list[dict[str, Any]]:
    """The standing evaluations of a run ordered by step then id, each with `task_types`
    ({short key: {"episodes", "successes", "success"}}); `split=None` gives every split.
    `include_retracted` adds the retracted ones, each with its `retracted` record."""
    identifier = run_id(db, run)
    return evaluations_for_runs(
        db, [identifier], split=split, include_retracted=include_retracted
    ).get(identifier, [])


_PROVENANCE_COLUMNS = ("source_file", "source_line", "content_hash", "recorded_at")


def _attach_task_types(
    db: sqlite_utils.Database, evaluations: list[dict[str, Any]], where: str, params: list[Any]
) -> None:
    """Each evaluation's per-type results under `task_types` (one query for all of them)."""
    by_id = {row["id"]: row for row in evaluations}
    for row in evaluations:
        row["task_types"] = {}
    if not evaluations:
        return
    type_rows = db.table("task_type_results").rows_where(
        f"evaluation_id IN (SELECT id FROM evaluations WHERE {where})", params
    )
    for type_row in type_rows:
        by_id[type_row["evaluation_id"]]["task_types"][type_row["task_type"]] = {
            "episodes": type_row["episodes"],
            "successes": type_row["successes"],
            "success": type_row["success_rate"],
        }


def _attach_retractions(
    db: sqlite_utils.Database, evaluations: list[dict[str, Any]], run_ids: list[int]
) -> None:
    """Each evaluation's retraction under `retracted` (None when it stands)."""
    from ccpo_cli.store.retractions import retracted_evaluations

    retracted = retracted_evaluations(db, list(run_ids))
    for row in evaluations:
        found = retracted.get(row["id"])
        row["retracted"] = (
            None
            if found is None
            else {key: found[key] for key in ("id", "reason", "retracted_by", "recorded_at")}
        )


def evaluations_for_runs(
    db: sqlite_utils.Database,
    run_ids: list[int],
    *,
    split: str | None = "heldout",
    provenance: bool = True,
    include_retracted: bool = False,
) -> dict[int, list[dict[str, Any]]]:
    """Standing evaluations of many runs at once (two queries in all), keyed by run id.

    A retracted evaluation (`ccpo runs retract`) is left out, so no number is computed from it;
    `include_retracted` keeps it, with its retraction under `retracted` (None on the others).
    `provenance=False` leaves out source file/line, content hash and recorded time (faster
    for summaries over many runs)."""
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    where = f"run_id IN ({marks})" + (" AND split = ?" if split is not None else "")
    if not include_retracted:
        where += f" AND {STANDING}"
    params: list[Any] = list(run_ids) + ([split] if split is not None else [])
    columns = (
        None
        if provenance
        else [
            name for name in db.table("evaluations").columns_dict if name not in _PROVENANCE_COLUMNS
        ]
    )
    evaluations = list(
        db.table("evaluations").rows_where(
            where,
            params,
            order_by="run_id, step, id",
            select="*" if columns is None else ", ".join(columns),
        )
    )
    _attach_task_types(db, evaluations, where, params)
    if include_retracted:
        _attach_retractions(db, evaluations, run_ids)
    grouped: dict[int, list[dict[str, Any]]] = {identifier: [] for identifier in run_ids}
    for row in evaluations:
        grouped[row["run_id"]].append(row)
    return grouped


def evaluation_episodes(db: sqlite_utils.Database, evaluation_id: int) -> list[dict[str, Any]]:
    """The recorded episodes of one evaluation, in episode order."""
    return list(
        db.table("episodes").rows_where(
            "evaluation_id = ?", [evaluation_id], order_by="episode_index"
        )
    )


def run_conflicts(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Conflicting evaluation results recorded for a run (content decoded), each with the
    `resolution` that settled it (None while it is open; store/retractions.py)."""
    from ccpo_cli.store.retractions import resolutions

    identifier = run_id(db, run)
    rows = list(db.table("conflicts").rows_where("run_id = ?", [identifier], order_by="step, id"))
    settled = {
        conflict: resolution
        for resolution in resolutions(db, [identifier]).get(identifier, [])
        for conflict in resolution["settled_conflict_ids"]
    }
    for row in rows:
        row["content"] = json.loads(row["content"])
        found = settled.get(row["id"])
        row["resolution"] = (
            None
            if found is None
            else {
                key: found[key]
                for key in (
                    "id",
                    "kept_value",
                    "kept_evaluation_id",
                    "resolved_by",
                    "recorded_at",
                    "reason",
                )
            }
        )
    return rows


def best_evaluation(evaluations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The evaluation with the highest success rate, the earliest (then first recorded) on ties."""
    if not evaluations:
        return None
    return max(evaluations, key=lambda row: (row["success_rate"], -row["step"], -row["id"]))


def run_checkpoints(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Recorded checkpoints of a run, by step."""
    identifier = run_id(db, run)
    return list(db.table("checkpoints").rows_where("run_id = ?", [identifier], order_by="step, id"))


def run_publications(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Recorded Hub publications of a run, oldest first."""
    identifier = run_id(db, run)
    return list(db.table("publications").rows_where("run_id = ?", [identifier], order_by="id"))
