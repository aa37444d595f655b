"""Shared plumbing for the thin Typer commands: settings, errors, JSON output, consoles, and the
option types several commands take (declared once here, so `--json` is one flag everywhere)."""

from __future__ import annotations

import functools
import json
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from ccpo_cli.errors import CcpoError, InvalidInput

SCHEMA_VERSION = 1

# Option types shared by several commands: one name, one flag and one help text each.
JsonOption = Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")]
SetOption = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY=VALUE", help="Override an arm flag (repeatable), e.g. --set edge_w=0."),
]
WindowStartOption = Annotated[int | None, typer.Option(
    "--window-start", help="First step of the window (default: 7/15 of each run's recorded total steps, the seed card's 70 of 150).")]
SeedsOption = Annotated[
    str | None, typer.Option("--seeds", metavar="S1,S2", help="Seeds, comma separated (e.g. 0,1,2): one run or evaluation each.")
]
# How a command reaches the Hub (`ccpo sync`; the same flags and words as `ccpo publish`).
HubRepoOption = Annotated[str, typer.Option("--repo", help="Hub repository id (owner/name).")]
HubTokenOption = Annotated[str | None, typer.Option("--token", help="Hub token; '-' reads it from stdin. A token given here is visible to other users of this machine (ps) while ccpo runs: prefer '-', --token-file, HF_TOKEN or the saved login. Never printed.", show_default=False)]
HubTokenFileOption = Annotated[Path | None, typer.Option("--token-file", help="File holding the Hub token (one line).")]
HubTimeoutOption = Annotated[str | None, typer.Option("--timeout", help="Hub timeouts in seconds, READ or CONNECT,READ (default: CCPO_HUB_TIMEOUT, else 10,300).")]
HubEndpointOption = Annotated[str | None, typer.Option("--endpoint", help="Hub URL (default: HF_ENDPOINT, then the public Hub).")]


# The Hub options of `ccpo publish` and `ccpo train --push-to-hub`, declared once.
HubTokenOption = Annotated[str | None, typer.Option(
    "--token", help="Hub token; '-' reads it from stdin. A token given here is visible to other users of this machine "
    "(ps) while ccpo runs: prefer '-', --token-file, HF_TOKEN or the saved login. Never printed.", show_default=False)]
HubTokenFileOption = Annotated[Path | None, typer.Option("--token-file", help="File holding the Hub token (one line).")]
HubTimeoutOption = Annotated[str | None, typer.Option(
    "--timeout", help="Hub timeouts in seconds, READ or CONNECT,READ: READ bounds one read of a transfer, and of a "
    "metadata answer when below 20 (default: CCPO_HUB_TIMEOUT, else 10,300).")]
HubDeadlineOption = Annotated[float | None, typer.Option(
    "--deadline", help="Overall deadline of one Hub call in seconds, however slowly its answer comes; a transfer adds "
    "its size at 1 MiB/s (default: CCPO_HUB_DEADLINE, else 60).")]
HubEndpointOption = Annotated[str | None, typer.Option(
    "--endpoint", help="Hub URL (default: HF_ENDPOINT, then the public Hub).")]
HubPrivateOption = Annotated[bool | None, typer.Option(
    "--private/--public", help="Visibility of a new repository (default: private, final cards included); an "
    "existing repository keeps its own, and ccpo says when it differs.")]
HubRevisionOption = Annotated[str, typer.Option("--revision", help="Branch to commit to (created if missing).")]
LicenseOption = Annotated[str | None, typer.Option(
    "--license", help="License id, when neither the run nor its base model records one.")]


def parse_seeds(text: str) -> list[int]:
    """'0,1,2' -> [0, 1, 2]. A malformed list is invalid input (exit 3): empty, not integers,
    negative, or a seed twice (each seed is one run or one evaluation)."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InvalidInput(f"--seeds: expected integers separated by commas, got {text!r}") from None
    if not seeds:
        raise InvalidInput("--seeds: at least one seed is needed")
    if len(set(seeds)) != len(seeds):
        raise InvalidInput(f"--seeds: each seed at most once, got {text!r}")
    if any(seed < 0 for seed in seeds):
        raise InvalidInput(f"--seeds: seeds are non-negative, got {text!r}")
    return seeds


def _console(stderr: bool) -> Console:
    # Piped into a file or a log, rich would squeeze tables into 80 columns and elide numbers;
    # give them room instead (a terminal keeps its own width). No `file=`: the console must
    # write to whatever sys.stdout/sys.stderr is at print time (test runners swap them).
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else int(os.environ.get("COLUMNS", 160))
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


stdout_console = _console(stderr=False)
stderr_console = _console(stderr=True)


@dataclass
class Settings:
    db: Path
    quiet: bool = False


def settings(ctx: typer.Context) -> Settings:
    """The global options; a default when a command runs without the app callback."""
    obj = ctx.find_root().obj
    if isinstance(obj, Settings):
        return obj
    return Settings(db=Path(os.environ.get("CCPO_DB", "runs.db")))


def handle_errors(command: Callable) -> Callable:
    """Turn library errors into one stderr line and the contract's exit code.

    The one place errors are formatted: every command is wrapped in it, and commands raise
    `CcpoError` subclasses (never `typer.Exit` with a message of their own)."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any):
        try:
            return command(*args, **kwargs)
        except CcpoError as error:
            stderr_console.print(f"error: {error}", markup=False)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            stderr_console.print("interrupted", markup=False)
            raise typer.Exit(130) from None

    return wrapper


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


def info(ctx: typer.Context, message: str) -> None:
    """A log line on stderr, unless --quiet."""
    if not settings(ctx).quiet:
        stderr_console.print(message, markup=False)
