"""`ccpo export --to tensorboard|trackio|csv`: any recorded run's curves, an ingested one included.

`run_scalars` reads a run's standing held-out evaluations from runs.db under the names verl-agent
logs them (`val/success_rate` as a fraction, per-type `val/<name>_success_rate`, counts, mean
turns, the training success rate), and the sinks of report/trackers.py write them. Each export
replaces what an earlier export of that run wrote (a TensorBoard folder or CSV file written aside
and renamed; the trackio run deleted and written again), so exporting twice gives one copy. Only
ccpo's own marked output is ever replaced (ccpo_cli/owned_output.py): a user's file or folder of
that name, or a run folder, is refused with exit 3, never renamed or deleted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ccpo_cli.errors import CcpoError, UsageError
from ccpo_cli.owned_output import check_output_folder, replace_owned
from ccpo_cli.report.trackers import (
    DEFAULT_TRACKIO_PROJECT,
    TRACKERS,
    CsvSink,
    ScalarPoint,
    TensorBoardSink,
    TrackioSink,
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
                ("val/success_rate", row["success_rate"] / 100.0),
                ("val/episodes", row.get("episodes")),
                ("val/successes", row.get("successes")),
                ("val/episode_length/mean", row.get("mean_turns")),
                ("episode/success_rate", None if train is None else train / 100.0),
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
    """Write one run's points to `tracker`, replacing an earlier export of the same run: only
    ccpo's own marked output is replaced (owned_output.replace_owned), and a failed write leaves
    the earlier export as it was and no partial file."""

    def write_all(sink: Any) -> None:
        try:
            for point in points:
                sink.write(point)
        finally:
            sink.close()

    if tracker == "tensorboard":
        final = out / _safe_name(run)
        replace_owned(
            final,
            lambda partial: write_all(TensorBoardSink(partial)),
            folder=True,
            what="ccpo export --to tensorboard",
        )
        where = str(final)
    elif tracker == "csv":
        final = out / f"{_safe_name(run)}.csv"
        replace_owned(
            final,
            lambda partial: write_all(CsvSink(partial)),
            folder=False,
            what="ccpo export --to csv",
        )
        where = str(final)
    elif tracker == "trackio":
        write_all(TrackioSink(project, run, config, replace=True))
        where = f"trackio project {project}"
    else:
        raise UsageError(f"--to {tracker}: use one of {', '.join(TRACKERS)}")
    return ExportResult(run, tracker, len(points), where)


def export_runs(
    db: Any, runs: list[str], tracker: str, out: Path, *, project: str = DEFAULT_TRACKIO_PROJECT
) -> list[ExportResult]:
    """`ccpo export`: each named run's standing held-out curve to `tracker` (InvalidInput for a
    run that is not recorded or is retracted, before anything is written)."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.store.queries import get_run, run_evaluations

    if tracker in ("tensorboard", "csv"):
        check_output_folder(out)  # a file, or a run folder, before anything is read or written
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
