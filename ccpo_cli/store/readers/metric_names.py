"""The metric names that become evaluations, named once for every reader and for ingest.

Every benchmark verl-agent ships logs `val/success_rate`; per-type rates and other names are
the benchmark's own (ccpo_cli/benchmarks.py). A reader does not know the benchmark yet, so
the names it must keep are those of every benchmark; ingest keeps the ones of the benchmark
the log turns out to be (`evaluation_keys`).
"""

from __future__ import annotations

import re
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


# Validation names of other trainers, read as the per-source (task-type) success rates they are:
# - Search-R1 logs `val/test_score/<data_source>`, the mean of its validation reward, which is
#   its exact match (qa_em: 1 for an exact match, format score 0 at validation): a success rate;
# - verl >= 0.5 logs `val-aux/<data_source>/answer_em/mean@1`, the exact-match success of one
#   sample per question: a success rate. Its `val-core/<data_source>/reward/mean@1` is the
#   reward (shaped, negative on some sources), not a success rate: never read by default.
_DIALECTS = (
    (re.compile(r"^val/test_score/(?P<source>[\w.-]+)$"), "Search-R1's exact-match test score"),
    (
        re.compile(r"^val-aux/(?P<source>[\w.-]+)/answer_em/mean@1$"),
        "verl's exact-match success of one sample",
    ),
)
# Per-source names ingest knows (the search benchmark's task types, by data source).
_SOURCE_RATES = {
    metric: metric[len("val/") : -len("_success_rate")]
    for benchmark in _BENCHMARKS
    for metric in benchmark.task_type_metrics
    if metric.startswith("val/") and metric.endswith("_success_rate")
}


def dialect_rate(key: str) -> tuple[str, str] | None:
    """(the per-type metric ingest records, what the name is) for another trainer's name of a
    per-source success rate (`_DIALECTS`); None for any other name, or a source no benchmark has."""
    for pattern, meaning in _DIALECTS:
        match = pattern.match(key)
        if match is not None:
            target = f"val/{match.group('source')}_success_rate"
            if target in _SOURCE_RATES:
                return target, meaning
    return None


def read_dialects(record: MetricRecord) -> tuple[MetricRecord, list[str]]:
    """The record with other trainers' per-source success rates read under ingest's names (a name
    the record already logs is kept), and the names read. Their overall rate, pooled over every
    question, is not logged: it is known only when every source has the same rate (a pooled
    rate lies between its sources' rates), and is then set; otherwise it stays missing."""
    found = {}
    for key, value in record.metrics.items():
        known = dialect_rate(key)
        if known is not None and known[0] not in record.metrics:
            found[known[0]] = (key, value)
    if not found:
        return record, []
    metrics = dict(record.metrics)
    metrics.update({target: value for target, (_, value) in found.items()})
    values = {value for _, value in found.values()}
    if OVERALL_KEY not in metrics and len(values) == 1:
        metrics[OVERALL_KEY] = next(iter(values))
    read = [key for key, _ in found.values()]
    return MetricRecord(record.step, metrics, record.line, record.summary), read


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


# A validation metric under another name: `val/...success_rate` of a fork, or a verl >= 0.5
# `val-core/` / `val-aux/` name of a per-source accuracy, exact match, score or reward.
_VALIDATION_LIKE = re.compile(
    r"^val(?:-core|-aux)?/(?:(?P<source>[\w.-]+)/)?"
    r"(?P<what>[\w]*(?:success_rate|success|acc|accuracy|answer_em|exact_match|em|score|reward))"
    r"(?:/mean@\d+)?$"
)


_TEST_SCORE = re.compile(r"^val/test_score/(?P<source>[\w.-]+)$")


def renamed_candidates(names) -> list[tuple[str, str]]:
    """(name, the `--metric` target to read it as) for each metric name that looks like a
    validation result logged under another name (a fork's `val/val/success_rate`, verl's
    `val-core/<source>/acc/mean@30`, its reward), a success or accuracy first, then scores, then
    rewards: offered by name when no validation was read.
    A per-source name is offered as that source's rate when a benchmark knows the source."""
    found = []
    for name in sorted(names):
        if name == OVERALL_KEY or name in KNOWN_KEYS:
            continue
        match = _VALIDATION_LIKE.match(name) or _TEST_SCORE.match(name)
        if match is None:
            continue
        source = match.group("source")
        target = f"val/{source}_success_rate" if source is not None else OVERALL_KEY
        found.append((name, target if target in _SOURCE_RATES else OVERALL_KEY))
    # A name that says success or accuracy first, a score next, a reward last.
    return sorted(found, key=lambda item: (_kind_rank(item[0]), item[0]))


def _kind_rank(name: str) -> int:
    last = name.rsplit("/mean@", 1)[0].rsplit("/", 1)[-1]
    if last.endswith("reward"):
        return 2
    return 1 if last.endswith("score") else 0


def is_reward(name: str) -> bool:
    """Whether a validation name says it is a reward or score, not a success rate."""
    return name.rsplit("/mean@", 1)[0].rsplit("/", 1)[-1] in ("reward", "score", "test_score")


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
