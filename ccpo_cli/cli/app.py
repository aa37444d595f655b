"""The `ccpo` command: global options and the registry of sub-commands.

Each command module owns its command function or its sub-app (`arms`, `games`, `runs`) and
knows nothing of this one; registration happens here, so imports go one way (app -> commands).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli import __version__
from ccpo_cli.cli import (
    arms,
    card,
    compare,
    estimate,
    games,
    ingest,
    matrix,
    publish,
    runs,
    sync,
    train,
)
from ccpo_cli.cli import eval as eval_
from ccpo_cli.cli.common import Settings

app = typer.Typer(
    name="ccpo",
    help="Reproducible credit-assignment research for LLM agents (GRPO, GiGPO, CCPO on ALFWorld).",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
    add_completion=True,
)


def _version(value: bool) -> None:
    if value:
        print(f"ccpo {__version__}")
        raise typer.Exit(0)


@app.callback()
def root(
    ctx: typer.Context,
    db: Annotated[Path, typer.Option("--db", envvar="CCPO_DB", help="The runs database.")] = Path("runs.db"),
    quiet: Annotated[bool, typer.Option("--quiet", help="Only results and errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = Settings(db=db, quiet=quiet)


app.add_typer(arms.arms_app, name="arms")
app.command("estimate")(estimate.estimate_command)
app.command("train")(train.train)
app.command("eval")(eval_.eval_command)
app.add_typer(games.games_app, name="games")
app.command("ingest")(ingest.ingest)
app.add_typer(runs.runs_app, name="runs")
app.command("compare")(compare.compare)
app.command("matrix")(matrix.matrix)
app.command("card")(card.card)
app.command("publish")(publish.publish)
app.add_typer(sync.sync_app, name="sync")


def main() -> None:
    app()
