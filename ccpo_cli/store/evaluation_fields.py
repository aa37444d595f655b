"""One step's logged metrics → the fields of one evaluation (rates as percent).

Per-type rates are those of the log's benchmark (ccpo_cli/benchmarks.py): ALFWorld's six
types, Search's data sources; a benchmark without task types, or one not known, has none.
"""

from __future__ import annotations

import math
from typing import Any

from ccpo_cli.benchmarks import Benchmark
from ccpo_cli.store.readers.base import BadRecord, MetricRecord, whole_number
from ccpo_cli.store.readers.metric_names import (
    EPISODES_KEY,
    MEAN_TURNS_KEY,
    OVERALL_KEY,
    SUCCESSES_KEY,
    TRAIN_SUCCESS_KEY,
    task_type_keys,
)


def _rate_percent(value: Any, key: str) -> float | None:
    """A logged fraction as percent; None for NaN/null (the caller reports it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"field {key!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        return None
    if not 0.0 <= value <= 1.0:
        raise BadRecord(f"field {key!r} is {value}; verl logs success rates as fractions 0-1")
    return 100.0 * value


def _optional_number(value: Any, key: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"field {key!r} must be a number, got {value!r}")
    return float(value) if math.isfinite(value) else None


def _optional_count(value: Any, key: str) -> int | None:
    """An episode count: a whole number, never rounded (10.7 episodes is not a count)."""
    if value is None or isinstance(value, float) and math.isnan(value):
        return None
    return whole_number(value, key, what="a whole number of episodes")


def evaluation_from_metrics(
    record: MetricRecord, where: str, warnings: list[str], benchmark: Benchmark | None = None
) -> dict[str, Any] | None:
    """The `record_evaluation` keyword arguments one step's metrics describe, or None when
    the step has no held-out evaluation. Per-type rates are `benchmark`'s (none without one).
    NaN/null values are left out with a warning; a value that cannot be recorded raises
    BadRecord with the reason."""
    metrics = record.metrics
    per_type = task_type_keys(benchmark)
    if OVERALL_KEY not in metrics:
        if any(key in metrics for key in per_type):
            warnings.append(
                f"{where}: step {record.step} has per-type rates but no {OVERALL_KEY}; skipped"
            )
        return None
    overall = _rate_percent(metrics[OVERALL_KEY], OVERALL_KEY)
    if overall is None:
        warnings.append(
            f"{where}: step {record.step}: {OVERALL_KEY} is NaN or missing; evaluation not recorded"
        )
        return None
    task_types = {}
    for metric_key, short in per_type.items():
        if metric_key in metrics:
            rate = _rate_percent(metrics[metric_key], metric_key)
            if rate is None:
                warnings.append(
                    f"{where}: step {record.step}: {metric_key} is NaN or missing; left out"
                )
            else:
                task_types[short] = rate
    train_rate = metrics.get(TRAIN_SUCCESS_KEY)
    return {
        "step": record.step,
        "success_rate": overall,
        "task_types": task_types,
        "mean_turns": _optional_number(metrics.get(MEAN_TURNS_KEY), MEAN_TURNS_KEY),
        "train_success_rate": _rate_percent(train_rate, TRAIN_SUCCESS_KEY)
        if train_rate is not None
        else None,
        "episodes": _optional_count(metrics.get(EPISODES_KEY), EPISODES_KEY),
        "successes": _optional_count(metrics.get(SUCCESSES_KEY), SUCCESSES_KEY),
    }
