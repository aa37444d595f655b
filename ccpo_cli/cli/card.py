"""`ccpo card`: render a run's Hub model card (README.md, summary JSON, learning curve)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from ccpo_cli.cli.common import (
    JsonOption,
    LicenseOption,
    OptionalHubRepoOption,
    WindowStartOption,
    emit_json,
    info,
    run_option,
    say,
    settings,
)
from ccpo_cli.cli.options import option_values, options_command
from ccpo_cli.vocabulary import FINAL, INTERIM


class CardStatus(StrEnum):
    interim = INTERIM
    final = FINAL
    auto = "auto"  # final once the run finished, else interim (report/readiness.py)


# `--status` of `ccpo card` and `ccpo publish`.
CardStatusOption = Annotated[
    CardStatus,
    typer.Option(
        "--status",
        help="interim (run in progress), final (run finished) or auto (final once the run has finished).",
    ),
]


def _checkpoint_step_option(checkpoint: str) -> Any:
    """`--checkpoint-step` of `ccpo card` and `ccpo publish`: one default rule, said once."""
    return Annotated[
        int | None,
        typer.Option(
            "--checkpoint-step",
            help=f"Step of {checkpoint} (default: best so far for interim, last for final).",
        ),
    ]


CardCheckpointStepOption = _checkpoint_step_option("the checkpoint the card describes")
PublishedCheckpointStepOption = _checkpoint_step_option("the published checkpoint")


@dataclass(frozen=True)
class CardOptions:
    """What `ccpo card` was asked (None: not given)."""

    run: Annotated[str, run_option("The run whose card to render.")]
    status: CardStatusOption = CardStatus.interim
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="README file to write; results/ goes beside it. Default: ccpo-card-RUN/README.md.",
        ),
    ] = None
    repo: OptionalHubRepoOption = None
    window_start: WindowStartOption = None
    license: LicenseOption = None  # noqa: A002
    checkpoint_step: CardCheckpointStepOption = None
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Overwrite an existing README (and results/) that ccpo did not write."
        ),
    ] = False
    as_json: JsonOption = False


@options_command(CardOptions)
def card(ctx: typer.Context, options: CardOptions) -> None:
    """Render the Hub model card of a run from the database; numbers and caveats come from data.

    `--repo` names the Hub id the card will live at (for the title and usage snippet).

    Example: ccpo card --run grpo-seed0 --repo me/grpo-alfworld --output card/README.md
    """
    # Imported here: the cards pull in the comparison document (scipy) and jinja2.
    from ccpo_cli.cards.staging import stage_card
    from ccpo_cli.names import default_folder, require_inside
    from ccpo_cli.store import open_db

    run = options.run
    readme = (
        options.output
        or require_inside(default_folder("ccpo-card", run), Path.cwd(), "--run") / "README.md"
    )
    db = open_db(settings(ctx).db, must_exist=True)
    staged = stage_card(
        db,
        run,
        readme,
        status=resolved_status(ctx, db, run, options.status, options.window_start),
        repo_id=options.repo,
        **option_values(options, ("window_start", "license", "checkpoint_step", "force")),
        merge_existing=True,
    )
    if options.as_json:
        emit_json(_staged_document(staged))
    else:
        written = ", ".join(str(p) for k, p in staged.files.items() if k != "README.md")
        info(ctx, f"wrote {staged.readme} and {written}")
        say(str(staged.readme))


def resolved_status(
    ctx: typer.Context, db, run: str, status: CardStatus, window_start: int | None
) -> str:
    """The status a card of `run` gets (`ccpo card`, `ccpo publish`): --status, or for auto the
    one the run's state decides, said on stderr with its basis."""
    from ccpo_cli.report.readiness import card_readiness

    ready = card_readiness(db, run, status.value, window_start)
    if status is CardStatus.auto:
        info(ctx, f"{ready.status} card ({ready.status_basis})")
    return ready.status


def _staged_document(staged) -> dict:
    """`ccpo card --json`: the card written, its hash, the files beside it and its summary."""
    return {
        "run": staged.context.run,
        "status": staged.context.status,
        "card": str(staged.readme),
        "card_hash": staged.card_hash,
        "files": {path: str(local) for path, local in staged.files.items()},
        "summary": staged.context.summary,
    }
