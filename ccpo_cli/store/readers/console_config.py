"""What a verl console log says about its own run, besides its metrics.

verl's `main_ppo` pretty-prints the resolved config (a Python dict literal over many lines,
each with the Ray prefix) before training; a script run under `set -x` traces the commands it
runs, among them verl-agent's data preparation (`--val_data_size N`: the tasks one validation
plays) and the `main_ppo` launch with its `key=value` overrides. These become `StatedConfig`
events; ingest turns them into run facts (store/facts.py).

A printed config is read with `ast.literal_eval` once its brackets close, never executed. It
is bounded: past MAX_CONFIG_LINES lines or MAX_CONFIG_CHARS characters, or at a line that
cannot belong to it, the block is dropped and said so.

Ray interleaves the output of the same actor (a warning, a progress bar) with the printed
lines. pprint indents every line after the first and starts it with an element (a quoted
key or string, a number, a bracket, True/False/None); a line of the actor that does not is
not part of the literal: it is left out, and the lines left out are named in the event. Other
output can also cut a printed line after a key (`'tool_config': `, then a WARNING line): the
next line that starts with an element, indented or not, is the rest of that value.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping

from ccpo_cli.store.readers.base import StatedConfig

MAX_CONFIG_LINES = 20_000
MAX_CONFIG_CHARS = 4 * 1024 * 1024
# Top-level sections of verl's config: a printed dict with none of them is not the run's config.
CONFIG_SECTIONS = frozenset({"actor_rollout_ref", "algorithm", "data", "env", "trainer"})
_PREPARE = re.compile(r"(?:^|[\s+])-m\s+examples\.data_preprocess\.prepare\b")
_LAUNCH = re.compile(r"(?:^|[\s+])-m\s+(?:verl\.trainer\.main_ppo|recipe\.[\w.]+\.main_\w+)\b")
# verl's trainer, resuming: `Resuming from <folder>/global_step_60` (a fresh run prints none).
_RESUME = re.compile(r"^Resuming from\s+(?P<folder>\S*global_step_(?P<step>\d+))\S*\s*$")
# Hydra's last word when the job it ran raised (a crash, not a run that ended by itself).
_CRASH = "Error executing job with overrides:"
_OPENERS, _CLOSERS = "{[(", "}])"
# A pprint continuation line: indented, starting with an element of a literal.
_LITERAL_LINE = re.compile(r"\s+(?:['\"{\[(\d-]|True\b|False\b|None\b)")
# The rest of a value whose key ended the previous line (`'tool_config': `), when other output
# cut the line in two: it starts with an element, at any indentation.
_VALUE_REST = re.compile(r"\s*(?:['\"{\[(\d-]|True\b|False\b|None\b)")
# At most this many left-out line numbers are kept (the count is exact).
MAX_NAMED_INTERLEAVED = 1_000


# verl's trainers print the validation they run before training (`pprint(f"Initial validation
# metrics: {val_metrics}")`): one line, or, when long, pprint's parenthesised run of string
# literals over several lines. A launch that crashes before its first step leaves only this.
_INITIAL_VALIDATION = re.compile(r"""^[("']*Initial validation metrics:\s*""")
_NUMPY_NUMBER = re.compile(r"np\.(?:float|int)\d*\(([^()]*)\)")
MAX_PRINTED_METRICS_LINES = 1_000


def initial_validation_starts(body: str) -> bool:
    return _INITIAL_VALIDATION.match(body.strip()) is not None


class PrintedMetrics:
    """The initial validation's metrics verl printed, collected line by line (one Ray actor's)."""

    def __init__(self, number: int, prefix: str | None):
        self.line, self.prefix = number, prefix
        self.parts: list[str] = []
        self.depth = 0
        self.done = False

    def continues(self, body: str) -> bool:
        """Whether a line is the next piece of the printed value: pprint's next string literal."""
        return body.strip()[:1] in ("'", '"')

    def add(self, body: str) -> dict[str, float] | str | None:
        """Take one more line: the metrics once the printed value closes, a reason (text) when
        it does not read, None while it is still open."""
        self.parts.append(body.strip())
        self.depth += _depth_change(body)
        if self.depth > 0 and len(self.parts) < MAX_PRINTED_METRICS_LINES:
            return None
        self.done = True
        return self._read()

    def _read(self) -> dict[str, float] | str:
        text = "\n".join(self.parts)
        try:
            if text[0] in "(\"'":
                text = ast.literal_eval(text)
            if not isinstance(text, str):
                raise ValueError("not a string")
            value = ast.literal_eval(_NUMPY_NUMBER.sub(r"\1", _INITIAL_VALIDATION.sub("", text)))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return f"printed initial validation metrics from line {self.line} do not read; not read"
        if not isinstance(value, Mapping):
            return f"printed initial validation metrics from line {self.line} are not a mapping; not read"
        return {
            str(key): float(number)
            for key, number in value.items()
            if isinstance(number, (int, float)) and not isinstance(number, bool)
        }


def config_starts(body: str) -> bool:
    """Whether a console line opens a pretty-printed dict (`{'actor_rollout_ref': ...`)."""
    return body.startswith("{'")


def command_event(number: int, body: str) -> StatedConfig | None:
    """A traced data-preparation or launch command, the checkpoint a run resumed from
    (value: its step), or the crash Hydra reports (value: the error line), as an event; None
    for any other line."""
    text = body.strip()
    if text.startswith(_CRASH):
        return StatedConfig(number, "crash", text[: len(_CRASH)])
    if (resume := _RESUME.match(text)) is not None:
        return StatedConfig(number, "resume", int(resume.group("step")))
    if _PREPARE.search(text):
        return StatedConfig(number, "prepare", text)
    if _LAUNCH.search(text) and "=" in text:
        return StatedConfig(number, "launch", text)
    return None


def _depth_change(text: str) -> int:
    """Brackets opened minus closed on one line, outside quoted strings (repr's quoting)."""
    depth, quote, escaped = 0, None, False
    for char in text:
        if quote is not None:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char in _OPENERS:
            depth += 1
        elif char in _CLOSERS:
            depth -= 1
    return depth


class ConfigBlock:
    """A pretty-printed config being collected, line by line, from one Ray actor's lines."""

    def __init__(self, number: int, prefix: str | None):
        self.line, self.prefix = number, prefix
        self.parts: list[str] = []
        self.chars = 0
        self.depth = 0
        self.done = False
        self.interleaved: list[int] = []  # lines of other output inside the block, left out
        self.interleaved_count = 0

    def add(self, body: str, number: int | None = None) -> StatedConfig | str | None:
        """Take one more line (`number` its line in the file). The event once the dict closes
        and reads; a reason (text) when the block is given up; None while it is still open.
        A line after the first that is not a pprint continuation is other output: left out."""
        if self.parts and not self._continues(body):
            self.interleaved_count += 1
            if number is not None and len(self.interleaved) < MAX_NAMED_INTERLEAVED:
                self.interleaved.append(number)
            return self._too_long()
        self.parts.append(body)
        self.chars += len(body) + 1
        self.depth += _depth_change(body)
        if (too_long := self._too_long()) is not None:
            return too_long
        if self.depth > 0:
            return None
        self.done = True
        return self._read()

    def _continues(self, body: str) -> bool:
        if _LITERAL_LINE.match(body):
            return True
        return self.parts[-1].rstrip().endswith(":") and _VALUE_REST.match(body) is not None

    def _too_long(self) -> str | None:
        if (
            len(self.parts) + self.interleaved_count <= MAX_CONFIG_LINES
            and self.chars <= MAX_CONFIG_CHARS
        ):
            return None
        self.done = True
        return (
            f"printed config from line {self.line} is longer than {MAX_CONFIG_LINES} lines or "
            f"{MAX_CONFIG_CHARS // (1024 * 1024)} MiB; not read"
        )

    def _read(self) -> StatedConfig | str | None:
        try:
            value = ast.literal_eval("\n".join(self.parts))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return (
                f"printed config from line {self.line} does not read as a Python literal; not read"
            )
        if not isinstance(value, Mapping) or not CONFIG_SECTIONS & set(value):
            return None  # some other dict the run printed
        return StatedConfig(
            self.line, "resolved", value, tuple(self.interleaved), self.interleaved_count
        )
