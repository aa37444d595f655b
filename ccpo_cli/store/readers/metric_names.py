"""The metric names that become evaluations, named once for every reader and for ingest.

Every benchmark verl-agent ships logs `val/success_rate`; per-type rates and other names are
the benchmark's own (ccpo_cli/benchmarks.py). A reader does not know the benchmark yet, so
the names it must keep are those of every benchmark; ingest keeps the ones of the benchmark
the log turns out to be (`evaluation_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ccpo_cli.benchmarks import Benchmark, all_benchmarks
from ccpo_cli.errors import UsageError
from ccpo_cli.store.readers.base import MetricRecord

OVERALL_KEY = "val/success_rate"
MEAN_TURNS_KEY = "val/episode_length/mean"
TRAIN_SUCCESS_KEY = "episode/success_rate"
# Optional exact counts a ccpo metrics file may carry beside the rate.
EPISODES_KEY = "val/episodes"
SUCCESSES_KEY = "val/successes"
COMMON_KEYS = frozenset(
    {OVERALL_KEY, MEAN_TURNS_KEY, TRAIN_SUCCESS_KEY, EPISODES_KEY, SUCCESSES_KEY}
)

_BENCHMARKS = all_benchmarks()
# Success-rate columns (fractions, or percent in some CSV exports) of any benchmark.
RATE_KEYS = frozenset(
    {OVERALL_KEY, TRAIN_SUCCESS_KEY}
    | {task.metric for benchmark in _BENCHMARKS for task in benchmark.task_types}
)
# Everything a reader keeps: the rates and counts, and the names that identify a benchmark.
KNOWN_KEYS = (
    RATE_KEYS
    | COMMON_KEYS
    | {metric for benchmark in _BENCHMARKS for metric in benchmark.identifying_metrics}
)


def task_type_keys(benchmark: Benchmark | None) -> dict[str, str]:
    """{validation metric: short key} of the benchmark's task types (none when not known)."""
    return benchmark.task_type_metrics if benchmark is not None else {}


def evaluation_keys(benchmark: Benchmark | None) -> frozenset[str]:
    """The metric names an evaluation of `benchmark` records; every other name goes unused."""
    return COMMON_KEYS | frozenset(task_type_keys(benchmark))


def known_metric_from_tag(tag: str) -> str | None:
    """The metric a TensorBoard export's file-name tag stands for (it writes `/` as `_`)."""
    flattened = tag.replace("/", "_")
    return next((key for key in sorted(KNOWN_KEYS) if key.replace("/", "_") == flattened), None)


def renamed_candidates(names) -> list[str]:
    """Metric names that look like the validation success rate logged under another name
    (a fork's `val/val/success_rate`), sorted: offered by name when `val/success_rate` is missing."""
    return sorted(
        name
        for name in names
        if name != OVERALL_KEY
        and name.startswith("val/")
        and name.rsplit("/", 1)[-1] in ("success_rate", "success")
    )


@dataclass(frozen=True)
class MetricRename:
    """`--metric FROM=TO`: the metric a log writes as `source` is read as `target`, a name
    ingest records (`val/success_rate`, a per-type rate, ...)."""

    source: str
    target: str

    @classmethod
    def parse(cls, text: str) -> MetricRename:
        source, _, target = text.partition("=")
        source, target = source.strip(), target.strip()
        if not source or not target:
            raise UsageError(
                f"--metric {text!r}: write FROM=TO, e.g. val/val/success_rate={OVERALL_KEY}"
            )
        if target not in KNOWN_KEYS:
            raise UsageError(
                f"--metric {text!r}: {target!r} is no metric ingest records; e.g. {OVERALL_KEY}"
            )
        return cls(source, target)

    def applied(self, record: MetricRecord) -> MetricRecord:
        """The record with `source` read as `target`; a record that logs both keeps its own `target`."""
        if self.source not in record.metrics or self.target in record.metrics:
            return record
        metrics = {
            (self.target if key == self.source else key): value
            for key, value in record.metrics.items()
        }
        return MetricRecord(record.step, metrics, record.line, record.summary)
