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
from ccpo_cli.store.readers.console_config import ConfigBlock, command_event, config_starts
from ccpo_cli.store.readers.lines import Line, read_lines

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
RAY_PREFIX = re.compile(r"^\((?P<actor>[^\s()]+) pid=(?P<pid>\d+)(?:, ip=[^)]*)?\) ?")
STEP_START = re.compile(r"^\s*step:\d")
_NUMBER = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|infinity)", re.IGNORECASE)
_NUMPY_SCALAR = re.compile(r"np\.(?:float|int)\d*\((.*)\)")
# A metric name: no colon, no space at either end (spaces inside, as in WebShop's score).
_KEY = re.compile(r"[^\s:](?:[^:\t\r\n]*[^\s:])?")
_PARTIAL_VALUE = re.compile(
    r"[-+]?\d*\.?\d*(?:[eE][-+]?\d*)?|[-+]?(?:n|na|nan|i|in|inf|infi|infin|infini|infinit|infinity)", re.IGNORECASE
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
            if (key == "" or _KEY.fullmatch(key)) and (not colon or _PARTIAL_VALUE.fullmatch(value)):
                break
            return None
        if not colon or not _KEY.fullmatch(key):
            return None
        parsed = _value(value.strip())
        if isinstance(parsed, str):
            return None
        metrics[key] = parsed
    return head[5:], metrics


def _physical_lines(path: Path, stats: ReadStats) -> Iterator[ReadEvent | tuple[Line, str | None, str]]:
    for item in read_lines(path, stats):
        if not isinstance(item, Line):
            yield item
            continue
        text = ANSI.sub("", item.text)
        # Progress bars redraw with carriage returns; what was printed last is what remains.
        pieces = [piece for piece in text.split("\r") if piece.strip()]
        text = pieces[-1] if pieces else ""
        prefix_match = RAY_PREFIX.match(text)
        prefix = prefix_match.group(0).strip() if prefix_match else None
        body = text[prefix_match.end():] if prefix_match else text
        yield item, prefix, body


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

    def complete(self) -> MetricRecord | Skipped:
        if self.last_length == WANDB_LINE_LIMIT:
            return Skipped(self.line, f"line cut at {WANDB_LINE_LIMIT} characters (wandb's output.log limit)")
        parsed = parse_record(self.body)
        if parsed is None:
            return Skipped(
                self.line,
                f"malformed metrics line (expected 'step:N - key:value - ...' with numeric values): {self.body[:120]!r}",
            )
        try:
            step = step_number(int(parsed[0]))
        except (BadRecord, ValueError) as error:
            return Skipped(self.line, str(error) if isinstance(error, BadRecord) else f"field 'step' is out of range: {error}")
        return MetricRecord(step, parsed[1], self.line)

    def cut_mid_key(self) -> bool:
        """True when the record so far ends inside a key that a following `step:` line may
        finish (`timing_s/` + `step:0.512`); a record cut elsewhere does not swallow the next one."""
        return parse_record(self.body) is None and self.body.rstrip().endswith(("/", "_"))


def _feed(config: ConfigBlock, line: Line, body: str) -> Iterator[ReadEvent]:
    """One more line of a printed config: its event once it reads, a skip once it is given up."""
    outcome = config.add(body)
    if isinstance(outcome, StatedConfig):
        yield outcome
    elif outcome is not None:
        yield Skipped(line.number, outcome)


def read_console(path: Path, stats: ReadStats) -> Iterator[ReadEvent]:
    pending: _Pending | None = None
    config: ConfigBlock | None = None
    for item in _physical_lines(path, stats):
        if not isinstance(item, tuple):
            yield item
            continue
        line, prefix, body = item
        if config is not None and prefix == config.prefix and STEP_START.match(body) is None:
            yield from _feed(config, line, body)
            config = None if config.done else config
            continue
        if not line.terminated:
            # Still being written. If it would continue the pending record, that record is
            # incomplete too; both wait for the next ingest.
            if pending is not None and STEP_START.match(body) is None and _continues_record(body):
                yield IncompleteTail(pending.line)
                return
            if pending is not None:
                yield pending.complete()
            yield IncompleteTail(line.number)
            return
        if STEP_START.match(body) and not (pending is not None and pending.cut_mid_key()):
            if pending is not None:
                yield pending.complete()
            pending = _Pending(line, prefix, body)
            continue
        # A wrapped line continues the record when the two still read as key:value segments
        # (the last one possibly cut); the whole record is checked at the end.
        if (
            pending is not None and body and prefix in (None, pending.prefix) and _continues_record(body)
            and pending.extend_if_continues(line, body)
        ):
            continue
        if pending is not None:
            yield pending.complete()
            pending = None
        # A noise line may still say something about the run: a printed config opens here,
        # or a traced command names its settings.
        if config_starts(body):
            config = ConfigBlock(line.number, prefix)
            yield from _feed(config, line, body)
            config = None if config.done else config
        elif (command := command_event(line.number, body)) is not None:
            yield command
    if pending is not None:
        yield pending.complete()
