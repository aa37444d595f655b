"""What every reader yields, and the checks every format shares.

A reader is a generator over one file or folder. It yields a `MetricRecord` per step it can
read, a `Skipped` for a line (or record) it cannot, `Cleaned` for a line it read after
dropping NUL bytes, at most one `IncompleteTail` for a last line still being written, and a
`StatedConfig` for configuration the log printed (verl's console). Nothing is collected: the
caller decides what to keep, so memory does not grow with the file.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput

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
    # A run summary (wandb-summary.json): the latest value of every key, `step` the last step
    # logged, which is not the step each value was measured at.
    summary: bool = False


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


@dataclass
class StatedConfig:
    """Configuration a log printed about its own run: `resolved` is verl's resolved config as
    main_ppo pretty-prints it (a nested mapping), `launch` the text of a traced
    `python -m verl.trainer.main_ppo key=value ...` command, `prepare` the text of verl-agent's
    traced data preparation command (`examples.data_preprocess.prepare --val_data_size N`),
    `resume` the step of the checkpoint verl says it resumed from, `crash` Hydra's report that the
    job raised (the run stopped there). `left_out` names the lines of other output found inside a printed config (Ray interleaves
    them) and read around; `left_out_count` counts them all."""

    line: int
    kind: str
    value: Any
    left_out: tuple[int, ...] = ()
    left_out_count: int = 0


ReadEvent = MetricRecord | Skipped | Cleaned | IncompleteTail | StatedConfig


class BadRecord(ValueError):
    """A record that cannot be recorded; its message is the reason reported for the skip."""


# At most this many distinct metric names a reader drops are remembered (for the report).
MAX_DROPPED_KEYS = 10_000


@dataclass
class ReadStats:
    """Filled in while a reader runs: lines seen so far, the byte-progress callback, and the
    metric names a reader dropped before they reached a record (a long CSV keeps only the
    names that can become evaluations; the set is bounded)."""

    progress: ProgressCallback | None = None
    lines: int = 0
    dropped_keys: set[str] = field(default_factory=set)

    def drop_key(self, key: str) -> None:
        if len(self.dropped_keys) < MAX_DROPPED_KEYS:
            self.dropped_keys.add(key)


def whole_number(value: Any, field: str, *, what: str = "a whole number") -> int:
    """`value` as a non-negative int that SQLite can hold; BadRecord naming `field` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"field {field!r} must be {what}, got {value!r}")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise BadRecord(f"field {field!r} must be {what}, got {value!r}")
    if value < 0:
        raise BadRecord(f"field {field!r} is negative ({value})")
    if value > LARGEST_INTEGER:
        raise BadRecord(
            f"field {field!r} is {value:.4g}, beyond the largest integer a database holds (2^63-1)"
        )
    return int(value)


def step_number(value: Any) -> int:
    return whole_number(value, "step")


def refuse_link_out_of(folder: Path, path: Path) -> Path:
    """`path`, a file found inside the ingested `folder`; InvalidInput when it is, or passes
    through, a symbolic link that leads out of the folder: a run folder's files are read,
    nothing they point to elsewhere (a link to /etc/passwd is not followed)."""
    root, target = folder.resolve(), path.resolve()
    if target != root and root not in target.parents:
        raise InvalidInput(
            f"{path}: a symbolic link out of the folder being ingested (to {target}); not followed"
        )
    return path
