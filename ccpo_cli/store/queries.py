"""Reading runs.db: runs, their evaluations with per-type results, conflicts.

Everything returns plain dicts and lists, so the report and card layers never write SQL.
Single tables are read with sqlite-utils' `rows_where`; the summaries that join or count
across tables are SQL run through `db.query`.
"""

from __future__ import annotations

import json
from typing import Any

import sqlite_utils

from ccpo_cli.store.records import run_id

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


_RUN_SUMMARY = """
    SELECT runs.*,
           (SELECT COUNT(*) FROM evaluations WHERE run_id = runs.id) AS n_evaluations,
           (SELECT MAX(step) FROM evaluations WHERE run_id = runs.id) AS last_eval_step,
           (SELECT COUNT(*) FROM conflicts WHERE run_id = runs.id) AS n_conflicts
    FROM runs
"""


def list_runs(db: sqlite_utils.Database) -> list[dict[str, Any]]:
    """Every run (all columns, JSON decoded) with n_evaluations, last_eval_step, n_conflicts,
    ordered by name."""
    return [_decode_run(row) for row in db.query(_RUN_SUMMARY + " ORDER BY runs.name")]


def get_run(db: sqlite_utils.Database, run: str | int) -> dict[str, Any]:
    """One run as a dict (as in `list_runs`); InvalidInput if it does not exist."""
    identifier = run_id(db, run)
    return _decode_run(next(db.query(_RUN_SUMMARY + " WHERE runs.id = ?", [identifier])))


def run_evaluations(
    db: sqlite_utils.Database, run: str | int, *, split: str | None = "heldout"
) -> list[dict[str, Any]]:
    """The evaluations of a run ordered by step then id, each with `task_types`
    ({short key: {"episodes", "successes", "success"}}); `split=None` gives every split."""
    identifier = run_id(db, run)
    return evaluations_for_runs(db, [identifier], split=split).get(identifier, [])


_PROVENANCE_COLUMNS = ("source_file", "source_line", "content_hash", "recorded_at")


def evaluations_for_runs(
    db: sqlite_utils.Database, run_ids: list[int], *, split: str | None = "heldout", provenance: bool = True
) -> dict[int, list[dict[str, Any]]]:
    """Evaluations of many runs at once (two queries in all), keyed by run id.

    `provenance=False` leaves out source file/line, content hash and recorded time (faster
    for summaries over many runs)."""
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    where = f"run_id IN ({marks})" + (" AND split = ?" if split is not None else "")
    params: list[Any] = list(run_ids) + ([split] if split is not None else [])
    columns = None if provenance else [name for name in db["evaluations"].columns_dict if name not in _PROVENANCE_COLUMNS]
    evaluations = list(
        db["evaluations"].rows_where(where, params, order_by="run_id, step, id",
                                     select="*" if columns is None else ", ".join(columns))
    )
    by_id = {row["id"]: row for row in evaluations}
    for row in evaluations:
        row["task_types"] = {}
    if evaluations:
        type_rows = db["task_type_results"].rows_where(
            f"evaluation_id IN (SELECT id FROM evaluations WHERE {where})", params
        )
        for type_row in type_rows:
            by_id[type_row["evaluation_id"]]["task_types"][type_row["task_type"]] = {
                "episodes": type_row["episodes"],
                "successes": type_row["successes"],
                "success": type_row["success_rate"],
            }
    grouped: dict[int, list[dict[str, Any]]] = {identifier: [] for identifier in run_ids}
    for row in evaluations:
        grouped[row["run_id"]].append(row)
    return grouped


def evaluation_episodes(db: sqlite_utils.Database, evaluation_id: int) -> list[dict[str, Any]]:
    """The recorded episodes of one evaluation, in episode order."""
    return list(db["episodes"].rows_where("evaluation_id = ?", [evaluation_id], order_by="episode_index"))


def run_conflicts(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Conflicting evaluation results recorded for a run (content decoded)."""
    identifier = run_id(db, run)
    rows = list(db["conflicts"].rows_where("run_id = ?", [identifier], order_by="step, id"))
    for row in rows:
        row["content"] = json.loads(row["content"])
    return rows


def best_evaluation(evaluations: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The evaluation with the highest success rate, the earliest (then first recorded) on ties."""
    if not evaluations:
        return None
    return max(evaluations, key=lambda row: (row["success_rate"], -row["step"], -row["id"]))


def run_checkpoints(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Recorded checkpoints of a run, by step."""
    identifier = run_id(db, run)
    return list(db["checkpoints"].rows_where("run_id = ?", [identifier], order_by="step, id"))


def run_publications(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Recorded Hub publications of a run, oldest first."""
    identifier = run_id(db, run)
    return list(db["publications"].rows_where("run_id = ?", [identifier], order_by="id"))
