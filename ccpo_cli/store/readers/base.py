"""What every reader yields, and the checks every format shares.

A reader is a generator over one file or folder. It yields a `MetricRecord` per step it can
read, a `Skipped` for a line (or record) it cannot, `Cleaned` for a line it read after
dropping NUL bytes, and at most one `IncompleteTail` for a last line still being written.
Nothing is collected: the caller decides what to keep, so memory does not grow with the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# One physical line longer than this is skipped (and reported) instead of being held in memory.
MAX_LINE_BYTES = 16 * 1024 * 1024
MAX_LINE_TEXT = "16 MiB"
# SQLite stores integers as signed 64-bit: a step or count above this cannot be recorded.
LARGEST_INTEGER = 2**63 - 1

ProgressCallback = Callable[[int], None]


@dataclass
class MetricRecord:
    """One step's metrics as read, with the line it started on (None where a format has no lines)."""

    step: int
    metrics: dict[str, Any]
    line: int | None = None


@dataclass
class Skipped:
    line: int | None
    reason: str


@dataclass
class Cleaned:
    """A line read after its NUL bytes were dropped (a restarted run's log pads with them)."""

    line: int


@dataclass
class IncompleteTail:
    line: int


ReadEvent = MetricRecord | Skipped | Cleaned | IncompleteTail


class BadRecord(ValueError):
    """A record that cannot be recorded; its message is the reason reported for the skip."""


@dataclass
class ReadStats:
    """Filled in while a reader runs: lines seen so far, and the byte-progress callback."""

    progress: ProgressCallback | None = None
    lines: int = 0


def whole_number(value: Any, field: str, *, what: str = "a whole number") -> int:
    """`value` as a non-negative int that SQLite can hold; BadRecord naming `field` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"field {field!r} must be {what}, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise BadRecord(f"field {field!r} must be {what}, got {value!r}")
    if value < 0:
        raise BadRecord(f"field {field!r} is negative ({value})")
    if value > LARGEST_INTEGER:
        raise BadRecord(f"field {field!r} is {value:.4g}, beyond the largest integer a database holds (2^63-1)")
    return int(value)


def step_number(value: Any) -> int:
    return whole_number(value, "step")
