"""`ccpo card`: render a run's Hub model card (README.md, summary JSON, learning curve)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    JsonOption,
    LicenseOption,
    OptionalHubRepoOption,
    WindowStartOption,
    emit_json,
    handle_errors,
    info,
    say,
    settings,
)
from ccpo_cli.vocabulary import FINAL, INTERIM


class CardStatus(StrEnum):
    interim = INTERIM
    final = FINAL
    auto = "auto"  # final once the run finished, else interim (report/readiness.py)


STATUS_HELP = (
    "interim (run in progress), final (run finished) or auto (final once the run has finished)."
)


@handle_errors
def card(
    ctx: typer.Context,
    run: Annotated[
        str,
        typer.Option(
            "--run",
            metavar="RUN",
            help="The run whose card to render.",
            autocompletion=completion.run_names,
        ),
    ],
    status: Annotated[CardStatus, typer.Option("--status", help=STATUS_HELP)] = CardStatus.interim,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            help="README file to write; results/ goes beside it. Default: ccpo-card-RUN/README.md.",
        ),
    ] = None,
    repo: OptionalHubRepoOption = None,
    window_start: WindowStartOption = None,
    license: LicenseOption = None,  # noqa: A002
    checkpoint_step: Annotated[
        int | None,
        typer.Option(
            "--checkpoint-step",
            help="Step of the checkpoint the card describes (default: best so far for interim, last for final).",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Overwrite an existing README (and results/) that ccpo did not write."
        ),
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Render the Hub model card of a run from the database; numbers and caveats come from data.

    `--repo` names the Hub id the card will live at (for the title and usage snippet).

    Example: ccpo card --run grpo-seed0 --repo me/grpo-alfworld --output card/README.md
    """
    # Imported here: the cards pull in the comparison document (scipy) and jinja2.
    from ccpo_cli.cards.staging import stage_card
    from ccpo_cli.names import default_folder, require_inside
    from ccpo_cli.report.readiness import card_readiness
    from ccpo_cli.store import open_db

    readme = (
        output
        or require_inside(default_folder("ccpo-card", run), Path.cwd(), "--run") / "README.md"
    )
    db = open_db(settings(ctx).db, must_exist=True)
    ready = card_readiness(db, run, status.value, window_start)
    if status is CardStatus.auto:
        info(ctx, f"{ready.status} card ({ready.status_basis})")
    staged = stage_card(
        db,
        run,
        readme,
        status=ready.status,
        repo_id=repo,
        window_start=window_start,
        license=license,
        checkpoint_step=checkpoint_step,
        force=force,
        merge_existing=True,
    )
    if as_json:
        emit_json(
            {
                "run": staged.context.run,
                "status": staged.context.status,
                "card": str(staged.readme),
                "card_hash": staged.card_hash,
                "files": {path: str(local) for path, local in staged.files.items()},
                "summary": staged.context.summary,
            }
        )
    else:
        info(
            ctx,
            f"wrote {staged.readme} and {', '.join(str(p) for k, p in staged.files.items() if k != 'README.md')}",
        )
        say(str(staged.readme))
