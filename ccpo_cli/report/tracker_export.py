"""`ccpo export --to tensorboard|trackio|csv`: any recorded run's curves, an ingested one included.

`run_scalars` reads a run's standing held-out evaluations from runs.db under the names verl-agent
logs them (`val/success_rate` as a fraction, per-type `val/<name>_success_rate`, counts, mean
turns, the training success rate), and the sinks of report/trackers.py write them. Each export
replaces what an earlier export of that run wrote (a TensorBoard folder or CSV file written aside
and renamed; the trackio run deleted and written again), so exporting twice gives one copy.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ccpo_cli.errors import CcpoError, UsageError
from ccpo_cli.report.trackers import (
    DEFAULT_TRACKIO_PROJECT,
    TRACKERS,
    CsvSink,
    ScalarPoint,
    TensorBoardSink,
    TrackioSink,
)
from ccpo_cli.store.readers.metric_names import (
    EPISODES_KEY,
    MEAN_TURNS_KEY,
    OVERALL_KEY,
    SUCCESSES_KEY,
    TRAIN_SUCCESS_KEY,
)


def _wall_time(recorded_at: str | None) -> float | None:
    if not recorded_at:
        return None
    try:
        return datetime.fromisoformat(recorded_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def run_scalars(
    evaluations: list[dict[str, Any]], task_metrics: Mapping[str, str]
) -> list[ScalarPoint]:
    """Standing evaluations (store.queries rows with `task_types`) as points, one per step (the
    mean where a step has several evaluation seeds); `task_metrics` maps a task type's short key
    to the benchmark's metric name."""
    by_step: dict[int, list[dict[str, Any]]] = {}
    for row in evaluations:
        by_step.setdefault(int(row["step"]), []).append(row)
    points = []
    for step, rows in sorted(by_step.items()):
        values: dict[str, list[float]] = {}
        for row in rows:
            train = row.get("train_success_rate")
            found = [
                (OVERALL_KEY, row["success_rate"] / 100.0),
                (EPISODES_KEY, row.get("episodes")),
                (SUCCESSES_KEY, row.get("successes")),
                (MEAN_TURNS_KEY, row.get("mean_turns")),
                (TRAIN_SUCCESS_KEY, None if train is None else train / 100.0),
            ]
            found += [
                (task_metrics.get(key, f"val/{key}_success_rate"), result["success"] / 100.0)
                for key, result in (row.get("task_types") or {}).items()
            ]
            for key, value in found:
                if isinstance(value, (int, float)) and math.isfinite(value):
                    values.setdefault(key, []).append(float(value))
        wall = [time for row in rows if (time := _wall_time(row.get("recorded_at"))) is not None]
        points.append(
            ScalarPoint(
                step,
                {key: sum(found) / len(found) for key, found in values.items()},
                max(wall) if wall else None,
            )
        )
    return points


@dataclass(frozen=True)
class ExportResult:
    run: str
    tracker: str
    points: int
    written_to: str


def _safe_name(run: str) -> str:
    return "".join(char if char.isalnum() or char in "-_.@" else "_" for char in run)


def export_run(
    points: list[ScalarPoint],
    run: str,
    tracker: str,
    out: Path,
    *,
    project: str,
    config: Mapping[str, Any] | None = None,
) -> ExportResult:
    """Write one run's points to `tracker`, replacing an earlier export of the same run."""
    if tracker == "tensorboard":
        final = out / _safe_name(run)
        partial = out / f".{_safe_name(run)}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        sink: Any = TensorBoardSink(partial)
        where = str(final)
    elif tracker == "csv":
        final = partial = out / f"{_safe_name(run)}.csv"
        sink = CsvSink(final)
        where = str(final)
    elif tracker == "trackio":
        sink = TrackioSink(project, run, config, replace=True)
        where = f"trackio project {project}"
    else:
        raise UsageError(f"--to {tracker}: use one of {', '.join(TRACKERS)}")
    try:
        for point in points:
            sink.write(point)
    finally:
        sink.close()
    if tracker == "tensorboard":
        old = out / f".{_safe_name(run)}.{os.getpid()}.old"
        if final.exists():
            final.replace(old)
        partial.replace(final)
        shutil.rmtree(old, ignore_errors=True)
    return ExportResult(run, tracker, len(points), where)


def export_runs(
    db: Any, runs: list[str], tracker: str, out: Path, *, project: str = DEFAULT_TRACKIO_PROJECT
) -> list[ExportResult]:
    """`ccpo export`: each named run's standing held-out curve to `tracker` (InvalidInput for a
    run that is not recorded or is retracted, before anything is written)."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.store.queries import get_run, run_evaluations

    chosen = [get_run(db, name) for name in dict.fromkeys(runs)]
    retracted = [run["name"] for run in chosen if run.get("retracted")]
    if retracted:
        raise InvalidInput(
            f"run(s) {', '.join(retracted)} are retracted (ccpo runs show): nothing of them to export"
        )
    results = []
    for run in chosen:
        metrics: dict[str, str] = {}
        if run.get("benchmark"):
            try:
                metrics = {
                    task.key: task.metric for task in load_benchmark(run["benchmark"]).task_types
                }
            except CcpoError:
                metrics = {}  # a benchmark this ccpo does not ship: the per-type keys keep their short names
        config = {
            key: run.get(key)
            for key in (
                "arm",
                "arm_fingerprint",
                "seed",
                "base_model",
                "backend",
                "benchmark",
                "total_steps",
            )
            if run.get(key) is not None
        }
        points = run_scalars(run_evaluations(db, run["name"]), metrics)
        results.append(
            export_run(points, run["name"], tracker, out, project=project, config=config)
        )
    return results


__all__ = ["ExportResult", "export_run", "export_runs", "run_scalars"]
