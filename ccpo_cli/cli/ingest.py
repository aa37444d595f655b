"""`ccpo ingest`: record the evaluations in a training metrics file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    JsonOption,
    arm_option,
    backend_option,
    emit_json,
    info,
    run_option,
    settings,
    stderr_console,
)
from ccpo_cli.cli.options import option_values, options_command
from ccpo_cli.errors import UsageError

# Below this size an ingest finishes before a bar would be worth drawing.
PROGRESS_MIN_BYTES = 2 * 1024 * 1024
# store.readers.FORMATS and MAX_LINE_TEXT, written out so that --help imports no reader;
# tests/test_cli_startup.py checks they agree.
FORMATS_HELP = "auto | ccpo | verl-file | console | csv | tensorboard | wandb"
LINE_LIMIT_HELP = "16 MiB"


def _arm(name: str | None):
    """The named arm as ccpo's arm file resolves it (the log's own stated flags are facts)."""
    if name is None:
        return None
    from ccpo_cli.arms import load_arm

    return load_arm(name)


def _formats(
    fmt: str | None, input_format: str | None, as_json: bool, readers: tuple[str, ...]
) -> tuple[str, bool]:
    """(the reader, whether to print JSON): --format is the output format as everywhere else
    (json, table); a reader name given to --format (the v1 contract) is read as --input-format."""
    output = None
    if fmt is not None and fmt in ("json", "table"):
        output = fmt
    elif fmt is not None:
        if fmt not in readers:
            raise UsageError(
                f"--format {fmt}: use one of json, table (the output), or give the file's format "
                f"with --input-format {' | '.join(readers)}"
            )
        if input_format is not None and input_format != fmt:
            raise UsageError(
                f"--format {fmt} and --input-format {input_format}: give the file's format once"
            )
        input_format = fmt
    reader = input_format or "auto"
    if reader not in readers:
        raise UsageError(f"--input-format {reader}: use one of {', '.join(readers)}")
    if as_json and output == "table":
        raise UsageError(
            "--json is --format json: give one of them, not --json with --format table"
        )
    return reader, as_json or output == "json"


@dataclass(frozen=True)
class IngestOptions:
    """What `ccpo ingest` was asked, as Typer parsed it (None: not given)."""

    file: Annotated[
        Path,
        typer.Argument(
            help=(
                "Metrics file or run folder: ccpo JSONL, verl file-logger JSONL, a verl console log, a per-step CSV "
                "export, TensorBoard event files, or a wandb run folder."
            )
        ),
    ]
    run: Annotated[str, run_option("Run name to record under (created if new).")]
    arm: Annotated[
        str | None,
        arm_option("Arm the run trained; its fingerprint must match the run's."),
    ] = None
    seed: Annotated[int | None, typer.Option("--seed", help="Training seed of the run.")] = None
    base_model: Annotated[str | None, typer.Option("--base-model", help="Base model id.")] = None
    total_steps: Annotated[
        int | None, typer.Option("--total-steps", help="Planned training steps.")
    ] = None
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            help=(
                f"json (the same as --json) or table (the summary line); the v1 reader names ({FORMATS_HELP}) are "
                "still read as --input-format."
            ),
            show_default=False,
        ),
    ] = None
    input_format: Annotated[
        str | None,
        typer.Option(
            "--input-format",
            help=(f"The file's format: {FORMATS_HELP} (default auto: decided by content)."),
            show_default=False,
        ),
    ] = None
    backend: Annotated[
        str | None,
        backend_option(
            "The backend that trained the run (local or verl); not recorded when not given."
        ),
    ] = None
    hardware: Annotated[
        str | None,
        typer.Option(
            "--hardware",
            help=(
                "The hardware it trained on, as you would write it (e.g. 8xH100); recorded as a fact."
            ),
        ),
    ] = None
    benchmark: Annotated[
        str | None,
        typer.Option(
            "--benchmark",
            autocompletion=completion.benchmark_names,
            help=(
                "The run's benchmark (alfworld, webshop, ...; docs/benchmarks.md). Without it, the one the metric names "
                "or the printed config identify; a file that contradicts it is refused."
            ),
        ),
    ] = None
    split: Annotated[
        str | None,
        typer.Option(
            "--split",
            help="Dataset split the evaluations ran on (default: the split the log names, else not recorded).",
        ),
    ] = None
    temperature: Annotated[
        float | None, typer.Option("--temperature", help="Sampling temperature of the evaluations.")
    ] = None
    episodes: Annotated[int | None, typer.Option("--episodes", help="Episodes per evaluation.")] = (
        None
    )
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="verl's resolved Hydra config YAML, or the launch command with key=value overrides.",
        ),
    ] = None
    ended: Annotated[
        bool,
        typer.Option(
            "--ended",
            help="The run has ended: short of its total steps it is recorded as stopped early.",
        ),
    ] = False
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help=(
                f"Refuse the file at its first unreadable line. Without it such lines (cut, garbled, binary, over "
                f"{LINE_LIMIT_HELP}) are skipped and reported, and the file is refused only when no record reads."
            ),
        ),
    ] = False
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help=(
                "Metric of a single-scalar TensorBoard CSV download (Wall time,Step,Value), e.g. val/success_rate; "
                "read from its file name when it has one. FROM=TO reads a metric the log names FROM as TO, e.g. "
                "val/val/success_rate=val/success_rate for a fork that renamed it; give it once per metric."
            ),
        ),
    ] = None
    source_run: Annotated[
        str | None,
        typer.Option(
            "--source-run",
            help=(
                "The run to read from a CSV export holding several (wandb panel columns '<run> - <metric>', "
                "or a long step,tag,value table with a dir_name/run column)."
            ),
        ),
    ] = None
    as_json: JsonOption = False

    def metric_names(self) -> tuple[str | None, list]:
        """--metric: (the one scalar a single-scalar CSV holds, or None; the FROM=TO renames)."""
        from ccpo_cli.store.readers.metric_names import MetricRename

        renames = [MetricRename.parse(item) for item in self.metric or [] if "=" in item]
        scalars = [item for item in self.metric or [] if "=" not in item]
        if len(scalars) > 1:
            raise UsageError(
                f"--metric {scalars[0]} and --metric {scalars[1]}: a single-scalar CSV holds one "
                "metric; write FROM=TO to read a metric under another name"
            )
        sources = [rename.source for rename in renames]
        if len(set(sources)) < len(sources):
            raise UsageError("--metric: each FROM=TO names its FROM once")
        return (scalars[0] if scalars else None), renames


@options_command(IngestOptions)
def ingest(ctx: typer.Context, options: IngestOptions) -> None:
    """Record the held-out evaluations found in a training metrics file (idempotent).

    Example: ccpo ingest logs/train.log --run grpo-seed0 --arm grpo --seed 0 --total-steps 150
    """
    from ccpo_cli.store import open_db
    from ccpo_cli.store.ingest import FORMATS, require_metrics_file

    reader, as_json = _formats(options.fmt, options.input_format, options.as_json, FORMATS)
    if options.backend is not None and options.backend not in completion.BACKENDS:
        raise UsageError(
            f"--backend {options.backend}: use one of {', '.join(completion.BACKENDS)}"
        )
    recorded = _recorded_as(options, reader)
    # Before open_db: a bad path must not leave an empty runs.db behind.
    require_metrics_file(options.file)
    report = _ingest_with_progress(ctx, open_db(settings(ctx).db), options, recorded)
    console = stderr_console()
    for warning in report.warnings:
        console.print(f"warning: {warning}", markup=False)
    if as_json:
        emit_json(report.as_dict())
        return
    info(
        ctx,
        f"{options.file}: {report.format}, {report.steps} steps, {report.evaluations_found} "
        f"evaluations: {report.new} new, {report.duplicates} already recorded, "
        f"{len(report.conflicts)} conflicting, {report.skipped} lines skipped; "
        f"{report.metrics.new} new scalars in metrics ({report.metrics.duplicates} already recorded) "
        f"(run {options.run}, benchmark {report.benchmark or 'not recorded'}, "
        f"last step {report.last_step})",
    )


def _recorded_as(options: IngestOptions, reader: str) -> dict:
    """What the run is recorded with besides the file: the checked options and the protocol
    facts (`ingest_file`'s keyword arguments)."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.names import check_run_name
    from ccpo_cli.store.facts import protocol_facts
    from ccpo_cli.store.identity import ExternalArm

    metric, renames = options.metric_names()
    arm = _arm(options.arm)
    check_run_name(options.run)  # before open_db, like the file check
    if options.benchmark is not None:
        load_benchmark(options.benchmark)  # an unknown name exits 3, naming the known ones
    config_left_out: list[int] = []
    flat_config, facts = protocol_facts(
        options.config,
        left_out=config_left_out,
        **option_values(options, ("split", "temperature", "episodes", "seed", "total_steps")),
    )
    if options.hardware is not None:
        if not options.hardware.strip() or len(options.hardware) > 200:
            raise UsageError("--hardware: a short description such as 8xH100")
        facts["hardware"] = options.hardware.strip()
    # --arm is the user's word for which arm the log trained, not an arm ccpo resolved: an
    # ExternalArm, so its name and fingerprint are recorded, and the flags the log itself printed
    # (facts) stand beside them (store/identity.py).
    return dict(
        fmt=reader,
        benchmark=options.benchmark,
        backend=options.backend,
        arm=None if arm is None else ExternalArm(arm.name, arm.fingerprint),
        seed=facts.get("seed"),
        base_model=options.base_model,
        total_steps=facts.pop("total_steps", None),
        facts=facts,
        config=flat_config,
        config_file_left_out=config_left_out,
        ended=options.ended,
        strict=options.strict,
        metric=metric,
        source_run=options.source_run,
        rename=renames,
    )


def _ingest_with_progress(ctx: typer.Context, db, options: IngestOptions, recorded: dict):
    """`ingest_file`, under a bar in a terminal when the file is large enough to want one."""
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    from ccpo_cli.store.ingest import ingest_file

    file = options.file
    size = file.stat().st_size if file.is_file() else 0
    console = stderr_console()
    if not (console.is_terminal and not settings(ctx).quiet and size >= PROGRESS_MIN_BYTES):
        return ingest_file(db, file, options.run, **recorded)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        reading = progress.add_task(f"read {file.name}", total=size)
        recording = progress.add_task("record evaluations", total=None)
        return ingest_file(
            db,
            file,
            options.run,
            progress=lambda n: progress.advance(reading, n),
            write_progress=lambda done, total: progress.update(
                recording, completed=done, total=total
            ),
            **recorded,
        )
