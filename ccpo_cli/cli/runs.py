"""`ccpo runs list|show|retract|resolve`: what runs.db holds, and correcting it without losing it.

One concern, kept in one file past 400 lines: the `ccpo runs` group's option declarations, each
command parsing its options and calling one library function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    JsonOption,
    OutputFormat,
    arm_option,
    emit,
    emit_json,
    info,
    say,
    settings,
    stdout_console,
)
from ccpo_cli.cli.options import Output, TablesOutput, options_command

runs_app = typer.Typer(
    help="Runs recorded in the database, and corrections to the record.", no_args_is_help=True
)

RunArgument = Annotated[
    str, typer.Argument(metavar="RUN", help="Run name.", autocompletion=completion.run_names)
]
ByOption = Annotated[
    str | None,
    typer.Option(
        "--by",
        metavar="WHO",
        help="Who makes the correction (default: the login name at this host, USER@HOST).",
        show_default=False,
    ),
]


def only_runs(flag: str, which: str, **settings: Any) -> Any:
    """A filter of `ccpo runs list`: "Only runs WHICH", said once."""
    return typer.Option(flag, help=f"Only runs {which}", **settings)


@dataclass(frozen=True)
class ListOptions:
    """What `ccpo runs list` was asked (None: not given)."""

    arm: Annotated[str | None, arm_option("Only runs of this arm.")] = None
    status: Annotated[
        str | None,
        only_runs(
            "--status", "with this status (running, finished, stopped, interrupted, failed)."
        ),
    ] = None
    benchmark: Annotated[
        str | None,
        only_runs("--benchmark", "of this benchmark.", autocompletion=completion.benchmark_names),
    ] = None
    model: Annotated[
        str | None,
        only_runs("--model", "of this base model (its id or the part after the last /)."),
    ] = None
    sort: Annotated[
        str | None,
        typer.Option(
            "--sort",
            metavar="COLUMN",
            help="Order by run, arm, seed, status, step, last, best, window, created or updated "
            "(success highest first; runs without the value last).",
        ),
    ] = None
    limit: Annotated[
        int | None,
        typer.Option("--limit", min=1, metavar="N", help="Only the first N runs (after --sort)."),
    ] = None
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            help="Every column in a terminal (last, best, conflicts, retractions, base model, "
            "benchmark, backend, times), in parts when wider than it. CSV, Markdown and JSON "
            "always have every column.",
        ),
    ] = False
    output: Output = Output()


@runs_app.command("list")
@options_command(ListOptions)
def list_command(ctx: typer.Context, options: ListOptions) -> None:
    """Every run with its arm, seed, status, steps and window held-out success; with --wide also
    last and best success, benchmark, backend and times.

    Example: ccpo runs list --arm grpo --format csv
    """
    # Imported here: the store pulls in sqlite-utils, which --help and completion never need.
    from ccpo_cli.report.run_tables import (
        narrow_runs_table,
        runs_table,
        sorted_runs,
    )
    from ccpo_cli.store import open_db
    from ccpo_cli.store.run_summaries import RunFilter, listed_runs

    o = options
    run_filter = RunFilter(arm=o.arm, status=o.status, benchmark=o.benchmark, model=o.model)
    runs = listed_runs(open_db(settings(ctx).db, must_exist=True), run_filter)
    runs = sorted_runs(runs, o.sort, o.limit) if o.sort else runs[: o.limit]
    chosen = o.output.chosen()
    narrow = chosen is OutputFormat.table and not o.wide
    emit(chosen, {"runs": runs}, lambda: [(narrow_runs_table if narrow else runs_table)(runs)])


@dataclass(frozen=True)
class ShowOptions:
    """What `ccpo runs show` was asked."""

    run: RunArgument
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            metavar="KEY",
            help="Print the series of this logged scalar instead (e.g. --metric actor/kl_loss "
            "--json: every number the run logged, at every step); repeat for several.",
            show_default=False,
        ),
    ] = None
    output: TablesOutput = TablesOutput()


@runs_app.command("show")
@options_command(ShowOptions)
def show_command(ctx: typer.Context, options: ShowOptions) -> None:
    """One run: its settings, evaluations, conflicts, checkpoints and publications; or, with
    --metric, the series of scalars it logged.

    Every evaluation is listed (retracted ones marked), every conflict with how it was settled,
    and every Hub publication the run asked for (pending, done, failed, skipped and why, with
    its attempts). A run with rows pulled by `ccpo sync` names the dataset commits they came
    from, and every field another machine recorded with another value.

    Example: ccpo runs show grpo-seed0 --format markdown
    """
    from ccpo_cli.store import open_db

    db = open_db(settings(ctx).db, must_exist=True)
    if options.metric:
        from ccpo_cli.report.run_tables import metric_series_tables
        from ccpo_cli.store.metrics import metric_series_document

        found = metric_series_document(db, options.run, options.metric)
        chosen = options.output.chosen()
        emit(chosen, found, lambda: metric_series_tables(found), table=options.output.table)
        return
    from ccpo_cli.report.run_detail_tables import run_detail_tables
    from ccpo_cli.store.run_detail import run_document

    document = run_document(db, options.run)
    chosen = options.output.chosen()
    emit(
        chosen,
        document,
        lambda: run_detail_tables(document, options.run),
        table=options.output.table,
    )
    if chosen is OutputFormat.table and document["publication_outbox"]:
        from ccpo_cli.publishing.status import outbox_table

        stdout_console().print(outbox_table(document["publication_outbox"]))


@dataclass(frozen=True)
class DiffOptions:
    """What `ccpo runs diff` was asked: the two runs."""

    first: RunArgument
    second: RunArgument
    output: Output = Output()


@runs_app.command("diff")
@options_command(DiffOptions)
def diff_command(ctx: typer.Context, options: DiffOptions) -> None:
    """Exactly what differs between two runs: identity, protocol facts and training config.

    Example: ccpo runs diff grpo-seed0 gigpo-seed0
    """
    from ccpo_cli.report.command_tables import differences_table, folded_differences
    from ccpo_cli.report.diffs import run_differences
    from ccpo_cli.store import get_run, open_db
    from ccpo_cli.store.facts import run_facts
    from ccpo_cli.store.identity import run_identity

    first, second = options.first, options.second
    db = open_db(settings(ctx).db, must_exist=True)
    entries = []
    for name in (first, second):
        row = get_run(db, name)
        entries.append(
            {
                "identity": run_identity(db, name).as_dict(),
                "facts": run_facts(db, row["id"])["values"],
                "config": row.get("config") if isinstance(row.get("config"), dict) else {},
            }
        )
    differences = run_differences(*entries)
    document = {
        "first": first,
        "second": second,
        "differences": [
            {"field": d.field, "first": d.first, "second": d.second} for d in differences
        ],
    }
    chosen = options.output.chosen()
    emit(
        chosen,
        document,
        lambda: (
            [f"runs {first} and {second}: nothing recorded differs"]
            if not differences
            else folded_differences(differences, first, second, "runs")
            if chosen is OutputFormat.table
            else [differences_table(differences, first, second, "runs")]
        ),
    )


@dataclass(frozen=True)
class RetractOptions:
    """What `ccpo runs retract` was asked (no --step: the whole run)."""

    run: RunArgument
    reason: Annotated[
        str,
        typer.Option("--reason", metavar="TEXT", help="Why the record is wrong (kept with it)."),
    ]
    step: Annotated[
        int | None,
        typer.Option(
            "--step",
            metavar="N",
            help="Retract the run's evaluations at this step only (default: the whole run).",
        ),
    ] = None
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="With --step: only the evaluations of this split (default: every split).",
        ),
    ] = None
    by: ByOption = None
    as_json: JsonOption = False


@runs_app.command("retract")
@options_command(RetractOptions)
def retract_command(ctx: typer.Context, options: RetractOptions) -> None:
    """Mark a run, or its evaluations at one step, as retracted (nothing is deleted).

    `ccpo compare`, cards and publishing leave it out and say so; `ccpo runs show` still lists
    it, marked. Retracting again changes nothing.

    Example: ccpo runs retract grpo-seed0 --step 40 --reason "evaluated on the training games"
    """
    from ccpo_cli.store import open_db
    from ccpo_cli.store.retractions import retract

    o = options
    db = open_db(settings(ctx).db, must_exist=True)
    result = retract(db, o.run, reason=o.reason, step=o.step, split=o.split, by=o.by)
    if o.as_json:
        emit_json({"retraction": result.as_dict()})
        return
    what = (
        f"run {o.run}"
        if o.step is None
        else f"{len(result.evaluation_ids)} evaluation(s) of run {o.run} at step {o.step}"
    )
    say(f"{what}: {'already retracted' if result.already else 'retracted'}")
    if not result.already:
        info(
            ctx,
            "left out of `ccpo compare`, cards and publishing from now on; `ccpo runs show` still lists it",
        )


def conflict_choice(flag: str, conflicting: str) -> Any:
    """An option of `ccpo runs resolve` that picks which of the step's conflicts to settle."""
    return typer.Option(flag, help=f"When several {conflicting} conflict at the step: which one.")


@dataclass(frozen=True)
class ResolveOptions:
    """What `ccpo runs resolve` was asked."""

    run: RunArgument
    step: Annotated[
        int,
        typer.Option("--step", metavar="N", help="The step whose conflicting results to settle."),
    ]
    keep: Annotated[
        str,
        typer.Option(
            "--keep",
            metavar="VALUE",
            help="The success rate (percent) of the result that stands, as `ccpo runs show` prints it (83.6 matches 83.59375).",
        ),
    ]
    reason: Annotated[
        str | None, typer.Option("--reason", metavar="TEXT", help="Why this result stands.")
    ] = None
    split: Annotated[str | None, conflict_choice("--split", "splits")] = None
    eval_seed: Annotated[int | None, conflict_choice("--eval-seed", "evaluation seeds")] = None
    by: ByOption = None
    as_json: JsonOption = False


@runs_app.command("resolve")
@options_command(ResolveOptions)
def resolve_command(ctx: typer.Context, options: ResolveOptions) -> None:
    """Settle a conflict (one step recorded with two results) by keeping one value.

    The settlement is recorded with who and when. Keeping the conflicting result records it as
    the evaluation and retracts the one that stood.

    Example: ccpo runs resolve grpo-seed0 --step 40 --keep 83.6 --reason "the rerun with the fixed panel"
    """
    from ccpo_cli.store import open_db
    from ccpo_cli.store.retractions import resolve

    o = options
    result = resolve(
        open_db(settings(ctx).db, must_exist=True),
        o.run,
        step=o.step,
        keep=o.keep,
        reason=o.reason,
        split=o.split,
        eval_seed=o.eval_seed,
        by=o.by,
    )
    if o.as_json:
        emit_json({"resolution": result.as_dict()})
        return
    if result.already:
        # Asked again: nothing was written, so nothing is claimed as done now.
        say(
            f"run {o.run} step {o.step}: already resolved keeping {result.kept_value:g} "
            f"(evaluation {result.kept_evaluation_id}, resolution {result.resolution_id}); nothing changed"
        )
        return
    say(
        f"run {o.run} step {o.step}: settled {len(result.settled_conflict_ids)} conflict(s), "
        f"keeping {result.kept_value:g} (evaluation {result.kept_evaluation_id})"
    )
    if result.superseded_evaluation_ids:
        superseded = ", ".join(map(str, result.superseded_evaluation_ids))
        info(ctx, f"retracted the result that stood (evaluation(s) {superseded})")
