"""verl's console logger, as it lands in a Ray worker log or wandb's `output.log`.

``step:5 - key:value - ...`` lines, with `(TaskRunner pid=N)` prefixes, ANSI colour codes,
progress bars redrawn with carriage returns, and long lines wrapped onto the next ones.
Everything that is not a metrics line is noise and passes silently; a metrics record that
does not split into numeric key:value segments (cut mid-record, garbled) is skipped.

Metric names may hold spaces (verl-agent's WebShop logs `val/webshop_task_score (not
success_rate)`): a key is anything without a colon that does not start or end with a space;
values never hold one. The resolved config and the traced commands a log prints are read by
`console_config` and passed on as `StatedConfig` events.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ccpo_cli.store.readers.base import (
    MAX_LINE_BYTES,
    BadRecord,
    IncompleteTail,
    MetricRecord,
    ReadEvent,
    ReadStats,
    Skipped,
    StatedConfig,
    step_number,
)
from ccpo_cli.store.readers.console_config import (
    ConfigBlock,
    PrintedMetrics,
    command_event,
    config_starts,
    initial_validation_starts,
)
from ccpo_cli.store.readers.lines import Line, read_lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
RAY_PREFIX = re.compile(r"^\((?:(?P<actor>[^\s()]+) )?pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
# A Ray prefix inside a line: another actor's output glued to the line without its newline.
_GLUED_PREFIX = re.compile(r"(?<=\S)(?=\((?:[^\s()]+ )?pid=\d+(?:, ip=[^)]*)?\) )")
STEP_START = re.compile(r"^\s*step:\d")
_NUMBER = re.compile(
    r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)", re.IGNORECASE
)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int)\d*\((.*)\)")
# A metric name: no colon, no space at either end (spaces inside, as in WebShop's score).
_KEY = re.compile(r"[^\s:](?:[^:\t\r\n]*[^\s:])?")
_PARTIAL_VALUE = re.compile(
    r"[-+]?\d*\.?\d*(?:[eE][-+]?\d*)?|[-+]?(?:n|na|nan|i|in|inf|infi|infin|infini|infinit|infinity)",
    re.IGNORECASE,
)
# wandb's output.log keeps at most this many characters of a console line and drops the rest.
WANDB_LINE_LIMIT = 4096


def _has_space(text: str) -> bool:
    return any(char.isspace() for char in text)


def _continues_record(body: str) -> bool:
    """Whether a line reads as the rest of a wrapped `key:value - key:value` record: pieces
    between ` - ` separators whose values hold no whitespace. Spaces may sit inside a key, so
    in a piece with a colon only the value is checked; a first piece without one is the cut
    tail of a value (no spaces), a last one the cut head of a key (spaces allowed). Linear
    time, unlike a regex over 16 MiB lines."""
    pieces = body.strip(" -").split(" - ")
    for position, piece in enumerate(pieces):
        key, colon, value = piece.partition(":")
        name = key.strip(" ")
        if colon:
            if _has_space(value.strip()) or (name and not _KEY.fullmatch(name)):
                return False
        elif position == 0 and _has_space(name):
            return False
    return True


def _value(text: str) -> Any:
    numpy_scalar = _NUMPY_SCALAR.fullmatch(text)
    if numpy_scalar:
        text = numpy_scalar.group(1)
    if _NUMBER.fullmatch(text):
        return float(text)
    return text


def parse_record(body: str, *, partial_tail: bool = False) -> tuple[str, dict[str, Any]] | None:
    """The step text and metrics of a joined `step:N - key:value ...` record; None if it does
    not split cleanly into numeric key:value segments. With `partial_tail`, the last segment
    may be cut anywhere (a line wrapped mid-token), so only its shape is checked."""
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
            if (key == "" or _KEY.fullmatch(key)) and (
                not colon or _PARTIAL_VALUE.fullmatch(value)
            ):
                break
            return None
        if not colon or not _KEY.fullmatch(key):
            return None
        parsed = _value(value.strip())
        if isinstance(parsed, str):
            return None
        metrics[key] = parsed
    return head[5:], metrics


def _logical_pieces(text: str) -> list[str]:
    """The pieces of one physical line that were printed as lines of their own.

    A progress bar redraws with carriage returns: of the pieces between them, the last one is
    what a terminal shows, but a metrics record printed before a redraw is a line of its own
    too (`step:1 - ...\rTraining Progress: ...`). Output of another actor glued on without its
    newline starts at its Ray prefix (`... - timing_s/total:38.304(TaskRunner pid=1) Training`)."""
    pieces = [piece for piece in text.split("\r") if piece.strip()]
    kept = [
        piece
        for position, piece in enumerate(pieces)
        if position == len(pieces) - 1 or STEP_START.match(_without_prefix(piece))
    ]
    return [part for piece in kept for part in _GLUED_PREFIX.split(piece) if part.strip()] or [""]


def _without_prefix(text: str) -> str:
    prefix = RAY_PREFIX.match(text)
    return text[prefix.end() :] if prefix else text


def _physical_lines(
    path: Path, stats: ReadStats
) -> Iterator[ReadEvent | tuple[Line, str | None, str]]:
    for item in read_lines(path, stats):
        if not isinstance(item, Line):
            yield item
            continue
        pieces = _logical_pieces(ANSI.sub("", item.text))
        for position, text in enumerate(pieces):
            # Only the last piece of an unterminated line is still being written.
            line = item if position == len(pieces) - 1 else item._replace(terminated=True)
            prefix_match = RAY_PREFIX.match(text)
            prefix = prefix_match.group(0).strip() if prefix_match else None
            body = text[prefix_match.end() :] if prefix_match else text
            yield line, prefix, body


class _MaybeCut:
    """A record whose last line is exactly WANDB_LINE_LIMIT characters long: cut by wandb when
    the file is a wandb output.log (no line of it is longer), whole otherwise."""

    def __init__(self, result: MetricRecord | Skipped, line: int):
        self.result, self.line = result, line

    def cut(self) -> Skipped:
        return Skipped(
            self.line, f"line cut at {WANDB_LINE_LIMIT} characters (wandb's output.log limit)"
        )


class _Pending:
    """The record being assembled from its first line and any wrapped continuations."""

    def __init__(self, line: Line, prefix: str | None, body: str):
        self.line, self.prefix, self.body = line.number, prefix, body.lstrip()
        self.last_length = len(line.text)

    def extend_if_continues(self, line: Line, body: str) -> bool:
        """Append a wrapped line when the two still read as key:value segments (the last one
        possibly cut). Only the open segment onwards is re-checked, so a record wrapped over
        many lines costs linear time; the whole record is checked once, at the end."""
        joined = self.body + body
        if len(joined) > MAX_LINE_BYTES:
            return False
        open_segment = self.body.rfind(" - ")
        tail = joined if open_segment < 0 else "step:0" + joined[open_segment:]
        if parse_record(tail, partial_tail=True) is None:
            return False
        self.body = joined
        self.last_length = len(line.text)
        return True

    def complete(self) -> MetricRecord | Skipped | _MaybeCut:
        parsed = parse_record(self.body)
        if parsed is None:
            result: MetricRecord | Skipped = Skipped(
                self.line,
                f"malformed metrics line (expected 'step:N - key:value - ...' with numeric values): {self.body[:120]!r}",
            )
        else:
            try:
                result = MetricRecord(step_number(int(parsed[0])), parsed[1], self.line)
            except (BadRecord, ValueError) as error:
                result = Skipped(
                    self.line,
                    str(error)
                    if isinstance(error, BadRecord)
                    else f"field 'step' is out of range: {error}",
                )
        return _MaybeCut(result, self.line) if self.last_length == WANDB_LINE_LIMIT else result

    def cut_mid_key(self) -> bool:
        """True when the record so far ends inside a key that a following `step:` line may
        finish (`timing_s/` + `step:0.512`); a record cut elsewhere does not swallow the next one."""
        return parse_record(self.body) is None and self.body.rstrip().endswith(("/", "_"))


def read_console(path: Path, stats: ReadStats) -> Iterator[ReadEvent]:
    """The events of a console log. A record ending on a line of exactly WANDB_LINE_LIMIT
    characters is held until the file shows whether wandb cut it: a line longer than the limit
    means no line was cut (a plain stdout capture), the end of the file without one that every
    such line was (wandb's output.log)."""
    held: list[_MaybeCut] = []
    longer_line_seen = False
    initial: _PrintedValidation | None = None
    for event in _read_console(path, stats):
        if isinstance(event, _PrintedValidation):
            initial = event
            continue
        record = event.result if isinstance(event, _MaybeCut) else event
        if initial is not None and isinstance(record, MetricRecord):
            # The step line that follows the print holds the same validation: it is the record.
            if record.step != initial.step:
                yield MetricRecord(initial.step, initial.metrics, initial.line)
            initial = None
        if isinstance(event, _LongerLine):
            longer_line_seen = True
            yield from (maybe.result for maybe in held)
            held.clear()
        elif isinstance(event, _MaybeCut):
            if longer_line_seen:
                yield event.result
            else:
                held.append(event)
        else:
            yield event
    yield from (maybe.cut() for maybe in held)
    if initial is not None:
        yield MetricRecord(initial.step, initial.metrics, initial.line)


class _PrintedValidation(MetricRecord):
    """The initial validation verl printed (`Initial validation metrics: {...}`): the step-0
    (or resumed step's) record only when no step line of that step follows it."""


class _LongerLine:
    """A physical line longer than WANDB_LINE_LIMIT: the file was not cut by wandb."""


_ConsoleEvent = ReadEvent | _MaybeCut | _LongerLine  # what read_console sorts out


def _covers(record: MetricRecord | Skipped | _MaybeCut, previous_last_key: str | None) -> bool:
    """Whether an unterminated last line is a whole record: it reads, and it ends with the key
    the record before it ended with (verl prints a step's metrics in one line, in one order, so
    a line still being written stops short of it). wandb's output.log never ends with a
    newline, so a finished run's last record is such a line."""
    if not isinstance(record, MetricRecord) or previous_last_key is None or not record.metrics:
        return False
    return next(reversed(record.metrics)) == previous_last_key


class _ConsoleLines:
    """Reading a console log one logical line at a time: the record being assembled, a printed
    config or initial validation being read, the step an initial validation is of, the last key
    of the last record read (see _covers), and whether a line longer than wandb's limit was
    seen. `done` once the unterminated last line is read."""

    def __init__(self) -> None:
        self.pending: _Pending | None = None
        self.config: ConfigBlock | None = None
        self.printed: PrintedMetrics | None = None
        self.resumed_step = (
            0  # the step an initial validation is of: 0, or the checkpoint resumed from
        )
        self.previous_last_key: str | None = None
        self.longer_line_seen = False
        self.done = False

    def completed(self) -> MetricRecord | Skipped | _MaybeCut:
        """The pending record, complete (it is no longer pending)."""
        assert self.pending is not None
        result, self.pending = self.pending.complete(), None
        if isinstance(result, MetricRecord) and result.metrics:
            self.previous_last_key = next(reversed(result.metrics))
        return result

    def feed_config(self, line: Line, body: str) -> Iterator[ReadEvent]:
        """One more line of a printed config: its event once it reads, a skip once it is given up."""
        assert self.config is not None
        outcome = self.config.add(body, line.number)
        if isinstance(outcome, StatedConfig):
            yield outcome
        elif outcome is not None:
            yield Skipped(line.number, outcome)
        self.config = None if self.config.done else self.config

    def initial_validation(self, line: Line, body: str) -> Iterator[ReadEvent]:
        assert self.printed is not None
        outcome = self.printed.add(body)
        if isinstance(outcome, dict):
            yield _PrintedValidation(self.resumed_step, outcome, self.printed.line)
        elif outcome is not None:
            yield Skipped(line.number, outcome)
        self.printed = None if self.printed.done else self.printed

    def read(self, line: Line, prefix: str | None, body: str) -> Iterator[_ConsoleEvent]:
        """The events of one logical line."""
        if not self.longer_line_seen and len(line.text) > WANDB_LINE_LIMIT:
            self.longer_line_seen = True
            yield _LongerLine()
        config = self.config
        if config is not None and prefix == config.prefix and STEP_START.match(body) is None:
            yield from self.feed_config(line, body)
            return
        if self.printed is not None:
            if prefix in (None, self.printed.prefix) and self.printed.continues(body):
                yield from self.initial_validation(line, body)
                return
            # Cut by other output: the print is not read; the step line of that validation, when
            # the log has one, is its record anyway.
            self.printed = None
        if not line.terminated:
            yield from self.last_line(line, prefix, body)
            return
        pending = self.pending
        if STEP_START.match(body) and not (pending is not None and pending.cut_mid_key()):
            if pending is not None:
                yield self.completed()
            self.pending = _Pending(line, prefix, body)
            return
        # A wrapped line continues the record when the two still read as key:value segments
        # (the last one possibly cut); the whole record is checked at the end.
        if (
            pending is not None
            and body
            and prefix in (None, pending.prefix)
            and _continues_record(body)
            and pending.extend_if_continues(line, body)
        ):
            return
        if pending is not None:
            yield self.completed()
        yield from self.other_output(line, prefix, body)

    def last_line(self, line: Line, prefix: str | None, body: str) -> Iterator[_ConsoleEvent]:
        """The unterminated last line: still being written, unless it is a whole record (see
        _covers). If it would continue the pending record, that record is incomplete too; both
        wait for the next ingest. An unterminated line of other output holds no record."""
        self.done = True
        if self.pending is not None and STEP_START.match(body) is None and _continues_record(body):
            yield IncompleteTail(self.pending.line)
            return
        if self.pending is not None:
            yield self.completed()
        if STEP_START.match(body):
            tail = _Pending(line, prefix, body).complete()
            yield tail if _covers(tail, self.previous_last_key) else IncompleteTail(line.number)

    def other_output(self, line: Line, prefix: str | None, body: str) -> Iterator[ReadEvent]:
        """A noise line may still say something about the run: a printed config opens here,
        or a traced command names its settings."""
        if config_starts(body):
            self.config = ConfigBlock(line.number, prefix)
            yield from self.feed_config(line, body)
        elif initial_validation_starts(body):
            self.printed = PrintedMetrics(line.number, prefix)
            yield from self.initial_validation(line, body)
        elif (command := command_event(line.number, body)) is not None:
            if command.kind == "resume":
                self.resumed_step = command.value
            yield command


def _read_console(path: Path, stats: ReadStats) -> Iterator[_ConsoleEvent]:
    state = _ConsoleLines()
    for item in _physical_lines(path, stats):
        if not isinstance(item, tuple):
            yield item
            continue
        yield from state.read(*item)
        if state.done:
            return
    if state.pending is not None:
        yield state.completed()
