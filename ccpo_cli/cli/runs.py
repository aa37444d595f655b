"""`ccpo runs list` / `ccpo runs show RUN`: what runs.db holds."""

from __future__ import annotations

from typing import Annotated

import typer

from ccpo_cli.cli.common import JsonOption, emit_json, handle_errors, settings, stdout_console
from ccpo_cli.report.tables import run_detail_tables, runs_table
from ccpo_cli.store import (
    get_run,
    list_runs,
    open_db,
    run_checkpoints,
    run_conflicts,
    run_evaluations,
    run_publications,
)
from ccpo_cli.store.liveness import annotate_runs

runs_app = typer.Typer(help="Runs recorded in the database.", no_args_is_help=True)


@runs_app.command("list")
@handle_errors
def list_command(
    ctx: typer.Context,
    as_json: JsonOption = False,
) -> None:
    """Every run with its arm, seed, status, last step and number of evaluations."""
    db = open_db(settings(ctx).db, must_exist=True)
    runs = annotate_runs(db, list_runs(db))  # a run whose trainer died shows as interrupted
    if as_json:
        emit_json({"runs": runs})
    else:
        stdout_console.print(runs_table(runs))


@runs_app.command("show")
@handle_errors
def show_command(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="Run name.")],
    as_json: JsonOption = False,
) -> None:
    """One run: its recorded settings, every evaluation, conflicts, checkpoints, publications and
    every Hub publication it asked for (pending, done, failed, skipped and why, with its attempts)."""
    from ccpo_cli.store.identity import run_identity
    from ccpo_cli.store.outbox import run_outbox

    db = open_db(settings(ctx).db, must_exist=True)
    document = {
        "run": annotate_runs(db, [get_run(db, run)])[0],
        "identity": run_identity(db, run).as_dict(),
        "evaluations": run_evaluations(db, run, split=None),
        "conflicts": run_conflicts(db, run),
        "checkpoints": run_checkpoints(db, run),
        "publications": run_publications(db, run),
        "publication_outbox": run_outbox(db, run),
    }
    if as_json:
        emit_json(document)
    else:
        for table in run_detail_tables(document):
            stdout_console.print(table)
        shown = document["run"]
        if shown.get("interrupted_because"):
            stdout_console.print(f"interrupted: {shown['interrupted_because']}", markup=False)
        if shown.get("failure"):
            stdout_console.print(f"failed: {shown['failure']['message']}", markup=False)
        if document["publication_outbox"]:
            from ccpo_cli.publishing.status import outbox_table

            stdout_console.print(outbox_table(document["publication_outbox"]))
