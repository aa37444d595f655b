"""`ccpo compare`: converged windows, best points with their bias, arms side by side."""

from __future__ import annotations

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
from ccpo_cli.errors import UsageError


@handle_errors
def compare(
    ctx: typer.Context,
    runs: Annotated[list[str] | None, typer.Argument(help="Runs to compare (default: all).")] = None,
    window_start: WindowStartOption = None,
    as_json: JsonOption = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write learning curves to this PNG.")] = None,
    detect: Annotated[float | None, typer.Option("--detect", help="A difference in points: report the seeds per arm needed to detect it (80% power).")] = None,
    include_failed: Annotated[bool, typer.Option("--include-failed", help="Compare runs that failed too (left out by default).")] = False,
) -> None:
    """Compare arms on their held-out window (not their best point): runs are pooled only with runs of
    the same arm fingerprint, base model, backend, benchmark and protocol, and seeds are seeds."""
    # Imported here: scipy costs half a second that other commands should not pay.
    from ccpo_cli.report.compare import compare_runs
    from ccpo_cli.report.tables import comparison_renderables
    from ccpo_cli.store import open_db

    if detect is not None and not detect > 0:
        raise UsageError(f"--detect must be a positive number of points, got {detect}")
    document = compare_runs(open_db(settings(ctx).db, must_exist=True), runs or None, window_start, detect=detect,
                            include_failed=include_failed)
    if plot is not None:
        from ccpo_cli.report.plot import plot_learning_curves

        plot_learning_curves(document, plot)
        info(ctx, f"wrote {plot}")
    if as_json:
        emit_json(document)
    else:
        for renderable in comparison_renderables(document):
            stdout_console.print(renderable)
