"""Bringing training metrics into runs.db: `ingest_file`.

The readers (`ccpo_cli.store.readers`, one module per format) stream a file or run folder as
per-step records; this module turns each record into an evaluation and writes it as it goes,
inside one transaction: memory does not grow with the file, and a refused file leaves the
database exactly as it was.

`val/success_rate` (a fraction) becomes an evaluation in percent, the benchmark's per-type
rates (`val/<type>_success_rate`) its task-type rows, `val/episode_length/mean` its mean turns
and `episode/success_rate` the training success rate at that step. Every number of every step
(loss, KL, entropy, the rates too) is also kept in the `metrics` table (store/metrics.py); the
names that are no evaluation field are listed in the report as unused.

The benchmark (ccpo_cli/benchmarks.py) is the one `--benchmark` names, else the one the metric
names or the printed config's `env.env_name` identify; evidence that contradicts it refuses the
file. What the log printed about its run (verl's resolved config, traced commands) is recorded
as run facts (store/facts.py).

Ingest is tolerant by default: a line or record that cannot be read (cut, garbled, binary, a
value that cannot be recorded) is skipped and reported with its line number, NUL bytes are
dropped, and the rest is recorded. The file is refused (exit 3) only when no record in it
reads, or at the first bad line under `strict`. A last line without its newline is a file
still being written: it is left for the next ingest and reported.

One concern, kept in one file past 400 lines: `ingest_file` is one streaming pass inside one
transaction: the benchmark choice, the identity filled in from the log, each record written and
the report of what was skipped all happen within it and share its state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.arms import Arm
from ccpo_cli.benchmarks import (
    Benchmark,
    benchmark_for_env_name,
    detect_benchmark,
    list_benchmarks,
    load_benchmark,
)
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import write_transaction
from ccpo_cli.store.evaluation_fields import evaluation_from_metrics
from ccpo_cli.store.facts import (
    VERL_CONFIG_KEYS,
    facts_from_config,
    facts_from_log,
    flat_config,
    hub_model_id,
    reconcile_total_steps,
    record_ingest_facts,
    run_facts,
    states_val_only,
    unexpanded_variables,
)
from ccpo_cli.store.field_values import field_values
from ccpo_cli.store.identity import ExternalArm
from ccpo_cli.store.metrics import MetricCounts, MetricWriter, scalar_values
from ccpo_cli.store.readers import FORMATS, detect_format, read_events
from ccpo_cli.store.readers.base import (
    MAX_DROPPED_KEYS,
    MAX_LINE_BYTES,
    MAX_LINE_TEXT,
    BadRecord,
    Cleaned,
    IncompleteTail,
    MetricRecord,
    ReadStats,
    Skipped,
    StatedConfig,
)
from ccpo_cli.store.readers.metric_names import (
    OVERALL_KEY,
    MetricRename,
    dialect_rate,
    evaluation_keys,
    is_reward,
    read_dialects,
    renamed_candidates,
    task_type_keys,
)
from ccpo_cli.store.records import (
    EvaluationOutcome,
    agree_at_precision,
    ensure_run,
    latest_standing_evaluation,
    mark_new_run_reference,
    record_evaluation_outcome,
    update_run_state,
)
from ccpo_cli.vocabulary import AUTO, CONSOLE

HELDOUT = "heldout"  # the role of a run's validations: what compare, the cards and the views read

__all__ = [
    "FORMATS",
    "MAX_LINE_BYTES",
    "MAX_LINE_TEXT",
    "IngestReport",
    "ParsedFile",
    "evaluation_from_metrics",
    "ingest_file",
    "parse_metrics_file",
    "require_metrics_file",
]

# The report keeps this many skipped lines (with reasons) and cleaned line numbers; the counts are exact.
REPORTED_LINES = 10_000
# Skipped lines named one by one in the warning on stderr; the rest are in --json.
WARNED_LINES = 10
# Unused metric names (no evaluation field; kept in the metrics table): at most MAX_DROPPED_KEYS
# distinct ones are counted, the first REPORTED_KEYS (sorted) go to --json; WARNED_KEYS names
# are named in a warning line.
REPORTED_KEYS = 1_000
WARNED_KEYS = 8
# A log restarted into the same file prints its config again; more than this many are not kept.
MAX_STATED_CONFIGS = 16

ProgressCallback = Callable[[int], None]


@dataclass
class IngestReport:
    """What one `ingest_file` call found and did (`as_dict` for JSON)."""

    path: str
    format: str
    run: str
    lines: int = 0
    steps: int = 0
    last_step: int | None = None
    evaluations_found: int = 0
    new: int = 0
    duplicates: int = 0
    completed: int = 0  # duplicates that filled in what the recorded evaluation left out
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    incomplete_tail_line: int | None = None
    skipped: int = 0
    skipped_lines: list[dict[str, Any]] = field(default_factory=list)
    cleaned: int = 0
    cleaned_lines: list[int] = field(default_factory=list)
    fact_conflicts: list[dict[str, Any]] = field(
        default_factory=list
    )  # protocol facts (store/facts.py)
    benchmark: str | None = None
    benchmark_evidence: str | None = None
    stated_facts: dict[str, Any] = field(
        default_factory=dict
    )  # what the log printed (store/facts.py)
    kind: str | None = None  # "evaluation" for a log that only validated (trainer.val_only)
    first_step: int | None = None  # the last field `as_dict` gives as it is, in this order
    unused_keys: set[str] = field(default_factory=set)  # bounded by MAX_DROPPED_KEYS
    config_left_out_lines: list[int] = field(
        default_factory=list
    )  # other output inside a printed config
    summary_not_placed: bool = False  # a wandb summary's validation whose step is not known
    per_source_only_steps: int = 0  # validations of per-source rates without an overall rate
    dialect_keys: set[str] = field(default_factory=set)  # other trainers' names read (metric_names)
    crashed: bool = False  # the log ends with Hydra's report that the job raised
    task_types: set[str] = field(default_factory=set)  # the per-type rates its evaluations held
    split: str | None = None  # the split its evaluations ran on (--split, else the log's)
    eval_seed: int | None = None  # an evaluation-only log's env.seed: its evaluations' eval_seed
    evaluated_checkpoint: int | None = None  # the checkpoint an evaluation-only log loaded
    metrics: MetricCounts = field(default_factory=MetricCounts)  # scalars kept (store/metrics.py)

    def skip(self, event: Skipped) -> None:
        self.skipped += 1
        if len(self.skipped_lines) < REPORTED_LINES:
            self.skipped_lines.append({"line": event.line, "reason": event.reason})

    def note_unused(self, keys) -> None:
        for key in keys:
            if len(self.unused_keys) >= MAX_DROPPED_KEYS:
                return
            self.unused_keys.add(key)

    def count(self, outcome: EvaluationOutcome, step: int, line: int | None, where: str) -> None:
        """Count what recording one evaluation did; a conflict is listed and warned about."""
        if outcome.outcome == "new":
            self.new += 1
        elif outcome.outcome == "duplicate":
            self.duplicates += 1
            self.completed += bool(outcome.completed)
        else:
            self.conflicts.append(
                {
                    "step": step,
                    "line": line,
                    "kept_evaluation_id": outcome.evaluation_id,
                    "conflict_id": outcome.conflict_id,
                }
            )
            self.warnings.append(
                f"{where}: step {step} differs from the evaluation already recorded "
                f"(id {outcome.evaluation_id}); kept both, the new one as conflict {outcome.conflict_id}"
            )

    @property
    def unused_metric_keys(self) -> list[str]:
        return sorted(self.unused_keys)[:REPORTED_KEYS]

    def as_dict(self) -> dict[str, Any]:
        return {
            **field_values(self, through="first_step"),
            "resumed_from": None
            if self.evaluated_checkpoint is not None
            else self.stated_facts.get("resumed_from"),
            "eval_seed": self.eval_seed,
            "evaluated_checkpoint": self.evaluated_checkpoint,
            "read_as_success_rates": sorted(self.dialect_keys),
            "crashed": self.crashed,
            "split": self.split,
            "config_left_out_lines": self.config_left_out_lines,
            "unused_metric_keys": self.unused_metric_keys,
            "unused_metric_key_count": len(self.unused_keys),
            "unused_metric_keys_capped": len(self.unused_keys) >= MAX_DROPPED_KEYS,
            "metrics": self.metrics.as_dict(),
        }


def require_metrics_file(path: str | Path) -> Path:
    """The path, if it names a non-empty regular file or a folder; InvalidInput (exit 3) otherwise."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"{path}: no such file")
    if path.is_dir():
        detect_format(path)  # refuses a folder that is neither a wandb nor a TensorBoard run
        return path
    if not path.is_file():
        raise InvalidInput(f"{path}: not a regular file")
    if path.stat().st_size == 0:
        raise InvalidInput(f"{path}: the file is empty; no metrics to ingest")
    return path


def _where(path: Path | str, line: int | None) -> str:
    return f"{path}:{line}" if line is not None else str(path)


def _events(
    path: Path,
    fmt: str,
    stats: ReadStats,
    report: IngestReport,
    strict: bool,
    metric: str | None,
    source_run: str | None,
    renames: Sequence[MetricRename] = (),
    logged: Callable[[MetricRecord], None] | None = None,
):
    """The records of the file and what it stated about its run, with skips, cleaned lines and
    the tail noted in `report` (raised at once under `strict`); `renames` applied to each
    record, then other trainers' names of per-source success rates read (`read_dialects`).
    `logged` sees each record before either, under the names the file logged them with."""
    report.format, events = read_events(
        path, fmt, stats, metric=metric, notes=report.warnings, source_run=source_run
    )
    for event in events:
        if isinstance(event, MetricRecord):
            if logged is not None:
                logged(event)
            for rename in renames:
                event = rename.applied(event)
            event, read = read_dialects(event)
            report.dialect_keys.update(read)
            yield event
        elif isinstance(event, StatedConfig):
            yield event
        elif isinstance(event, IncompleteTail):
            report.incomplete_tail_line = event.line
        elif isinstance(event, Cleaned):
            if strict:
                raise InvalidInput(f"{path}:{event.line}: binary content (NUL bytes)")
            report.cleaned += 1
            if len(report.cleaned_lines) < REPORTED_LINES:
                report.cleaned_lines.append(event.line)
        else:
            if strict:
                raise InvalidInput(f"{_where(path, event.line)}: {event.reason}")
            report.skip(event)


@dataclass
class ParsedFile:
    """A whole file read into memory: for tests and small files; `ingest_file` streams."""

    path: Path
    format: str
    records: list[MetricRecord]
    lines: int
    incomplete_tail_line: int | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)


def parse_metrics_file(
    path: str | Path,
    fmt: str = AUTO,
    progress: ProgressCallback | None = None,
    *,
    strict: bool = False,
    metric: str | None = None,
    source_run: str | None = None,
) -> ParsedFile:
    """Read a metrics file into per-step records without touching any database."""
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    path = require_metrics_file(path)
    stats = ReadStats(progress)
    report = IngestReport(path=str(path), format=fmt, run="")
    records = [
        event
        for event in _events(path, fmt, stats, report, strict, metric, source_run)
        if isinstance(event, MetricRecord)
    ]
    return ParsedFile(
        path, report.format, records, stats.lines, report.incomplete_tail_line, report.skipped_lines
    )


def _refuse_if_nothing_read(path: Path, report: IngestReport, stated: list[StatedConfig]) -> None:
    if report.steps:
        return
    if stated and not report.skipped:
        # A run that stopped before its first step still printed what it was going to be.
        report.warnings.append(
            f"{path}: no step record: the run stopped before its first step; what it printed about "
            "itself (config, launch command) is recorded, no evaluation"
        )
        return
    if report.skipped:
        first = report.skipped_lines[0]
        raise InvalidInput(
            f"{path}: no record in the file could be read; {report.skipped} line(s) skipped, the first "
            f"at {_where(path, first['line'])}: {first['reason']}"
        )
    if report.incomplete_tail_line is None:
        if report.format == CONSOLE:
            raise InvalidInput(
                f"{path}: no 'step:N - key:value' lines found; not a verl console log"
            )
        raise InvalidInput(f"{path}: no metrics records found in this {report.format} file")


def _one_source_hint(source_keys: set[str]) -> str:
    """How to read those validations anyway: one source's rate as the success rate of a run of
    its own (the other sources stay its per-type rates), named with the exact --metric."""
    if not source_keys:
        return ""
    example = sorted(source_keys)[0]
    return (
        f"; to record a source's rate as a run's success rate, ingest the file into a run of "
        f"its own per source with --metric SOURCE_KEY={OVERALL_KEY}, e.g. "
        f"--metric {example}={OVERALL_KEY}"
    )


def _no_validation_warning(path: Path, report: IngestReport) -> str:
    """The warning for a log with steps and no validation: the names it logs that may be the
    validation success under another name (with the --metric that reads them), else that only
    the run and its last step are recorded."""
    candidates = renamed_candidates(report.unused_keys)
    if not candidates:
        return (
            f"{path}: no validation in its {report.steps} step(s) (no {OVERALL_KEY} value): "
            f"a run that has not validated yet? Only the run and its last step ({report.last_step}) are recorded"
        )
    options = " ".join(f"--metric {name}={target}" for name, target in candidates[:WARNED_KEYS])
    rewards = [name for name, _ in candidates if is_reward(name)]
    caveat = (
        f"; {', '.join(rewards[:WARNED_KEYS])} {'is a' if len(rewards) == 1 else 'are'} reward or "
        "score (shaped, possibly negative), a success rate only where the run's reward is 1 for a "
        "success and 0 otherwise"
        if rewards
        else ""
    )
    return (
        f"{path}: no {OVERALL_KEY} in its {report.steps} step(s), but it logs "
        f"{', '.join(name for name, _ in candidates[:WARNED_KEYS])}: if that is the validation "
        f"success under another name, ingest again with {options}{caveat}"
    )


def _more(total: int, shown: int, before: str, after: str = "") -> str:
    """What a warning that names only the first `shown` of `total` things adds ("" for none)."""
    return f"{before}{total - shown} more{after}" if total > shown else ""


def _summarise(path: Path, report: IngestReport) -> None:
    if report.cleaned:
        report.warnings.append(
            f"{path}: NUL bytes dropped from {report.cleaned} line(s) (first: line {report.cleaned_lines[0]}); "
            "the rest of each line was read"
        )
    if report.skipped:
        named = "; ".join(
            f"line {item['line']}: {item['reason'][:100]}"
            if item["line"] is not None
            else item["reason"][:100]
            for item in report.skipped_lines[:WARNED_LINES]
        )
        more = _more(report.skipped, WARNED_LINES, "; and ", " (all in --json)")
        report.warnings.append(
            f"{path}: skipped {report.skipped} line(s) that could not be read: {named}{more}"
        )
    if report.incomplete_tail_line is not None:
        report.warnings.append(
            f"{path}:{report.incomplete_tail_line}: incomplete last line (file still being written?); "
            "not ingested yet, run ingest again later"
        )
    if report.dialect_keys:
        named = ", ".join(sorted(report.dialect_keys)[:WARNED_KEYS])
        more = _more(len(report.dialect_keys), WARNED_KEYS, " and ")
        meanings = sorted(
            {known[1] for key in report.dialect_keys if (known := dialect_rate(key)) is not None}
        )
        report.warnings.append(
            f"{path}: read {named}{more} as per-source success rates (task types: "
            f"{'; '.join(meanings)})"
        )
    if report.per_source_only_steps:
        report.warnings.append(
            f"{path}: {report.per_source_only_steps} validation(s) log per-source success rates that differ "
            f"and no {OVERALL_KEY}: the rate pooled over every question is not in the log (a mean of the "
            "sources is not it), so they are not recorded as evaluations"
            + _one_source_hint(report.dialect_keys)
        )
    if (
        report.steps
        and not report.evaluations_found
        and not report.summary_not_placed
        and not report.per_source_only_steps
    ):
        report.warnings.append(_no_validation_warning(path, report))


@dataclass
class _Evaluated:
    """How the file's evaluations ran, as far as what it printed before them says: an
    evaluation-only log (`trainer.val_only`) played its validation under `env.seed`, which is
    then the evaluations' `eval_seed`, never the run's training seed.

    The split its evaluations ran on (`--split`, else the one the log names) is the run's split
    when the run has none recorded (a `--split` given, only while it has no held-out evaluation
    yet), or names the same one; any other split is this file's alone: its evaluation rows
    carry it (`row_split`), and the run's split and the evaluations earlier files recorded stay
    as they were."""

    config: dict[str, Any] = field(default_factory=dict)
    val_only: bool = False
    eval_seed: int | None = None
    given_split: str | None = None
    stated_split: str | None = None
    run_split: str | None = None  # the run's split fact before this file
    earlier_heldout: bool = False  # whether other files recorded held-out evaluations before

    def see(self, flat: Mapping[str, Any] | None, *, wins: bool = True) -> None:
        if not flat:
            return
        self.config = {**self.config, **flat} if wins else {**flat, **self.config}
        self.val_only = states_val_only(self.config)
        seed = self.config.get(VERL_CONFIG_KEYS["seed"])
        self.eval_seed = (
            int(seed)
            if self.val_only and isinstance(seed, int) and not isinstance(seed, bool)
            else None
        )
        self.stated_split = facts_from_config(self.config).get("split")

    @property
    def split(self) -> str | None:
        return self.given_split or self.stated_split

    @property
    def row_split(self) -> str:
        """The `split` of this file's evaluation rows: the held-out role, or a split of its own."""
        split = self.split
        if split is None or split == self.run_split:
            return HELDOUT
        if self.run_split is None and (not self.earlier_heldout or self.given_split is None):
            # The run's first split: a log naming the split of validations recorded before
            # (its history export, then its console) states theirs too.
            return HELDOUT
        return str(split)


class _BenchmarkChoice:
    """The benchmark of the file being read: stated, or taken from the first evidence that
    names one; any later evidence naming another refuses the file."""

    def __init__(self, path: Path, stated: Benchmark | None):
        self.path = path
        self.current = stated
        self.evidence = "--benchmark" if stated is not None else None

    def see(self, name: str | None, evidence: str) -> None:
        if name is None:
            return
        if self.current is None:
            self.current, self.evidence = load_benchmark(name), evidence
        elif self.current.name != name:
            raise InvalidInput(
                f"{self.path}: benchmark {name!r} by {evidence}, but {self.current.name!r} by {self.evidence}; "
                "refusing the file (a run is of one benchmark; docs/benchmarks.md)"
            )


def _identifying_metric(names, benchmark: str) -> str:
    identifying = load_benchmark(benchmark).identifying_metrics
    return next(name for name in names if name in identifying)


def ingest_file(
    db: sqlite_utils.Database,
    path: str | Path,
    run: str,
    *,
    fmt: str = AUTO,
    arm: Arm | ExternalArm | None = None,
    seed: int | None = None,
    base_model: str | None = None,
    total_steps: int | None = None,
    backend: str | None = None,
    benchmark: str | None = None,
    facts: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    config_file_left_out: Sequence[int] = (),
    ended: bool = False,
    strict: bool = False,
    metric: str | None = None,
    source_run: str | None = None,
    rename: MetricRename | Sequence[MetricRename] | None = None,
    progress: ProgressCallback | None = None,
    write_progress: Callable[[int, int | None], None] | None = None,
) -> IngestReport:
    """Record the evaluations in one metrics file or run folder under `run` (created if new).

    Idempotent: re-ingesting the same or a grown file adds only evaluations not yet stored;
    a different result for a step already stored is kept as a conflict and reported. Raises
    InvalidInput (exit 3) for a missing or empty file, one in which no record reads, any bad
    line under `strict`, or an arm fingerprint different from the run's; the database is then
    unchanged. `config_file_left_out` names the lines of other output the `--config` file was
    read around (reported). `progress(n_bytes)` is called as the file is read, `write_progress(done, None)`
    as evaluations are recorded. `facts` and `config` are the run's protocol facts and verl config
    (store/facts.py); a total steps different from the recorded one is kept as a conflict, not
    written; `ended` says the run will not continue (a run short of its total is then stopped).

    `benchmark` names the run's benchmark (InvalidInput naming the known ones for any other
    name); without it the benchmark is the one the run is recorded with, or the one the metric
    names, the printed config or the config's `env.env_name` identify, and it is left
    unrecorded when none does. Evidence that contradicts the benchmark (metric names of
    another, another env.env_name, a run recorded with another) refuses the file with
    InvalidInput, the database unchanged.

    What the log prints about its run is part of its record: the printed model and seed fill in
    the run's base model and seed (options given win; a difference is kept as a fact conflict),
    a log that only validated (`trainer.val_only=True`) makes a new run a reference run, and the
    checkpoint a resumed log starts from is the fact `resumed_from`. `rename` reads a metric
    logged under another name as the name ingest knows (`--metric FROM=TO`). A wandb summary's
    validation is placed at the step it was measured at (`_summary_evaluation`).
    """
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    stated_benchmark = load_benchmark(benchmark) if benchmark is not None else None
    path = require_metrics_file(path)
    report = IngestReport(path=str(path), format=fmt, run=run)
    stats = ReadStats(progress)
    choice = _BenchmarkChoice(path, stated_benchmark)
    choice.see(
        benchmark_for_env_name((config or {}).get("env.env_name")),
        "the --config file's env.env_name",
    )
    _note_config_left_out(report, config_file_left_out)
    stated: list[StatedConfig] = []
    evaluated = _Evaluated(given_split=(facts or {}).get("split"))
    evaluated.see(config)
    with write_transaction(db):
        source = str(path.resolve())
        recorded = next(db.table("runs").rows_where("name = ?", [run], select="benchmark"), None)
        run_is_new = recorded is None
        choice.see(None if recorded is None else recorded["benchmark"], f"run {run!r}'s record")
        ensure_run(
            db,
            run,
            arm=arm,
            seed=seed,
            base_model=base_model,
            total_steps=_reconcile_total(db, run, total_steps, source, report),
            backend=backend,
            benchmark=None if choice.current is None else choice.current.name,
        )
        evaluated.run_split, evaluated.earlier_heldout = _run_split(db, run, source)
        renames = (rename,) if isinstance(rename, MetricRename) else tuple(rename or ())
        scalars = MetricWriter(db, run, source)
        report.metrics = scalars.counts

        def keep_scalars(record: MetricRecord) -> None:
            # Every number as logged, under its own name; a summary's values were measured at
            # steps it does not keep.
            if not record.summary:
                scalars.write(record.step, scalar_values(record.metrics), record.line)

        for event in _events(
            path, fmt, stats, report, strict, metric, source_run, renames, keep_scalars
        ):
            if isinstance(event, StatedConfig):
                _note_stated(event, stated, choice, report)
                # The printed config wins over the traced launch command, as in facts_from_log.
                evaluated.see(flat_config(event), wins=event.kind == "resolved")
                continue
            _take_record(db, run, path, source, event, report, strict, choice, evaluated)
            if write_progress is not None:
                write_progress(report.evaluations_found, None)
        report.lines = stats.lines
        report.note_unused(stats.dropped_keys)
        _refuse_if_nothing_read(path, report, stated)
        if report.last_step is not None:
            update_run_state(db, run, last_step=report.last_step)
        printed_config, report.stated_facts = facts_from_log(stated)
        stated_facts = dict(report.stated_facts)
        stated_total = stated_facts.pop("total_steps", None)  # a runs column, not a fact
        val_only = states_val_only(config) or any(
            states_val_only(flat_config(item)) for item in stated
        )
        if val_only:
            stated_total = None  # an evaluation-only log trains no step
            _evaluation_only(db, run, path, stated_facts, evaluated, run_is_new, report)
        elif stated_total is not None and total_steps is None:
            ensure_run(
                db, run, total_steps=_reconcile_total(db, run, int(stated_total), source, report)
            )
        given_facts = dict(facts or {})
        report.split = evaluated.split
        if evaluated.row_split != HELDOUT:
            # This file's split is its evaluations' own: not the run's, which stays as it was.
            stated_facts.pop("split", None)
            given_facts.pop("split", None)
            report.warnings.append(_split_apart_warning(path, run, evaluated))
        _note_what_the_log_shows(stated_facts, choice.current, report)
        _fill_identity(db, run, stated_facts, seed=seed, base_model=base_model)
        _warn_unexpanded(path, config, stated, report)
        _record_benchmark(db, run, path, choice, report)
        conflicts = record_ingest_facts(
            db,
            run,
            given_facts,
            config=config or printed_config,
            ended=ended or report.crashed,
            source=source,
            stated=stated_facts,
            stated_source=f"{source} (printed by the run)",
        )
        if report.kind == "evaluation":
            update_run_state(db, run, status="finished")  # it validated; it was never to train
        report.fact_conflicts.extend(conflicts)
        report.warnings.extend(
            f"run {run!r} has {c['key']} {c['recorded']!r} on record; kept it and recorded {c['given']!r} as a conflict"
            for c in conflicts
        )
    _summarise(path, report)
    return report


def _note_config_left_out(report: IngestReport, left_out: Sequence[int]) -> None:
    """Report the lines of other output the `--config` file was read around."""
    if not left_out:
        return
    report.config_left_out_lines.extend(left_out[:REPORTED_LINES])
    shown = ", ".join(str(number) for number in left_out[:WARNED_LINES])
    report.warnings.append(
        f"the --config file was read around {len(left_out)} line(s) of other output "
        f"(lines {shown}); those lines are not part of the config"
    )


def _take_record(
    db: sqlite_utils.Database,
    run: str,
    path: Path,
    source: str,
    event: MetricRecord,
    report: IngestReport,
    strict: bool,
    choice: _BenchmarkChoice,
    evaluated: _Evaluated,
) -> None:
    """One step's record: the benchmark its metric names identify, the names ingest does not
    read, a summary placed at its step, and its evaluation recorded (counted in `report`)."""
    if not event.summary:
        report.first_step = (
            event.step if report.first_step is None else min(report.first_step, event.step)
        )
    detected = detect_benchmark(event.metrics)
    if detected is not None:
        choice.see(detected, f"the metric names ({_identifying_metric(event.metrics, detected)!r})")
    report.note_unused(
        key
        for key in event.metrics
        if key not in evaluation_keys(choice.current) and key not in report.dialect_keys
    )
    if event.summary:
        event = _summary_evaluation(db, run, path, event, report)
    if OVERALL_KEY not in event.metrics and any(
        key in event.metrics for key in task_type_keys(choice.current)
    ):
        report.per_source_only_steps += 1
    if _record_one(
        db,
        run,
        path,
        source,
        event,
        report,
        strict,
        choice.current,
        eval_seed=evaluated.eval_seed,
        split=evaluated.row_split,
    ):
        report.steps += 1
        report.last_step = (
            event.step if report.last_step is None else max(report.last_step, event.step)
        )


def _evaluation_only(
    db: sqlite_utils.Database,
    run: str,
    path: Path,
    stated_facts: dict[str, Any],
    evaluated: _Evaluated,
    run_is_new: bool,
    report: IngestReport,
) -> None:
    """A log that only validated: its env.seed seeded the evaluation (the rows' eval_seed), and
    the checkpoint it loaded is the one it evaluated, not a training run resumed; a new run
    becomes a reference run."""
    stated_facts.pop("seed", None)
    report.eval_seed = evaluated.eval_seed
    report.evaluated_checkpoint = stated_facts.pop("resumed_from", None)
    _mark_reference(db, run, path, run_is_new, report)


def _split_apart_warning(path: Path, run: str, evaluated: _Evaluated) -> str:
    """The warning for a file whose evaluations ran on a split other than the run's."""
    return (
        f"{path}: its evaluations ran on split {evaluated.row_split!r}, but run {run!r}'s validations are "
        f"{'of split ' + repr(evaluated.run_split) if evaluated.run_split else 'recorded without a split'}: "
        f"recorded under split {evaluated.row_split!r}, apart from them (runs show lists them)"
    )


def _note_what_the_log_shows(
    stated_facts: dict[str, Any], benchmark: Benchmark | None, report: IngestReport
) -> None:
    """Facts the log shows by what it holds rather than prints: the task types its validations
    logged, where not the benchmark's whole set (a search run's two sources, not seven), and the
    step a crashed run stopped after (0 before its first)."""
    declared = set(task_type_keys(benchmark).values())
    if report.task_types and report.task_types != declared:
        stated_facts["task_types"] = sorted(report.task_types)
    if report.crashed:
        stated_facts["crashed_after_step"] = report.last_step or 0


def _run_split(db, run: str, source: str) -> tuple[str | None, bool]:
    """(the run's recorded split, whether other files recorded held-out evaluations of it); a
    file ingested again names the split of its own evaluations."""
    row = next(db.table("runs").rows_where("name = ?", [run], select="id"))
    recorded = run_facts(db, row["id"])["values"].get("split")
    heldout = next(
        db.table("evaluations").rows_where(
            "run_id = ? AND split = ? AND source_file IS NOT ?",
            [row["id"], HELDOUT, source],
            select="id",
            limit=1,
        ),
        None,
    )
    return (None if recorded is None else str(recorded)), heldout is not None


def _reconcile_total(
    db, run: str, total_steps: int | None, source: str, report: IngestReport
) -> int | None:
    """The total steps to write for the run, or None with a different one kept as a conflict
    (store/facts.py)."""
    total_steps, conflict = reconcile_total_steps(db, run, total_steps, source)
    if conflict is not None:
        report.fact_conflicts.append(conflict)
        report.warnings.append(
            f"run {run!r} is recorded with {conflict['recorded']} total steps; kept that and recorded "
            f"{conflict['given']} as a conflict (a final card needs evaluations up to the larger total)"
        )
    return total_steps


def _note_stated(
    event: StatedConfig, stated: list[StatedConfig], choice: _BenchmarkChoice, report: IngestReport
) -> None:
    if event.kind == "crash":
        report.crashed = True
    if len(stated) < MAX_STATED_CONFIGS:
        stated.append(event)
    if event.left_out_count:
        report.config_left_out_lines.extend(
            event.left_out[: REPORTED_LINES - len(report.config_left_out_lines)]
        )
        shown = ", ".join(str(number) for number in event.left_out[:WARNED_LINES])
        more = _more(event.left_out_count, WARNED_LINES, " and ", " (all in --json)")
        report.warnings.append(
            f"{report.path}:{event.line}: the printed config was read around {event.left_out_count} line(s) of other "
            f"output interleaved with it (lines {shown}{more}); those lines are not part of the config"
        )
    if event.kind in ("resolved", "launch"):
        env_name = (flat_config(event) or {}).get("env.env_name")
        what = "the printed config's" if event.kind == "resolved" else "the traced launch command's"
        choice.see(
            benchmark_for_env_name(env_name),
            f"{what} env.env_name {env_name!r} (line {event.line})",
        )


def _mark_reference(db, run: str, path: Path, run_is_new: bool, report: IngestReport) -> None:
    """A log that only validated is a reference run (kind evaluation), not a training run."""
    if mark_new_run_reference(db, run, run_is_new):
        report.kind = "evaluation"
        return
    report.warnings.append(
        f"{path}: the log says trainer.val_only=True (it only validated), but run {run!r} is recorded as a training "
        "run; kept that (ingest an evaluation-only log under a new --run name)"
    )


def _fill_identity(
    db, run: str, stated: Mapping[str, Any], *, seed: int | None, base_model: str | None
) -> None:
    """The printed seed and model become the run's seed and base model where neither an option
    nor an earlier record gave one (a different printed value stays a fact conflict); a model
    path in the Hugging Face cache is the Hub model it holds."""
    row = next(db.table("runs").rows_where("name = ?", [run], select="seed, base_model"))
    fill: dict[str, Any] = {}
    printed_seed = stated.get("seed")
    if (
        seed is None
        and row["seed"] is None
        and isinstance(printed_seed, (int, float))
        and not isinstance(printed_seed, bool)
        and float(printed_seed).is_integer()
    ):
        fill["seed"] = int(printed_seed)
    if base_model is None and row["base_model"] is None and isinstance(stated.get("model"), str):
        fill["base_model"] = hub_model_id(stated["model"])  # the fact keeps the path as printed
    if fill:
        ensure_run(db, run, **fill)


def _warn_unexpanded(
    path: Path, config: Mapping[str, Any] | None, stated: list[StatedConfig], report: IngestReport
) -> None:
    """Name the settings whose value is a variable the script never expanded (not recorded)."""
    found = dict(unexpanded_variables(config))
    for item in stated:
        found.update(unexpanded_variables(flat_config(item)))
    if found:
        named = ", ".join(
            f"{key}=${variable}" for key, variable in sorted(found.items())[:WARNED_KEYS]
        )
        more = _more(len(found), WARNED_KEYS, " and ")
        report.warnings.append(
            f"{path}: not recorded as facts, their values are variables the launch script never expanded: "
            f"{named}{more}; give the values the run used as options (--episodes, --seed, ...)"
        )


def _summary_evaluation(
    db, run: str, path: Path, record: MetricRecord, report: IngestReport
) -> MetricRecord:
    """A wandb summary's record, its validation placed at the step it was measured at.

    The summary keeps the last value of `val/success_rate` and the last step logged (`_step`),
    not the step of that validation. It is the run's latest validation at or before `_step`
    that is already recorded (the run's console log or history, ingested first), when the two
    agree at the precision of the coarser one; the summary's validation then confirms it.
    Otherwise the step is not known, and the validation is not recorded (said so)."""
    metrics = dict(record.metrics)
    validation = {key: metrics.pop(key) for key in list(metrics) if key.startswith("val/")}
    training = MetricRecord(record.step, metrics, record.line)
    if OVERALL_KEY not in validation:
        return training
    latest = latest_standing_evaluation(db, run, at_most=record.step)
    value = validation[OVERALL_KEY]
    if (
        latest is not None
        and isinstance(value, (int, float))
        and not isinstance(value, bool)
        and agree_at_precision(latest["success_rate"], 100.0 * value)
    ):
        return MetricRecord(latest["step"], validation, record.line)
    report.summary_not_placed = True
    why = (
        (
            f"it differs from the run's latest recorded validation (step {latest['step']}, "
            f"{latest['success_rate']:g} %)"
        )
        if latest is not None
        else "the run has no validation recorded yet"
    )
    report.warnings.append(
        f"{path}: a wandb summary keeps {OVERALL_KEY} {value!r} without the step it was measured at (its _step "
        f"{record.step} is the last step logged) and {why}: not recorded; ingest the run's output.log or "
        "history first"
    )
    return training


def _record_benchmark(
    db, run: str, path: Path, choice: _BenchmarkChoice, report: IngestReport
) -> None:
    """Record the benchmark chosen, or say that none is recorded."""
    if choice.current is not None:
        ensure_run(db, run, benchmark=choice.current.name)
        report.benchmark, report.benchmark_evidence = choice.current.name, choice.evidence
        return
    report.warnings.append(
        f"{path}: benchmark not recorded: nothing in the file names one (every benchmark logs val/success_rate); "
        f"pass --benchmark NAME ({', '.join(list_benchmarks())})"
    )


def _record_one(
    db,
    run: str,
    path: Path,
    source: str,
    record: MetricRecord,
    report: IngestReport,
    strict: bool,
    benchmark: Benchmark | None,
    *,
    eval_seed: int | None = None,
    split: str = HELDOUT,
) -> bool:
    """Record the step's evaluation, if it has one; False when the record was skipped."""
    where = _where(path, record.line)
    try:
        evaluation = evaluation_from_metrics(record, where, report.warnings, benchmark)
        if evaluation is None:
            return True
        outcome = record_evaluation_outcome(
            db,
            run,
            source_file=source,
            source_line=record.line,
            eval_seed=eval_seed,
            split=split,
            **evaluation,
        )
    except (BadRecord, InvalidInput) as error:
        if strict:
            raise InvalidInput(f"{where}: {error}") from None
        report.skip(Skipped(record.line, f"step {record.step}: {error}"))
        return False
    report.evaluations_found += 1
    report.task_types.update(evaluation["task_types"])
    report.count(outcome, evaluation["step"], record.line, where)
    return True
