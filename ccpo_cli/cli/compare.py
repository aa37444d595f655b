"""`ccpo compare`: converged windows, best points with their bias, arms side by side."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    OutputFormat,
    WindowStartOption,
    emit,
    info,
    settings,
)
from ccpo_cli.cli.options import TablesOutput, options_command
from ccpo_cli.errors import UsageError


@dataclass(frozen=True)
class CompareOptions:
    """What `ccpo compare` was asked (no RUN: every run)."""

    runs: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="RUN",
            help="Runs to compare (default: all).",
            autocompletion=completion.run_names,
        ),
    ] = None
    window_start: WindowStartOption = None
    output: TablesOutput = TablesOutput()
    plot: Annotated[
        Path | None,
        typer.Option(
            "--plot",
            help="Write learning curves to this file; its extension picks the format (.png, .pdf, .svg).",
        ),
    ] = None
    detect: Annotated[
        float | None,
        typer.Option(
            "--detect",
            help="A difference in points: report the seeds per arm needed to detect it (80% power).",
        ),
    ] = None
    include_failed: Annotated[
        bool,
        typer.Option(
            "--include-failed", help="Compare runs that failed too (left out by default)."
        ),
    ] = False


@options_command(CompareOptions)
def compare(ctx: typer.Context, options: CompareOptions) -> None:
    """Compare arms on their held-out window (not their best point).

    Runs are pooled only with runs of the same arm fingerprint, base model, backend, benchmark and
    protocol, and seeds are seeds. Retracted runs and evaluations (`ccpo runs retract`) are left
    out, and the output says so.

    Example: ccpo compare --format csv --table runs
    """
    # Imported here: scipy costs half a second that other commands should not pay.
    from ccpo_cli.report.compare import compare_runs
    from ccpo_cli.report.compare_tables import comparison_tables, latex_comparison_tables
    from ccpo_cli.store import open_db

    chosen = options.output.chosen()
    detect = options.detect
    if detect is not None and not detect > 0:
        raise UsageError(f"--detect must be a positive number of points, got {detect}")
    comparison = compare_runs(
        open_db(settings(ctx).db, must_exist=True),
        options.runs or None,
        options.window_start,
        detect=detect,
        include_failed=options.include_failed,
    )
    if options.plot is not None:
        from ccpo_cli.report.plot import plot_learning_curves

        plot_learning_curves(comparison, options.plot)
        info(ctx, f"wrote {options.plot}")
    build = latex_comparison_tables if chosen is OutputFormat.latex else comparison_tables
    emit(chosen, comparison.as_json(), lambda: build(comparison), table=options.output.table)
