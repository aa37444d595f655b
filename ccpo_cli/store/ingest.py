"""Bringing training metrics files into runs.db.

Three formats carry the same metrics (verl's names, rates as fractions 0-1):

* `ccpo`: ccpo's own flat JSONL, one object per step: ``{"step": 5, "wall_time": ..., "val/success_rate": 0.8, ...}``
* `verl-file`: verl's `file` logger, ``{"step": 5, "data": {"val/success_rate": 0.8, ...}}``
* `console`: verl's console logger, ``step:5 - key:value - ...``, as it lands in Ray worker
  logs: `(TaskRunner pid=N)` prefixes, ANSI colour codes, long lines wrapped.

`val/success_rate` becomes an evaluation (percent), `val/<type>_success_rate` its task-type
rows, `val/episode_length/mean` its mean turns and `episode/success_rate` the training success
rate at that step. The whole file is parsed first and written in one transaction, so a
malformed line (reported as file:line) leaves the database exactly as it was. A last line
without its newline is a file still being written: it is ingested when it is complete JSON,
otherwise left for the next ingest and reported.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import write_transaction
from ccpo_cli.store.facts import reconcile_total_steps, record_ingest_facts
from ccpo_cli.store.records import ensure_run, record_evaluation_outcome, update_run_state
from ccpo_cli.task_types import VERL_METRIC_NAMES

FORMATS = ("auto", "ccpo", "verl-file", "console")
OVERALL_KEY = "val/success_rate"
MEAN_TURNS_KEY = "val/episode_length/mean"
TRAIN_SUCCESS_KEY = "episode/success_rate"
TASK_TYPE_KEYS = {f"val/{name}_success_rate": key for key, name in VERL_METRIC_NAMES.items()}
# Optional exact counts a ccpo metrics file may carry beside the rate.
EPISODES_KEY = "val/episodes"
SUCCESSES_KEY = "val/successes"

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_RAY_PREFIX = re.compile(r"^\((?P<actor>[^\s()]+) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
_STEP_START = re.compile(r"^\s*step:\d")
_CONTINUATION = re.compile(r"[ \-]*\S*(?: - \S*)*[ \-]*")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)", re.I)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int)\d*\((.*)\)")
_KEY = re.compile(r"[^\s:]+")


@dataclass
class MetricRecord:
    """One step's metrics as read from a file, with the line it started on."""

    step: int
    metrics: dict[str, Any]
    line: int


@dataclass
class ParsedFile:
    path: Path
    format: str
    records: list[MetricRecord]
    lines: int
    incomplete_tail_line: int | None = None


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
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    incomplete_tail_line: int | None = None
    fact_conflicts: list[dict[str, Any]] = field(default_factory=list)  # protocol facts (store/facts.py)

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "format": self.format,
            "run": self.run,
            "lines": self.lines,
            "steps": self.steps,
            "last_step": self.last_step,
            "evaluations_found": self.evaluations_found,
            "new": self.new,
            "duplicates": self.duplicates,
            "conflicts": self.conflicts,
            "warnings": self.warnings,
            "incomplete_tail_line": self.incomplete_tail_line,
            "fact_conflicts": self.fact_conflicts,
        }


ProgressCallback = Callable[[int], None]


def _read_lines(path: Path, progress: ProgressCallback | None) -> Iterator[tuple[int, str, bool]]:
    """(line number, text without its newline, terminated?) for each line; binary content
    is refused with the line it appears on."""
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if progress is not None:
                progress(len(raw))
            if b"\x00" in raw:
                raise InvalidInput(f"{path}:{number}: binary content (NUL byte); not a metrics file")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidInput(f"{path}:{number}: not UTF-8 text; not a metrics file") from None
            terminated = text.endswith("\n")
            yield number, text.rstrip("\r\n") if terminated else text, terminated


def _step_value(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or isinstance(value, float) and (
        not math.isfinite(value) or value != int(value)
    ):
        raise InvalidInput(f"{where}: field 'step' must be a whole number, got {value!r}")
    if value < 0:
        raise InvalidInput(f"{where}: field 'step' is negative ({value})")
    return int(value)


def _detect_format(path: Path) -> str:
    with path.open("rb") as handle:
        head = handle.read(65536)
    if b"\x00" in head:
        raise InvalidInput(f"{path}: binary content (NUL byte); not a metrics file")
    for raw_line in head.splitlines():
        line = _ANSI.sub("", raw_line.decode("utf-8", errors="replace")).strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                first = json.loads(line)
            except ValueError:
                return "ccpo"  # the JSON parser will name the bad line
            if isinstance(first, dict) and isinstance(first.get("data"), dict):
                return "verl-file"
            return "ccpo"
        return "console"
    raise InvalidInput(f"{path}: the file is empty; no metrics to ingest")


def _parse_json_lines(path: Path, fmt: str, progress: ProgressCallback | None) -> ParsedFile:
    records: list[MetricRecord] = []
    lines = 0
    tail: int | None = None
    for number, text, terminated in _read_lines(path, progress):
        lines = number
        if not text.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(text)
        except ValueError as error:
            if not terminated:
                tail = number  # a line still being written; the next ingest picks it up
                continue
            raise InvalidInput(f"{where}: not valid JSON ({error.msg} at column {error.colno})") from None
        if not isinstance(obj, dict):
            raise InvalidInput(f"{where}: expected a JSON object, got {type(obj).__name__}")
        if "step" not in obj:
            raise InvalidInput(f"{where}: missing field 'step'")
        step = _step_value(obj["step"], where)
        if fmt == "verl-file":
            metrics = obj.get("data")
            if not isinstance(metrics, dict):
                raise InvalidInput(f"{where}: field 'data' must be an object (verl file logger format)")
        else:
            metrics = {key: value for key, value in obj.items() if key != "step"}
        records.append(MetricRecord(step, metrics, number))
    return ParsedFile(path, fmt, records, lines, tail)


def _console_value(text: str) -> Any:
    numpy_scalar = _NUMPY_SCALAR.fullmatch(text)
    if numpy_scalar:
        text = numpy_scalar.group(1)
    if _NUMBER.fullmatch(text):
        return float(text)
    return text


_PARTIAL_VALUE = re.compile(r"[-+]?\d*\.?\d*(?:[eE][-+]?\d*)?|[-+]?(?:n|na|nan|i|in|inf|infi|infin|infini|infinit|infinity)", re.I)


def _parse_console_record(body: str, *, partial_tail: bool = False) -> tuple[int, dict[str, Any]] | None:
    """The step and metrics of a joined `step:N - key:value ...` line; None if it does not
    split cleanly into numeric key:value segments. With `partial_tail`, the last segment may
    be cut anywhere (a line wrapped mid-token), so only its shape is checked."""
    text = body.strip()
    if partial_tail and text.endswith(" -"):
        text = text[:-2]  # cut just after a separator
    segments = text.split(" - ")
    head = segments[0]
    if not head.startswith("step:") or not head[5:].isdigit():
        return None
    metrics: dict[str, Any] = {}
    for position, segment in enumerate(segments[1:], start=2):
        key, colon, value = segment.strip().partition(":")
        if partial_tail and position == len(segments):
            if (key == "" or _KEY.fullmatch(key)) and (not colon or _PARTIAL_VALUE.fullmatch(value)):
                break
            return None
        if not colon or not _KEY.fullmatch(key):
            return None
        parsed = _console_value(value.strip())
        if isinstance(parsed, str):
            return None
        metrics[key] = parsed
    return int(head[5:]), metrics


def _console_lines(path: Path, progress: ProgressCallback | None) -> Iterator[tuple[int, str | None, str, bool]]:
    for number, text, terminated in _read_lines(path, progress):
        text = _ANSI.sub("", text)
        # Progress bars redraw with carriage returns; what was printed last is what remains.
        pieces = [piece for piece in text.split("\r") if piece.strip()]
        text = pieces[-1] if pieces else ""
        prefix_match = _RAY_PREFIX.match(text)
        prefix = prefix_match.group(0).strip() if prefix_match else None
        body = text[prefix_match.end():] if prefix_match else text
        yield number, prefix, body, terminated


def _parse_console(path: Path, progress: ProgressCallback | None) -> ParsedFile:
    records: list[MetricRecord] = []
    current: dict[str, Any] | None = None  # {"line", "prefix", "body"}
    lines = 0
    tail: int | None = None

    def flush() -> None:
        nonlocal current
        if current is None:
            return
        parsed = _parse_console_record(current["body"])
        if parsed is None:
            raise InvalidInput(
                f"{path}:{current['line']}: malformed metrics line (expected 'step:N - key:value - ...' "
                f"with numeric values): {current['body'][:120]!r}"
            )
        records.append(MetricRecord(parsed[0], parsed[1], current["line"]))
        current = None

    for number, prefix, body, terminated in _console_lines(path, progress):
        lines = number
        if not terminated:
            # Still being written. If it would continue the pending record, that record is
            # incomplete too; both wait for the next ingest.
            tail = number
            if current is not None and _STEP_START.match(body) is None and _CONTINUATION.fullmatch(body):
                tail = current["line"]
                current = None
            break
        # "step:" may also be the wrapped tail of a key such as timing_s/step; it starts a new
        # record only when the pending one is already complete.
        continues_key = current is not None and _parse_console_record(current["body"]) is None
        if _STEP_START.match(body) and not continues_key:
            flush()
            current = {"line": number, "prefix": prefix, "body": body.lstrip()}
            continue
        if current is not None and body and prefix in (None, current["prefix"]) and _CONTINUATION.fullmatch(body):
            # A wrapped line continues the record when the two still read as key:value
            # segments (the last one possibly cut); the whole record is checked at the end.
            joined = current["body"] + body
            if _parse_console_record(joined, partial_tail=True) is not None:
                current["body"] = joined
                continue
        flush()
    flush()
    if not records and tail is None:
        raise InvalidInput(f"{path}: no 'step:N - key:value' lines found; not a verl console log")
    return ParsedFile(path, "console", records, lines, tail)


def require_metrics_file(path: str | Path) -> Path:
    """The path, if it names a non-empty regular file; InvalidInput (exit 3) otherwise."""
    path = Path(path)
    if not path.exists():
        raise InvalidInput(f"{path}: no such file")
    if not path.is_file():
        raise InvalidInput(f"{path}: not a regular file")
    if path.stat().st_size == 0:
        raise InvalidInput(f"{path}: the file is empty; no metrics to ingest")
    return path


def parse_metrics_file(path: str | Path, fmt: str = "auto", progress: ProgressCallback | None = None) -> ParsedFile:
    """Read a metrics file into per-step records without touching any database.

    Raises InvalidInput (exit 3) naming the file and line for a missing, empty, binary or
    malformed file.
    """
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    path = require_metrics_file(path)
    if fmt == "auto":
        fmt = _detect_format(path)
    if fmt == "console":
        return _parse_console(path, progress)
    return _parse_json_lines(path, fmt, progress)


def _rate_percent(value: Any, key: str, where: str) -> float | None:
    """A logged fraction as percent; None for NaN/null (the caller reports it)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{where}: field {key!r} must be a number, got {value!r}")
    if not math.isfinite(value):
        return None
    if not 0.0 <= value <= 1.0:
        raise InvalidInput(f"{where}: field {key!r} is {value}; verl logs success rates as fractions 0-1")
    return 100.0 * value


def _optional_number(value: Any, key: str, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{where}: field {key!r} must be a number, got {value!r}")
    return float(value) if math.isfinite(value) else None


def evaluation_from_metrics(record: MetricRecord, where: str, warnings: list[str]) -> dict[str, Any] | None:
    """The `record_evaluation` keyword arguments one step's metrics describe, or None when
    the step has no held-out evaluation. NaN/null values are left out with a warning."""
    metrics = record.metrics
    if OVERALL_KEY not in metrics:
        if any(key in metrics for key in TASK_TYPE_KEYS):
            warnings.append(f"{where}: step {record.step} has per-type rates but no {OVERALL_KEY}; skipped")
        return None
    overall = _rate_percent(metrics[OVERALL_KEY], OVERALL_KEY, where)
    if overall is None:
        warnings.append(f"{where}: step {record.step}: {OVERALL_KEY} is NaN or missing; evaluation not recorded")
        return None
    task_types = {}
    for metric_key, short in TASK_TYPE_KEYS.items():
        if metric_key in metrics:
            rate = _rate_percent(metrics[metric_key], metric_key, where)
            if rate is None:
                warnings.append(f"{where}: step {record.step}: {metric_key} is NaN or missing; left out")
            else:
                task_types[short] = rate
    episodes = _optional_number(metrics.get(EPISODES_KEY), EPISODES_KEY, where)
    successes = _optional_number(metrics.get(SUCCESSES_KEY), SUCCESSES_KEY, where)
    train_rate = metrics.get(TRAIN_SUCCESS_KEY)
    return {
        "step": record.step,
        "success_rate": overall,
        "task_types": task_types,
        "mean_turns": _optional_number(metrics.get(MEAN_TURNS_KEY), MEAN_TURNS_KEY, where),
        "train_success_rate": _rate_percent(train_rate, TRAIN_SUCCESS_KEY, where) if train_rate is not None else None,
        "episodes": None if episodes is None else int(episodes),
        "successes": None if successes is None else int(successes),
    }


def ingest_file(
    db: sqlite_utils.Database,
    path: str | Path,
    run: str,
    *,
    fmt: str = "auto",
    arm: str | None = None,
    arm_fingerprint: str | None = None,
    seed: int | None = None,
    base_model: str | None = None,
    total_steps: int | None = None,
    backend: str | None = None,
    facts: Mapping[str, Any] | None = None,
    config: Mapping[str, Any] | None = None,
    ended: bool = False,
    progress: ProgressCallback | None = None,
    write_progress: Callable[[int, int], None] | None = None,
) -> IngestReport:
    """Record the evaluations in one metrics file under `run` (created if new), atomically.

    Idempotent: re-ingesting the same or a grown file adds only evaluations not yet stored;
    a different result for a step already stored is kept as a conflict and reported. Raises
    InvalidInput (exit 3) for a missing/empty/binary/malformed file (file:line) or an arm
    fingerprint different from the run's; the database is then unchanged.
    `progress(n_bytes)` is called as the file is read, `write_progress(done, total)` as
    evaluations are recorded. `facts` and `config` are the run's protocol facts and verl config
    (store/facts.py); a total steps different from the recorded one is kept as a conflict, not
    written; `ended` says the run will not continue (a run short of its total is then stopped).
    """
    parsed = parse_metrics_file(path, fmt, progress)
    source = str(Path(path).resolve())
    report = IngestReport(
        path=str(path), format=parsed.format, run=run, lines=parsed.lines,
        steps=len(parsed.records), incomplete_tail_line=parsed.incomplete_tail_line,
    )
    evaluations = []
    for record in parsed.records:
        where = f"{path}:{record.line}"
        evaluation = evaluation_from_metrics(record, where, report.warnings)
        if evaluation is not None:
            evaluations.append((record.line, evaluation))
    if parsed.incomplete_tail_line is not None:
        report.warnings.append(
            f"{path}:{parsed.incomplete_tail_line}: incomplete last line (file still being written?); "
            "not ingested yet, run ingest again later"
        )
    report.evaluations_found = len(evaluations)
    report.last_step = max((record.step for record in parsed.records), default=None)
    with write_transaction(db):
        total_steps, total_conflict = reconcile_total_steps(db, run, total_steps, source)
        if total_conflict is not None:
            report.fact_conflicts.append(total_conflict)
            report.warnings.append(
                f"run {run!r} is recorded with {total_conflict['recorded']} total steps; kept that and recorded "
                f"{total_conflict['given']} as a conflict (a final card needs evaluations up to the larger total)"
            )
        ensure_run(
            db, run, arm=arm, arm_fingerprint=arm_fingerprint, seed=seed, base_model=base_model,
            total_steps=total_steps, backend=backend,
        )
        for done, (line, evaluation) in enumerate(evaluations, start=1):
            outcome = record_evaluation_outcome(db, run, source_file=source, source_line=line, **evaluation)
            if write_progress is not None:
                write_progress(done, len(evaluations))
            if outcome.outcome == "new":
                report.new += 1
            elif outcome.outcome == "duplicate":
                report.duplicates += 1
            else:
                report.conflicts.append(
                    {"step": evaluation["step"], "line": line, "kept_evaluation_id": outcome.evaluation_id,
                     "conflict_id": outcome.conflict_id}
                )
                report.warnings.append(
                    f"{path}:{line}: step {evaluation['step']} differs from the evaluation already recorded "
                    f"(id {outcome.evaluation_id}); kept both, the new one as conflict {outcome.conflict_id}"
                )
        if report.last_step is not None:
            update_run_state(db, run, last_step=report.last_step)
        conflicts = record_ingest_facts(db, run, facts or {}, config=config, verl_log=parsed.format != "ccpo",
                                        ended=ended, source=source)
        report.fact_conflicts.extend(conflicts)
        report.warnings.extend(
            f"run {run!r} has {c['key']} {c['recorded']!r} on record; kept it and recorded {c['given']!r} as a conflict"
            for c in conflicts
        )
    return report
