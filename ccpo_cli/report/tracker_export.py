"""`ccpo export --to tensorboard|trackio|wandb|csv`: any recorded run's curves, an ingested one included.

`run_scalars` reads a run's standing held-out evaluations from runs.db under the names verl-agent
logs them (`val/success_rate` as a fraction, per-type `val/<name>_success_rate`, counts, mean
turns, the training success rate: the names of store/readers/metric_names.py), and
`with_logged_scalars` adds every other scalar the run logged (the metrics table, under the
names it was logged with: loss, KL, entropy, ...); the sinks of report/trackers.py write them.
The evaluation fields come from the standing evaluations only (a retracted one is not
exported), the other scalars at every step they were logged. Each export replaces what an
earlier export of that run wrote (a TensorBoard folder or CSV file written aside and renamed;
the trackio run deleted and written again; the wandb run written under a fixed id and the
earlier folder of that id removed), so exporting twice gives one copy. Only
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
from ccpo_cli.owned_output import (
    check_output_folder,
    check_replaceable,
    mapped_os_errors,
    mark_owned,
    remove_owned,
    replace_owned,
)
from ccpo_cli.report.trackers import (
    DEFAULT_TRACKIO_PROJECT,
    TRACKERS,
    CsvSink,
    ScalarPoint,
    TensorBoardSink,
    TrackioSink,
    WandbSink,
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


def with_logged_scalars(
    points: list[ScalarPoint],
    logged: Mapping[int, Mapping[str, float]],
    evaluation_keys: frozenset[str],
) -> list[ScalarPoint]:
    """`points` (from the standing evaluations) with every scalar the run logged at each step
    (`store.metrics.run_metric_steps`) added, the NaNs and infinities left out as the trackers
    take finite numbers. A name the evaluations give (`evaluation_keys`) comes from them alone,
    so a retracted evaluation stays out, except the training success rate, which the metrics
    table holds at steps without a validation; where both have a value of a step, the
    evaluation's stands."""
    by_step = {point.step: point for point in points}
    merged = []
    for step in sorted(set(by_step) | set(logged)):
        values = {
            name: value
            for name, value in logged.get(step, {}).items()
            if math.isfinite(value) and (name == TRAIN_SUCCESS_KEY or name not in evaluation_keys)
        }
        point = by_step.get(step)
        if point is not None:
            values.update(point.values)
        if values:
            merged.append(ScalarPoint(step, values, None if point is None else point.wall_time))
    return merged


@dataclass(frozen=True)
class ExportResult:
    run: str
    tracker: str
    points: int
    written_to: str


def _safe_name(run: str) -> str:
    return "".join(char if char.isalnum() or char in "-_.@" else "_" for char in run)


def _wandb_id(run: str, uid: str | None) -> str:
    """The wandb run id of an export: the run's global id (the same run, the same wandb run),
    else a digest of its name; wandb takes letters, digits, `-` and `_`."""
    import hashlib

    return uid or hashlib.sha256(run.encode()).hexdigest()[:32]


def _write_all(sink: Any, points: list[ScalarPoint]) -> None:
    try:
        for point in points:
            sink.write(point)
    finally:
        sink.close()


# The trackers that write files under `out`: the sink, the name's suffix, and whether it is a folder.
FILE_EXPORTS = {
    "tensorboard": (TensorBoardSink, "", True),
    "csv": (CsvSink, ".csv", False),
}


def _export_wandb(
    points: list[ScalarPoint], run: str, out: Path, project: str, config: Mapping[str, Any] | None
) -> str:
    """Write a wandb run under a fixed id (the run's), and remove the earlier export of that id
    once the new one is written; only ccpo's own earlier folder goes."""
    run_id = _wandb_id(run, (config or {}).get("uid"))
    earlier = sorted((out / "wandb").glob(f"*-{run_id}"))
    for folder in earlier:
        check_replaceable(folder)  # before writing: only ccpo's own earlier export goes
    with mapped_os_errors(out):
        sink = WandbSink(project, run, out, config, run_id=run_id)
        _write_all(sink, points)
        mark_owned(sink.folder, "ccpo export --to wandb")
    for folder in earlier:
        if folder != sink.folder:
            remove_owned(folder)
    return str(sink.folder)


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
    if tracker in FILE_EXPORTS:
        sink_type, suffix, folder = FILE_EXPORTS[tracker]
        final = out / f"{_safe_name(run)}{suffix}"
        replace_owned(
            final,
            lambda partial: _write_all(sink_type(partial), points),
            folder=folder,
            what=f"ccpo export --to {tracker}",
        )
        where = str(final)
    elif tracker == "trackio":
        _write_all(TrackioSink(project, run, config, replace=True), points)
        where = f"trackio project {project}"
    elif tracker == "wandb":
        where = _export_wandb(points, run, out, project, config)
    else:
        raise UsageError(f"--to {tracker}: use one of {', '.join(TRACKERS)}")
    return ExportResult(run, tracker, len(points), where)


# The run's recorded identity an export carries as the tracker run's configuration.
EXPORTED_CONFIG = (
    "arm",
    "arm_fingerprint",
    "seed",
    "base_model",
    "backend",
    "benchmark",
    "total_steps",
    "uid",
)


def _task_metrics(benchmark: str | None) -> dict[str, str]:
    """{task type key: metric name} of the run's benchmark; empty for a benchmark this ccpo does
    not ship (the per-type keys then keep their short names)."""
    from ccpo_cli.benchmarks import load_benchmark

    if not benchmark:
        return {}
    try:
        return {task.key: task.metric for task in load_benchmark(benchmark).task_types}
    except CcpoError:
        return {}


def export_runs(
    db: Any, runs: list[str], tracker: str, out: Path, *, project: str = DEFAULT_TRACKIO_PROJECT
) -> list[ExportResult]:
    """`ccpo export`: each named run's standing held-out curve to `tracker` (InvalidInput for a
    run that is not recorded or is retracted, before anything is written)."""
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.store.metrics import run_metric_steps
    from ccpo_cli.store.queries import get_run, run_evaluations
    from ccpo_cli.store.readers.metric_names import COMMON_KEYS

    if tracker in ("tensorboard", "csv", "wandb"):
        check_output_folder(out)  # a file, or a run folder, before anything is read or written
    chosen = [get_run(db, name) for name in dict.fromkeys(runs)]
    retracted = [run["name"] for run in chosen if run.get("retracted")]
    if retracted:
        raise InvalidInput(
            f"run(s) {', '.join(retracted)} are retracted (ccpo runs show): nothing of them to export"
        )
    results = []
    for run in chosen:
        metrics = _task_metrics(run.get("benchmark"))
        config = {key: run.get(key) for key in EXPORTED_CONFIG if run.get(key) is not None}
        points = with_logged_scalars(
            run_scalars(run_evaluations(db, run["name"]), metrics),
            run_metric_steps(db, run["name"]),
            COMMON_KEYS | frozenset(metrics.values()),
        )
        results.append(
            export_run(points, run["name"], tracker, out, project=project, config=config)
        )
    return results


__all__ = ["ExportResult", "export_run", "export_runs", "run_scalars", "with_logged_scalars"]
