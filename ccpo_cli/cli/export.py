"""`ccpo export --to tensorboard|trackio|wandb|csv RUN...`: a recorded run's curves for a tracker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    emit,
    settings,
)
from ccpo_cli.cli.options import Output, options_command
from ccpo_cli.errors import UsageError


@dataclass(frozen=True)
class ExportOptions:
    """What `ccpo export` was asked."""

    runs: Annotated[
        list[str],
        typer.Argument(
            metavar="RUN...",
            help="Runs to export (recorded or ingested).",
            autocompletion=completion.run_names,
        ),
    ]
    to: Annotated[
        str,
        typer.Option(
            "--to",
            metavar="TRACKER",
            help="tensorboard (event files), trackio (a project in TRACKIO_DIR), wandb (an "
            "offline run for `wandb sync`, unless WANDB_MODE says otherwise) or csv (one file per run).",
        ),
    ]
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Folder for tensorboard (one sub-folder per run), wandb (OUT/wandb/offline-run-*) "
            "and csv (RUN.csv).",
        ),
    ] = Path("ccpo-export")
    project: Annotated[str, typer.Option("--project", help="The trackio or wandb project.")] = (
        "ccpo"
    )
    output: Output = Output()


@options_command(ExportOptions)
def export(ctx: typer.Context, options: ExportOptions) -> None:
    """Write runs' curves to TensorBoard, trackio, wandb or CSV: the standing held-out
    evaluations and every scalar the run logged (loss, KL, entropy, ... at every step).

    Keys are named as verl-agent logs them (`val/success_rate` as a fraction, per-type rates,
    `episode/success_rate`; logged scalars under their own names). Exporting a run again replaces its earlier export, and only that:
    a file or folder ccpo did not write (no `.ccpo-output` marker), a symlink or a run folder
    is refused (exit 3) and left as it is, and so is `--out` naming a file or lying in a run
    folder. A folder that cannot be written exits 3 and a full disk exits 1, each in one line,
    with the earlier export kept and no partial file left.

    Example: ccpo export --to tensorboard rh-7b --out tb
    """
    # Imported here: the trackers and the store load only for this command.
    from ccpo_cli.report.tables import NAME, NUMBER, num, table_of, txt
    from ccpo_cli.report.tracker_export import export_runs
    from ccpo_cli.report.trackers import TRACKERS
    from ccpo_cli.store import open_db

    chosen = options.output.chosen()
    tracker = options.to.strip().lower()
    if tracker not in TRACKERS:
        raise UsageError(f"--to {options.to!r}: use one of {', '.join(TRACKERS)}")
    db = open_db(settings(ctx).db, must_exist=True)
    results = export_runs(db, options.runs, tracker, options.out, project=options.project)
    document = {
        "tracker": tracker,
        "runs": [{"run": r.run, "points": r.points, "written_to": r.written_to} for r in results],
    }
    columns = [
        ("run", NAME, lambda row: txt(row["run"])),
        ("points", NUMBER, lambda row: num(row["points"])),
        ("written to", NAME, lambda row: txt(row["written_to"])),
    ]
    emit(
        chosen,
        document,
        lambda: [
            table_of(document["runs"], columns, name="exported", title=f"exported to {tracker}")
        ],
    )
