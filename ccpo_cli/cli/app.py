"""The `ccpo` command: global options and the registry of sub-commands.

Each sub-command lives in its own module in this package and registers itself on `app`
(or on a sub-app it adds); the modules are imported below so that registration happens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli import __version__
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


# Sub-command modules register themselves on `app` when imported; one line per module.
# fmt: off
# ruff: noqa: E402, F401
import ccpo_cli.cli.arms  # noqa
import ccpo_cli.cli.estimate  # noqa
import ccpo_cli.cli.train  # noqa
import ccpo_cli.cli.eval  # noqa
import ccpo_cli.cli.games  # noqa
import ccpo_cli.cli.ingest  # noqa
import ccpo_cli.cli.runs  # noqa
import ccpo_cli.cli.compare  # noqa
import ccpo_cli.cli.card  # noqa
import ccpo_cli.cli.publish  # noqa
from ccpo_cli.cli import matrix as _matrix_module  # noqa
app.command("matrix")(_matrix_module.matrix)
# (end of sub-command imports)
# fmt: on


def main() -> None:
    app()
