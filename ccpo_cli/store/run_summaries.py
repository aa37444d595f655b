"""What `ccpo runs list` shows of each run's results, and its filters: the last and the best
standing held-out evaluation and the mean of the default window (the `compare_window` view of
migration m009_views, so the numbers are compare's), in two queries and without statistics."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ccpo_cli.store.records import STANDING


def success_summaries(db: sqlite_utils.Database) -> dict[int, dict[str, Any]]:
    """{run id: {last_success, last_success_step, best_success, best_success_step, window_success,
    window_n}} (success in percent) of the runs with a standing held-out evaluation."""
    found: dict[int, dict[str, Any]] = {}
    rows = db.query(
        f"SELECT run_id, step, success_rate FROM evaluations WHERE split = 'heldout' AND {STANDING} "
        "ORDER BY run_id, step, id"
    )
    for row in rows:
        entry = found.setdefault(
            row["run_id"],
            {
                "best_success": None,
                "best_success_step": None,
                "window_success": None,
                "window_n": 0,
            },
        )
        entry["last_success"], entry["last_success_step"] = row["success_rate"], row["step"]
        if entry["best_success"] is None or row["success_rate"] > entry["best_success"]:
            entry["best_success"], entry["best_success_step"] = row["success_rate"], row["step"]
    for row in db.query(
        "SELECT run_id, AVG(success_rate) AS mean, COUNT(*) AS n FROM compare_window GROUP BY run_id"
    ):
        if row["run_id"] in found:
            found[row["run_id"]].update(window_success=row["mean"], window_n=row["n"])
    return found


@dataclass(frozen=True)
class RunFilter:
    """`ccpo runs list --arm/--status/--benchmark/--model`: each given one must match (the arm by
    its name, the model as the base model id or its last part)."""

    arm: str | None = None
    status: str | None = None
    benchmark: str | None = None
    model: str | None = None

    def keeps(self, run: dict[str, Any]) -> bool:
        model = run.get("base_model") or ""
        return (
            (self.arm is None or run.get("arm") == self.arm)
            and (self.status is None or run.get("status") == self.status)
            and (self.benchmark is None or run.get("benchmark") == self.benchmark)
            and (self.model is None or self.model in (model, model.rsplit("/", 1)[-1]))
        )

    def apply(self, runs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        return [run for run in runs if self.keeps(run)]


# What a run without a standing held-out evaluation shows in place of its success summary.
_NO_SUCCESS = {
    "last_success": None,
    "last_success_step": None,
    "best_success": None,
    "best_success_step": None,
    "window_success": None,
    "window_n": 0,
}


def listed_runs(db: sqlite_utils.Database, run_filter: RunFilter) -> list[dict[str, Any]]:
    """The runs `ccpo runs list` shows: the ones `run_filter` keeps, with the status to show (a
    run whose trainer died is interrupted) and each one's success summary."""
    from ccpo_cli.store.liveness import annotate_runs
    from ccpo_cli.store.queries import list_runs

    runs = run_filter.apply(annotate_runs(db, list_runs(db)))
    summaries = success_summaries(db)
    for run in runs:
        run.update(summaries.get(run["id"]) or _NO_SUCCESS)
    return runs


__all__ = ["RunFilter", "listed_runs", "success_summaries"]
