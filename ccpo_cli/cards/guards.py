"""What a card refuses to state: a status the run's progress does not support, a headline from
too few evaluations (the card then says so instead), and a license nobody recorded."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ccpo_cli.cards.baselines import inherited_license
from ccpo_cli.cards.selection import config_of
from ccpo_cli.errors import InvalidInput
from ccpo_cli.vocabulary import CARD_STATUSES, FINAL

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import RunEntry

STATUSES = CARD_STATUSES
# A policy of the local CPU backend is trained from scratch: there is no base model to name or
# inherit a license from, so its card carries ccpo's own license (pyproject.toml: Apache-2.0).
PROJECT_LICENSE = "apache-2.0"


def check_status(run: str, status: str, this: RunEntry) -> None:
    """A final card needs the run to have reached the largest total steps ever recorded for it (a
    re-ingest with a smaller total is a conflict, not a shortcut); an interim card of a finished
    run would promise numbers that will never change, so it is refused, and so is any card of a
    failed run."""
    if status not in STATUSES:
        raise InvalidInput(f"card status {status!r} is not one of {', '.join(STATUSES)}")
    if this.run_state == "failed":
        # An interim card would promise final numbers that will never come; a final one would
        # present a failed run's numbers as a result. Refused, with the failure named.
        raise InvalidInput(
            f"run {run!r} failed (last step {this.last_step}): no card is rendered for a failed run; "
            "its evaluations stay in `ccpo compare --include-failed`"
        )
    totals = this.total_steps_recorded
    last_step = this.last_step
    if status == FINAL:
        if not totals:
            raise InvalidInput(f"run {run!r} records no total steps, so it cannot be called final")
        if last_step is None or last_step < max(totals):
            conflict = (
                f" (total steps recorded: {', '.join(map(str, totals))})" if len(totals) > 1 else ""
            )
            raise InvalidInput(
                f"run {run!r} is at step {last_step or 0} of {max(totals)}{conflict}: "
                "a final card needs a finished run (use --status interim)"
            )
    elif this.run_state == "finished":
        raise InvalidInput(
            f"run {run!r} finished (step {last_step} of {max(totals)}): an interim card would promise "
            "numbers that will not change; render it with --status final"
        )


def check_headline(
    name: str, window: Mapping[str, Any], window_start: int, evaluations: int
) -> bool:
    """Whether the window holds enough evaluations for a window mean (the card's headline and
    model-index value). A run with evaluations but too few in the window still gets a card that
    says so and reports the evaluations it has (a repository that receives weights always gets
    a card); only a run with no evaluation at all is refused, having nothing to report."""
    if not evaluations:
        raise InvalidInput(
            f"run {name!r} has no held-out evaluation yet; a card reports evaluations, so wait for one"
        )
    return bool(window.get("n")) and bool(window.get("headline"))


def card_license(run_row: Mapping[str, Any], given: str | None, from_scratch: bool) -> str:
    base_model = run_row.get("base_model")
    if not base_model and not from_scratch:
        raise InvalidInput(
            f"run {run_row['name']!r} records no base model; ingest it with --base-model"
        )
    # A from-scratch policy inherits no license: it is ccpo's own work, under ccpo's license.
    license = (
        given
        or config_of(run_row).get("license")
        or (PROJECT_LICENSE if from_scratch else inherited_license(base_model))
    )
    if not license:
        raise InvalidInput(
            f"run {run_row['name']!r} records no license and the base model {base_model} has none on "
            "record in configs/published_baselines.yaml; pass --license with the base model's license"
        )
    return license
