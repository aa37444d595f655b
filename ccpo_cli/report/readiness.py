"""What a card of a run can say now: `--status auto` and, when the default window holds too few
evaluations for a window mean, the `--window-start` that would hold enough.

`card` and `publish` take `--status auto`: final once the run reached the largest total steps
recorded for it (compare's `run_state` "finished"), interim before. The default window
(`report/window.py`, `DEFAULT_WINDOW`) of a run at step 80 of 150 holds two evaluations; rather than a refusal that
says "pass an earlier --window-start", the refusal names the start that gives the last
`MIN_HEADLINE_EVALUATIONS` evaluations of the run's protocol. The window is never moved without
being asked: a card's headline is the window the reader is told.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.report.window import MIN_HEADLINE_EVALUATIONS
from ccpo_cli.vocabulary import FINAL, INTERIM

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import RunEntry

AUTO = "auto"


@dataclass(frozen=True)
class CardReadiness:
    status: str  # interim or final
    status_basis: str  # what decided it (given, or the run's state)


def _entry(db: sqlite_utils.Database, run: str, window_start: int | None) -> RunEntry | None:
    from ccpo_cli.report.compare import compare_runs

    # None when retracted: compare leaves it out; the card refuses it with its own reason.
    return compare_runs(db, [run], window_start).find_run(run)


def suggested_window_start(entry: RunEntry) -> int | None:
    """The latest start whose window holds MIN_HEADLINE_EVALUATIONS evaluations of the run's
    protocol, or None when the run has fewer than that in all."""
    episodes = entry.window["protocol"].get("episodes")
    steps = sorted(
        row["step"]
        for row in entry.evaluations
        if episodes is None or row["episodes"] in (None, episodes)
    )
    return steps[-MIN_HEADLINE_EVALUATIONS] if len(steps) >= MIN_HEADLINE_EVALUATIONS else None


def card_readiness(
    db: sqlite_utils.Database, run: str, status: str, window_start: int | None
) -> CardReadiness:
    """The status to render (`auto` resolved) and, with the default window, InvalidInput naming
    the --window-start to pass when that window is too short for a window mean."""
    entry = _entry(db, run, window_start) if status == AUTO or window_start is None else None
    if status == AUTO:
        state = "unknown" if entry is None else entry.run_state
        resolved = CardReadiness(
            FINAL if state == "finished" else INTERIM,
            f"--status auto: the run is {state} (step {None if entry is None else entry.last_step} of "
            f"{None if entry is None else entry.total_steps})",
        )
    else:
        resolved = CardReadiness(status, "given")
    if window_start is None and entry is not None and entry.window["n"] < MIN_HEADLINE_EVALUATIONS:
        window = entry.window
        suggestion = suggested_window_start(entry)
        if suggestion is not None:
            raise InvalidInput(
                f"run {run!r}: the default window (step >= {window['start']}, {window['start_basis']}) holds "
                f"{window['n']} evaluation(s), a window mean needs {MIN_HEADLINE_EVALUATIONS}; pass "
                f"--window-start {suggestion} for the last {MIN_HEADLINE_EVALUATIONS} evaluations, or wait for more"
            )
    return resolved


__all__ = ["AUTO", "CardReadiness", "card_readiness", "suggested_window_start"]
