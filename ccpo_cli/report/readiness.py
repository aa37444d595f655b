"""What a card of a run can say now: `--status auto` and, when the default window holds too few
evaluations for a window mean, the `--window-start` that would hold enough.

`card_status` is the one interim/final decision (`card`, `publish` and `train --push-to-hub`):
`--status auto` is final once the run reached the largest total steps recorded for it
(compare's `run_state` "finished"), interim before. The default window
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
from ccpo_cli.vocabulary import CARD_STATUSES, FINAL, INTERIM

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
    episodes = entry.window.protocol.get("episodes")
    steps = sorted(
        row["step"]
        for row in entry.evaluations
        if episodes is None or row["episodes"] in (None, episodes)
    )
    return steps[-MIN_HEADLINE_EVALUATIONS] if len(steps) >= MIN_HEADLINE_EVALUATIONS else None


def _progress(entry: RunEntry) -> str:
    """ "step 80 of 150", or "step 80 (total steps not recorded)": never a None in the words."""
    step = "no step recorded" if entry.last_step is None else f"step {entry.last_step}"
    totals = entry.total_steps_recorded
    return f"{step} of {max(totals)}" if totals else f"{step} (total steps not recorded)"


def card_status(run: str, entry: RunEntry, requested: str) -> CardReadiness:
    """The one interim/final decision: `ccpo card`, `ccpo publish` and `train --push-to-hub`
    (whose card renders through `cards.build_card_context`) all take their status from here.

    auto is final once the run reached the largest total steps recorded for it (compare's
    `run_state` "finished"), interim before. A final card needs a finished run (a re-ingest with
    a smaller total is a conflict, not a shortcut); an interim card of a finished run would
    promise numbers that will never change, so it is refused, and so is any card of a failed run.
    """
    if requested not in (*CARD_STATUSES, AUTO):
        raise InvalidInput(f"card status {requested!r} is not one of {', '.join(CARD_STATUSES)}")
    if entry.run_state == "failed":
        # An interim card would promise final numbers that will never come; a final one would
        # present a failed run's numbers as a result. Refused, with the failure named.
        raise InvalidInput(
            f"run {run!r} failed ({_progress(entry)}): no card is rendered for a failed run; "
            "its evaluations stay in `ccpo compare --include-failed`"
        )
    finished = entry.run_state == "finished"
    if requested == AUTO:
        return CardReadiness(
            FINAL if finished else INTERIM,
            f"--status auto: the run is {entry.run_state} ({_progress(entry)})",
        )
    totals = entry.total_steps_recorded
    if requested == FINAL and not totals:
        raise InvalidInput(f"run {run!r} records no total steps, so it cannot be called final")
    if requested == FINAL and not finished:
        conflict = (
            f" (total steps recorded: {', '.join(map(str, totals))})" if len(totals) > 1 else ""
        )
        raise InvalidInput(
            f"run {run!r} is at {_progress(entry)}{conflict}: a final card needs a finished run "
            "(use --status interim)"
        )
    if requested == INTERIM and finished:
        raise InvalidInput(
            f"run {run!r} finished ({_progress(entry)}): an interim card would promise numbers "
            "that will not change; render it with --status final"
        )
    return CardReadiness(requested, "given")


def card_readiness(
    db: sqlite_utils.Database, run: str, status: str, window_start: int | None
) -> CardReadiness:
    """The status to render (`card_status`, `auto` resolved) and, with the default window of a
    run that can still evaluate, InvalidInput naming the --window-start to pass when that window
    is too short for a window mean. A run that ended gets its card with the evaluations it has
    (the card says the window is too short), as `train --push-to-hub` publishes it."""
    entry = _entry(db, run, window_start)
    if entry is None:  # retracted: the card refuses it with its own reason
        return CardReadiness(INTERIM if status == AUTO else status, "given")
    resolved = card_status(run, entry, status)
    still_running = entry.run_state in ("running", "interrupted", "unknown")
    if window_start is None and still_running and entry.window.n < MIN_HEADLINE_EVALUATIONS:
        window = entry.window
        suggestion = suggested_window_start(entry)
        if suggestion is not None:
            raise InvalidInput(
                f"run {run!r}: the default window (step >= {window.start}, {window.start_basis}) holds "
                f"{window.n} evaluation(s), a window mean needs {MIN_HEADLINE_EVALUATIONS}; pass "
                f"--window-start {suggestion} for the last {MIN_HEADLINE_EVALUATIONS} evaluations, or wait for more"
            )
    return resolved


__all__ = ["AUTO", "CardReadiness", "card_readiness", "card_status", "suggested_window_start"]
