"""Progress on stderr, for a person at a terminal or for a log.

In a terminal: a Rich bar with the real total (the library reports `(0, total)` before the first
episode), elapsed and remaining time. Written to a file or a CI log, a bar would be either
nothing or thousands of carriage returns, so there it is one line every `every` items (a tenth of
the total by default) or every `every_s` seconds, whichever comes first, and one at the end.
A log line is also written when `every_s` pass without one (a slow model may take minutes per
episode), by a timer thread that stops with the progress. `--quiet` shows neither.

An evaluation also says its turn (`turn`): the games of a batch often all end together at the
turn limit, so the episode count alone would stand still until the end; and each set-up phase
(loading a model, starting the engine) is a line of its own before it starts (`phase`).
`TrainBar` is the training run's bar in a terminal (step N/total, s/step, ETA, last held-out).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

LOG_EVERY_S = 10.0

# The console of the bar on screen. A line printed through it goes above the bar (rich's Live
# redraws the bar under it); a line printed through any other console would land on the bar's
# own line, since rich writes past the stream its Live redirects. cli/common.stderr_console
# hands this one out while a bar is shown.
_on_screen: Any = None


def bar_console() -> Any:
    """The console of the bar now on screen, or None."""
    return _on_screen


def _show(console: Any) -> None:
    global _on_screen
    _on_screen = console


class Progress:
    def __init__(
        self,
        label: str,
        unit: str,
        *,
        console: Any,
        quiet: bool = False,
        every: int | None = None,
        every_s: float = LOG_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
        terminal: bool | None = None,
        timer: bool = True,
    ):
        self.label, self.unit, self.console, self.quiet = label, unit, console, quiet
        self.every, self.every_s, self.clock = every, every_s, clock
        self.terminal = console.is_terminal if terminal is None else terminal
        self._bar: Any = None
        self._task: Any = None
        self._started = clock()
        self._last_time = self._started
        self._last_done: int | None = None
        self._state: tuple[int, int | None] = (0, None)
        self._seen = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._with_timer = timer
        self._turn = ""
        # In a log a set-up line is written once its phase has passed (at the next event): a
        # command that fails while setting up then prints its one error line only.
        self._pending_phase: str | None = None

    def __enter__(self) -> Progress:
        if self.terminal and not self.quiet:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import (
                Progress as Bar,
            )

            self._bar = Bar(
                TextColumn(self.label),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TextColumn("{task.fields[turn]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
                transient=True,
            )
            self._bar.__enter__()
            _show(self.console)
            self._task = self._bar.add_task(self.unit, total=None, turn="")
        elif not self.quiet and self.every_s > 0 and self._with_timer:
            self._timer = threading.Thread(target=self._tick, name="ccpo-progress", daemon=True)
            self._timer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.join(timeout=1.0)
        if exc[0] is None:
            self._flush_phase()
        if self._bar is not None:
            _show(None)
            self._bar.__exit__(*exc)

    def _tick(self) -> None:
        while not self._stop.wait(self.every_s / 4):
            with self._lock:
                if self._seen and self.clock() - self._last_time >= self.every_s:
                    self._write(*self._state)

    def _write(self, done: int, total: int | None) -> None:
        now = self.clock()
        self._last_done, self._last_time = done, now
        share = f" ({100 * done / total:.0f}%)" if total else ""
        of = f"/{total}" if total else ""
        turn = f", {self._turn}" if self._turn and not (total and done >= total) else ""
        self.console.print(
            f"{self.label} {done}{of} {self.unit}{share}{turn}, {now - self._started:.0f} s",
            markup=False,
        )

    def phase(self, text: str) -> None:
        """A set-up phase, as a line of its own: above the bar at once in a terminal, in a log
        once the phase has passed."""
        if self.quiet:
            return
        if self._bar is not None:
            self.console.print(f"{self.label} set-up: {text}", markup=False)
            return
        self._flush_phase()
        self._pending_phase = text

    def _flush_phase(self) -> None:
        if self._pending_phase is not None:
            text, self._pending_phase = self._pending_phase, None
            self.console.print(f"{self.label} set-up: {text}", markup=False)

    def turn(self, turn: int, limit: int) -> None:
        """The turn the games being played are at: shown beside the episodes, and in a log the
        10-second line says it, so a batch whose games all run to the limit still shows motion."""
        if self.quiet:
            return
        self._flush_phase()
        self._turn = f"turn {turn}/{limit}"
        if self._bar is not None:
            self._bar.update(self._task, turn=self._turn)
            return
        with self._lock:
            if self._seen and self.clock() - self._last_time >= self.every_s:
                self._write(*self._state)

    def update(self, done: int, total: int | None) -> None:
        if self.quiet:
            return
        self._flush_phase()
        if self._bar is not None:
            self._bar.update(self._task, completed=done, total=total)
            return
        with self._lock:
            self._state, self._seen = (done, total), True
            # Nothing before the first item is done (a command that fails at once prints its one
            # error line only); the timer still says where it is once `every_s` pass.
            last = 0 if self._last_done is None else self._last_done
            every = self.every or max(1, (total or 0) // 10)
            finished = total is not None and done >= total
            if done != last and (
                done - last >= every
                or finished
                or self.clock() - self._last_time >= self.every_s
                or self._last_done is None
            ):
                self._write(done, total)


class TrainBar:
    """A training run's bar in a terminal: `step 37/200`, the trainer's s/step and ETA (training
    left, evaluations not counted, as in its log line) and the last held-out value; the
    evaluation lines print above it. In a log there is no bar: the trainer's own step lines,
    with their ISO time and run name, are the progress there (backends/local/trainer.step_line)."""

    def __init__(self, console: Any):
        self.console = console
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> TrainBar:
        from rich.progress import BarColumn, TextColumn
        from rich.progress import Progress as Bar

        self._bar = Bar(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("step {task.completed:.0f}/{task.total:.0f}"),
            TextColumn("{task.fields[pace]}"),
            TextColumn("{task.fields[held_out]}"),
            console=self.console,
            transient=True,
        )
        self._bar.__enter__()
        _show(self.console)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            _show(None)
            self._bar.__exit__(*exc)

    def update(self, step: Any) -> None:
        """`step` is the trainer's `StepProgress` (backends/local/trainer.py)."""
        pace = f"{step.seconds_per_step:.1f} s/step  ETA {step.eta}"
        held_out = (
            "held-out -"
            if step.held_out is None
            else f"held-out {step.held_out:.1f}%@{step.held_out_step}"
        )
        if self._task is None:
            self._task = self._bar.add_task(
                step.run, total=step.total, completed=step.step, pace=pace, held_out=held_out
            )
        else:
            self._bar.update(
                self._task,
                description=step.run,
                total=step.total,
                completed=step.step,
                pace=pace,
                held_out=held_out,
            )
