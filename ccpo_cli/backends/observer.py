"""What a trainer tells whoever watches it (the Hub publisher of `--push-to-hub`), and nothing more.

The trainer calls these at fixed points and never waits on them beyond `finished`, whose own
bound is the watcher's business; an exception from a watcher is the watcher's bug, so the
trainer never lets one change its numbers or its exit status (`notify`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class TrainingObserver(Protocol):
    def started(self, run: str, run_dir: Path) -> None:
        """The run is recorded in runs.db and about to train."""

    def evaluated(self, step: int) -> None:
        """An evaluation of `step` is recorded (and, at an evaluation step, its checkpoint saved)."""

    def progress(self) -> str | None:
        """A few words for the progress line (e.g. the last push), or None."""

    def finished(self, status: str, last_step: int, checkpoint: Path | None) -> None:
        """Training ended with `status` (finished, failed, stopped) at `last_step`."""


@dataclass(frozen=True)
class StepProgress:
    """Where a training run is after a step, for a progress bar (cli/progress.py `TrainBar`);
    `line` is the same as the step's plain log line, which a log gets instead of a bar."""

    run: str
    step: int
    total: int
    seconds_per_step: float
    eta: str  # the training left at this pace, evaluations not counted
    held_out: float | None  # the last held-out success in percent, None before the first
    held_out_step: int | None
    line: str


def notify(log: Callable[[str], None], call: Callable[[], object]) -> object:
    """Run one observer call; a failure is logged, never raised into the trainer."""
    try:
        return call()
    except Exception as error:  # the observer's failure must not become the trainer's
        log(f"publishing: {type(error).__name__}: {error}")
        return None
