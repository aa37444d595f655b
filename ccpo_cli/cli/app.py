"""The `ccpo` command: global options and the registry of sub-commands.

Each command module owns its command function or its sub-app (`arms`, `games`, `runs`, `sync`)
and knows nothing of this one; registration happens here (`COMMANDS`), so imports go one way
(app -> commands). The command modules import only typer and `cli/common.py` at the top, so
building the whole tree (`--help`, a TAB of completion) costs no library import, and a command
line that names its command imports and builds that command alone.

The global options `--db` and `--quiet` are the root's, and `CcpoGroup` gives every command the
same two options as well, so `ccpo runs list --db other.db` works as `ccpo --db other.db runs
list` does (the later one wins).
"""

from __future__ import annotations

import copy
import functools
import importlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer._click import Context

from ccpo_cli import __version__
from ccpo_cli.cli.common import DEFAULT_DB, Settings, settings

GLOBAL_PANEL = "Global options (also accepted before the command)"
GLOBAL_MARK = "_ccpo_global"  # attribute set on the global options a command carries (gen_cli_docs skips them)


def _global_options_template(
    db: Annotated[
        Path | None,
        typer.Option(
            "--db", metavar="PATH", help="The runs database (default: CCPO_DB, else ./runs.db)."
        ),
    ] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Only results and errors.")] = False,
) -> None:
    """Never called: Typer builds the two options from this signature, then every command gets a copy."""


def _remember_db(ctx: Context, _param, value):
    if value is not None:
        ctx.meta["ccpo.db"] = value  # shared by the whole context chain (completion reads it)
        settings(ctx).db = Path(value)
    return value


def _remember_quiet(ctx: Context, _param, value):
    if value:
        settings(ctx).quiet = True
    return value


@functools.cache
def _global_option_templates() -> tuple:
    template = typer.Typer(add_completion=False)
    template.command()(_global_options_template)
    options = typer.main.get_command(template).params
    for option in options:
        option.expose_value = False  # the command function never sees them: they set the Settings
        option.callback = _remember_db if option.name == "db" else _remember_quiet
        option.rich_help_panel = GLOBAL_PANEL
        setattr(option, GLOBAL_MARK, True)
    return tuple(options)


def _global_options() -> list:
    """A copy of the two options for one command (built by Typer once)."""
    return [copy.copy(option) for option in _global_option_templates()]


def _without_flag_placeholders(command) -> None:
    # Typer 0.29's rich help prints a type for flags too (`--json <bool>`); its plain help and
    # click do not. An empty metavar is shown as nothing.
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    help_option = command.get_help_option(Context(command))
    if help_option is not None:
        help_option.metavar = ""


class CcpoGroup(typer.core.TyperGroup):
    """The root group: every command below it also takes the global options, and no flag shows
    a type placeholder in help."""

    def __init__(self, **attrs) -> None:
        super().__init__(**attrs)
        _without_flag_placeholders(self)
        for command in self.commands.values():
            for leaf in getattr(command, "commands", {}).values() or [command]:
                leaf.params.extend(_global_options())
                _without_flag_placeholders(leaf)
            if getattr(command, "commands", None):
                _without_flag_placeholders(command)

    def get_params(self, ctx):
        # Typer adds --install-completion/--show-completion to the root after building it.
        params = super().get_params(ctx)
        for param in params:
            if getattr(param, "is_flag", False):
                param.metavar = ""
        return params


# The commands in the order `ccpo --help` lists them; each is the module ccpo_cli.cli.<name>. A
# sub-app is that module's `<name>_app`; a command is its function of the command's name, or the
# one COMMAND_FUNCTIONS names where the name is a Python word (or reads badly alone).
COMMANDS = (
    "arms", "estimate", "train", "eval", "games", "ingest", "runs",
    "compare", "export", "matrix", "card", "publish", "sync",
)  # fmt: skip
SUB_APPS = frozenset({"arms", "games", "runs", "sync"})
COMMAND_FUNCTIONS = {"estimate": "estimate_command", "eval": "eval_command"}


def _version(value: bool) -> None:
    if value:
        print(f"ccpo {__version__}")
        raise typer.Exit(0)


def root(
    ctx: typer.Context,
    db: Annotated[
        Path, typer.Option("--db", metavar="PATH", envvar="CCPO_DB", help="The runs database.")
    ] = DEFAULT_DB,
    quiet: Annotated[bool, typer.Option("--quiet", help="Only results and errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version.")
    ] = False,
) -> None:
    ctx.obj = Settings(db=db, quiet=quiet)


def build_app(names: tuple[str, ...] = COMMANDS) -> typer.Typer:
    """The `ccpo` app with these commands (all of them by default), each command module imported
    here and not before."""
    built = typer.Typer(
        name="ccpo",
        cls=CcpoGroup,
        help="Reproducible credit-assignment research for LLM agents (GRPO, GiGPO, CCPO on ALFWorld).",
        no_args_is_help=True,
        rich_markup_mode="rich",
        pretty_exceptions_show_locals=False,
        add_completion=True,
    )
    built.callback()(root)
    for name in names:
        module = importlib.import_module(f"ccpo_cli.cli.{name}")
        if name in SUB_APPS:
            built.add_typer(getattr(module, f"{name}_app"), name=name)
        else:
            built.command(name)(getattr(module, COMMAND_FUNCTIONS.get(name, name)))
    return built


def __getattr__(name: str):
    # `from ccpo_cli.cli.app import app` (tests, docs generation): the whole tree, built once.
    if name == "app":
        globals()["app"] = build_app()
        return globals()["app"]
    raise AttributeError(name)


def _invoked_command(arguments: list[str]) -> str | None:
    """The command this command line runs when nothing but the root's --db/--quiet stands before
    it, else None (help, --version, completion and mistakes need the whole tree)."""
    if "_CCPO_COMPLETE" in os.environ:
        return None
    index = 0
    while index < len(arguments):
        argument = arguments[index]
        if argument == "--db":
            index += 2
        elif argument.startswith("--db=") or argument == "--quiet":
            index += 1
        else:
            return argument if argument in COMMANDS else None
    return None


def main() -> None:
    from ccpo_cli.cli.startup import sqlite_utils_without_pandas

    sqlite_utils_without_pandas()
    # Building a command's options costs Typer an inspection of its function, so a command line
    # that names its command builds that command alone; what it parses and prints is the same.
    command = _invoked_command(sys.argv[1:])
    target = build_app((command,)) if command else build_app()
    # One name however it is started (`ccpo`, `python -m ccpo_cli`): usage lines and the shell
    # completion variable (_CCPO_COMPLETE) follow it.
    target(prog_name="ccpo")
