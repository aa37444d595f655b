"""Shared plumbing for the thin Typer commands: settings, errors, output formats, consoles, and
the option types several commands take (declared once here, so `--json` is one flag everywhere).

Start-up matters (`ccpo --help` and a TAB of completion build every command): this module and
the command modules import only typer, rich's console and the standard library at the top; each
command imports the library it calls inside its function.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ccpo_cli.cli import completion
from ccpo_cli.errors import CcpoError, InvalidInput, UsageError
from ccpo_cli.report.window import DEFAULT_WINDOW
from ccpo_cli.seeds import SYNTAX as SEED_SYNTAX
from ccpo_cli.seeds import check_seed, parse_seeds  # noqa: F401  (re-exported for the commands: one seed syntax)

if TYPE_CHECKING:
    from rich.console import Console

SCHEMA_VERSION = 1
DEFAULT_DB = Path("runs.db")


class OutputFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    markdown = "markdown"
    latex = "latex"


# Option types shared by several commands: one name, one flag and one help text each.
JsonOption = Annotated[
    bool, typer.Option("--json", help="One JSON document on stdout (the same as --format json).")
]
FormatOption = Annotated[
    OutputFormat | None,
    typer.Option(
        "--format",
        help="table (for people, fitted to the terminal), json (one document), csv, markdown or latex "
        "(booktabs, for papers and pull requests). Default: table.",
        show_default=False,
    ),
]
TableOption = Annotated[
    str | None,
    typer.Option(
        "--table",
        metavar="NAME",
        help="--format csv: which of the tables to write (default: the first); "
        "markdown and table show them all.",
        show_default=False,
    ),
]
SetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--set", metavar="KEY=VALUE", help="Override an arm flag (repeatable), e.g. --set edge_w=0."
    ),
]
WindowStartOption = Annotated[
    int | None,
    typer.Option(
        "--window-start",
        help=f"First step of the window (default: the start a matrix run recorded, else {DEFAULT_WINDOW.describe()}).",
    ),
]
SeedsOption = Annotated[
    str | None,
    typer.Option(
        "--seeds", metavar="SEEDS", help=f"Seeds, one run or evaluation each: {SEED_SYNTAX}."
    ),
]


def run_option(help: str, flag: str = "--run") -> Any:  # noqa: A002
    """An option that names a recorded run (`--run RUN`, `publish --follow RUN`), TAB-completed
    from runs.db; each command says what it does with the run."""
    return typer.Option(flag, metavar="RUN", help=help, autocompletion=completion.run_names)


def arm_option(help: str) -> Any:  # noqa: A002
    """`--arm ARM`, TAB-completed from the arm files; each command says what the arm is to it."""
    return typer.Option("--arm", metavar="ARM", help=help, autocompletion=completion.arm_names)


ArmOption = Annotated[str, arm_option("Arm name (see `ccpo arms list`).")]


def backend_option(help: str) -> Any:  # noqa: A002
    """`--backend` of `ccpo train` and `ccpo ingest`: one flag with one TAB completion; each
    command says what the backend means to it."""
    return typer.Option("--backend", autocompletion=completion.backend_names, help=help)


RunNameOption = Annotated[str, run_option("Run name.")]

# How a command reaches the Hub (`ccpo publish`, `ccpo card`, `ccpo sync`, `ccpo train --push-to-hub`),
# declared once. `--repo-id` is the v1 name of `--repo` in `ccpo card`, kept as an alias everywhere.
HubRepoOption = Annotated[
    str, typer.Option("--repo", "--repo-id", metavar="OWNER/NAME", help="Hub repository id.")
]
OptionalHubRepoOption = Annotated[
    str | None, typer.Option("--repo", "--repo-id", metavar="OWNER/NAME", help="Hub repository id.")
]
HubTokenOption = Annotated[
    str | None,
    typer.Option(
        "--token",
        help="Hub token; '-' reads it from stdin. A token given here is visible to other users of this machine "
        "(ps) while ccpo runs: prefer '-', --token-file, HF_TOKEN or the saved login. Never printed.",
        show_default=False,
    ),
]
HubTokenFileOption = Annotated[
    Path | None, typer.Option("--token-file", help="File holding the Hub token (one line).")
]
HubTimeoutOption = Annotated[
    str | None,
    typer.Option(
        "--timeout",
        help="Hub timeouts in seconds, READ or CONNECT,READ: READ bounds one read of a transfer, and of a "
        "metadata answer when below 20 (default: CCPO_HUB_TIMEOUT, else 10,300).",
    ),
]
HubDeadlineOption = Annotated[
    float | None,
    typer.Option(
        "--deadline",
        help="Deadline of the whole command's Hub work in seconds (of each upload for --push-to-hub, of each "
        "round for --follow), retries and waits included, however slowly answers come; a transfer adds its size at 1 MiB/s "
        "(default: CCPO_HUB_DEADLINE, else 900; one metadata call at most 60).",
    ),
]
HubEndpointOption = Annotated[
    str | None,
    typer.Option("--endpoint", help="Hub URL (default: HF_ENDPOINT, then the public Hub)."),
]
# `--no-private` is the hf CLI's word for `--public`; both stay. (Typer reads " /--no-private",
# with its leading space, as a second "off" name of the flag.)
HubPrivateOption = Annotated[
    bool | None,
    typer.Option(
        "--private/--public",
        " /--no-private",
        help="Visibility of a new repository (default: private, final cards "
        "included); an existing repository keeps its own, and ccpo says when it differs. --no-private is --public.",
    ),
]
HubRevisionOption = Annotated[
    str, typer.Option("--revision", help="Branch to commit to (created if missing).")
]


def _verl_agent_home_option(checkpoint_flag: str) -> Any:
    """`--verl-agent-home`: the verl-agent checkout whose merger merges the global_step_N folder
    `checkpoint_flag` names (`ccpo eval --model`, `ccpo publish --checkpoint`)."""
    return Annotated[
        Path | None,
        typer.Option(
            "--verl-agent-home",
            "--verl-agent",
            help=f"verl-agent checkout whose model merger merges a global_step_N {checkpoint_flag} "
            "(default: VERL_AGENT_HOME).",
        ),
    ]


# How `ccpo eval --model` and `ccpo publish --checkpoint` merge a verl checkpoint, and where the
# merged model goes.
ModelMergerOption = _verl_agent_home_option("--model")
CheckpointMergerOption = _verl_agent_home_option("--checkpoint")
MergedDirOption = Annotated[
    Path | None,
    typer.Option(
        "--merged-dir",
        help="Where a merged verl checkpoint goes (default: global_step_N/ccpo_merged_hf).",
    ),
]
LicenseOption = Annotated[
    str | None,
    typer.Option(
        "--license", help="License id, when neither the run nor its base model records one."
    ),
]


@dataclass
class Settings:
    db: Path
    quiet: bool = False


def settings(ctx: typer.Context) -> Settings:
    """The global options (given before or after the command); a default when a command runs
    without the app callback."""
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = Settings(db=Path(os.environ.get("CCPO_DB") or DEFAULT_DB))
    return root.obj


# runs.db stores whole numbers as SQLite INTEGER (64-bit): a step, a count or a seed past it would
# fail deep inside a write, so every whole-number option is held to it before a command starts.
WHOLE_NUMBER_LIMIT = 2**63 - 1


def _check_whole_numbers(kwargs: dict[str, Any], ctx: typer.Context | None) -> None:
    for name, value in kwargs.items():
        if type(value) is int and not -WHOLE_NUMBER_LIMIT - 1 <= value <= WHOLE_NUMBER_LIMIT:
            raise UsageError(
                f"{_option_name(ctx, name)} {value}: a whole number of at most {WHOLE_NUMBER_LIMIT} "
                "in size (what runs.db holds)"
            )


def _option_name(ctx: typer.Context | None, name: str) -> str:
    for param in getattr(getattr(ctx, "command", None), "params", []):
        if param.name == name and getattr(param, "opts", None):
            return max(param.opts, key=len)
    return "--" + name.replace("_", "-")


def handle_errors(command: Callable) -> Callable:
    """Turn library errors into one stderr line and the contract's exit code.

    The one place errors are formatted: every command is wrapped in it, and commands raise
    `CcpoError` subclasses (never `typer.Exit` with a message of their own)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any):
        try:
            _check_whole_numbers(
                kwargs,
                next(
                    (arg for arg in (*args, *kwargs.values()) if isinstance(arg, typer.Context)),
                    None,
                ),
            )
            return command(*args, **kwargs)
        except CcpoError as error:
            # A name or key from a file may hold control characters: escaped before the terminal.
            from ccpo_cli.terminal_text import escape_control

            stderr_console().print(f"error: {escape_control(error)}", markup=False)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            stderr_console().print("interrupted", markup=False)
            raise typer.Exit(130) from None
        except sqlite3.DatabaseError as error:
            # A damaged page of runs.db shows only when a query reads it: one line, not a traceback.
            from ccpo_cli.store.db import is_damaged_database, unusable_database

            if not is_damaged_database(error):
                raise
            # Typer's context class is its own vendored click's: found by what it does.
            ctx = next((a for a in (*args, *kwargs.values()) if hasattr(a, "find_root")), None)
            where = str(settings(ctx).db) if ctx is not None else "runs.db"
            stderr_console().print(f"error: {unusable_database(where, error)}", markup=False)
            raise typer.Exit(InvalidInput.exit_code) from None

    return wrapper


def terminal_width(stream: Any) -> int | None:
    """None for a terminal (rich asks it); else COLUMNS, or 160: piped into a file or a log, a
    table gets room instead of being squeezed into 80 columns."""
    if stream.isatty():
        return None
    try:
        return max(20, int(os.environ.get("COLUMNS") or 160))
    except ValueError:
        return 160


def _console(stderr: bool) -> Console:
    # Made at print time, for whatever sys.stdout/sys.stderr is then (test runners swap them) and
    # the width COLUMNS says then. rich is imported here: a --json answer never needs it.
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=terminal_width(stream))


def stdout_console() -> Console:
    return _console(stderr=False)


def stderr_console() -> Console:
    """Log lines' console: the bar's while a progress bar is on screen (the line then prints above
    the bar, never on its line), else one for whatever sys.stderr is now."""
    from ccpo_cli.cli.progress import bar_console

    return bar_console() or _console(stderr=True)


def say(message: str) -> None:
    """A result line on stdout, verbatim (no console markup, no raw terminal control)."""
    from ccpo_cli.terminal_text import escape_control_lines

    stdout_console().print(escape_control_lines(message), markup=False)


def output_format(fmt: OutputFormat | None, as_json: bool) -> OutputFormat:
    """--format, with --json as its alias for json; both given and different is a usage error."""
    if as_json and fmt not in (None, OutputFormat.json):
        raise UsageError(
            f"--json is --format json: give one of them, not --json with --format {fmt.value}"
        )
    return OutputFormat.json if as_json else (fmt or OutputFormat.table)


def _json_safe(value: Any) -> Any:
    # JSON has no NaN/Infinity; a missing statistic is null.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return _json_safe(value.tolist())
    return value


def emit_json(document: dict) -> None:
    """Print exactly one JSON document on stdout, with the schema version first."""
    body = {"schema_version": SCHEMA_VERSION}
    body.update(document)
    print(json.dumps(_json_safe(body), indent=2, allow_nan=False))


def emit(
    fmt: OutputFormat,
    document: dict,
    tables: Callable[[], Iterable[Any]],
    *,
    table: str | None = None,
) -> None:
    """Print a command's result in the chosen format: the JSON document, or its tables (built
    by `tables()`, report/tables.py) as a fitted terminal table, CSV or Markdown. Lines that are
    not tables (notes, verdicts) print with the terminal tables and the Markdown."""
    if fmt is OutputFormat.json:
        if table is not None:
            raise UsageError(
                "--table picks a table of --format csv; --format json prints the whole document"
            )
        emit_json(document)
        return
    from ccpo_cli.report import tables as formats

    items = list(tables())
    if table is not None and fmt is not OutputFormat.csv:
        raise UsageError(
            f"--table picks a table of --format csv; --format {fmt.value} shows every table"
        )
    if fmt is OutputFormat.csv:
        sys.stdout.write(formats.csv_text(formats.pick_table(items, table)))
    elif fmt is OutputFormat.markdown:
        sys.stdout.write(formats.markdown_text(items))
    elif fmt is OutputFormat.latex:
        sys.stdout.write(formats.latex_text(items))
    else:
        console = stdout_console()
        for renderable in formats.terminal_renderables(items, console.width):
            console.print(
                renderable, soft_wrap=False
            )  # notes wrap at words to the width, as the tables do


def info(ctx: typer.Context, message: str) -> None:
    """A log line on stderr, unless --quiet."""
    if not settings(ctx).quiet:
        from ccpo_cli.terminal_text import escape_control_lines

        stderr_console().print(escape_control_lines(message), markup=False)
