"""`ccpo card`: render a run's Hub model card (README.md, summary JSON, learning curve)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli.common import (
    JsonOption,
    WindowStartOption,
    emit_json,
    handle_errors,
    info,
    settings,
    stdout_console,
)
from ccpo_cli.names import default_folder, require_inside
from ccpo_cli.store import open_db


class CardStatus(StrEnum):
    interim = "interim"
    final = "final"


@handle_errors
def card(
    ctx: typer.Context,
    run: Annotated[str, typer.Option("--run", help="The run whose card to render.")],
    status: Annotated[CardStatus, typer.Option("--status", help="interim (run in progress) or final (run finished).")] = CardStatus.interim,
    output: Annotated[Path | None, typer.Option("--output", help="README file to write; results/ goes beside it. Default: ccpo-card-RUN/README.md.")] = None,
    repo_id: Annotated[str | None, typer.Option("--repo-id", help="Hub id the card will live at (for the title and usage snippet).")] = None,
    window_start: WindowStartOption = None,
    license: Annotated[str | None, typer.Option("--license", help="License id, when neither the run nor its base model records one.")] = None,  # noqa: A002
    checkpoint_step: Annotated[int | None, typer.Option("--checkpoint-step", help="Step of the checkpoint the card describes (default: best so far for interim, last for final).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing README (and results/) that ccpo did not write.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Render the Hub model card of a run from the database; numbers and caveats come from data."""
    from ccpo_cli.cards.staging import stage_card

    readme = output or require_inside(default_folder("ccpo-card", run), Path.cwd(), "--run") / "README.md"
    staged = stage_card(
        open_db(settings(ctx).db, must_exist=True), run, readme, status=status.value, repo_id=repo_id,
        window_start=window_start, license=license, checkpoint_step=checkpoint_step,
        force=force, merge_existing=True,
    )
    if as_json:
        emit_json({"run": staged.context.run, "status": staged.context.status, "card": str(staged.readme),
                   "card_hash": staged.card_hash, "files": {path: str(local) for path, local in staged.files.items()},
                   "summary": staged.context.summary})
    else:
        info(ctx, f"wrote {staged.readme} and {', '.join(str(p) for k, p in staged.files.items() if k != 'README.md')}")
        stdout_console.print(str(staged.readme), markup=False)
