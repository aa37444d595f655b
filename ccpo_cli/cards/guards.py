"""What a card refuses to state: a headline from too few evaluations (the card then says so
instead), and a license nobody recorded. The status is `report.readiness.card_status`'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccpo_cli.cards.baselines import inherited_license
from ccpo_cli.cards.selection import config_of
from ccpo_cli.errors import InvalidInput
from ccpo_cli.report.window import Window
from ccpo_cli.vocabulary import CARD_STATUSES

STATUSES = CARD_STATUSES
# A policy of the local CPU backend is trained from scratch: there is no base model to name or
# inherit a license from, so its card carries ccpo's own license (pyproject.toml: Apache-2.0).
PROJECT_LICENSE = "apache-2.0"


def check_headline(name: str, window: Window, evaluations: int) -> bool:
    """Whether the window holds enough evaluations for a window mean (the card's headline and
    model-index value). A run with evaluations but too few in the window still gets a card that
    says so and reports the evaluations it has (a repository that receives weights always gets
    a card); only a run with no evaluation at all is refused, having nothing to report."""
    if not evaluations:
        raise InvalidInput(
            f"run {name!r} has no held-out evaluation yet; a card reports evaluations, so wait for one"
        )
    return bool(window.n) and window.headline


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
