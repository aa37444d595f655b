"""`ccpo train --arm ARM`: train one arm, on the CPU (local backend) or a GPU cluster (verl).

The command parses the options into the backend's typed request (`LocalTrainRequest`,
`VerlTrainRequest`), calls that backend's one entry point and prints what it returns. Without
`--backend`, a machine with a CUDA GPU uses verl and any other machine uses local. Backend
defaults for --steps/--tasks/--group/--eval-every differ (the local backend is scaled for two
cores, verl follows the protocol file), so an option left out means "the backend's default".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from ccpo_cli.cli.common import (
    ArmOption,
    JsonOption,
    SeedsOption,
    SetOption,
    backend_option,
    check_seed,
    emit_json,
    info,
    parse_seeds,
    say,
    settings,
    stderr_console,
)
from ccpo_cli.cli.options import HubPublishing, option_values, options_command, scoped_option
from ccpo_cli.errors import UsageError
from ccpo_cli.report.window import DEFAULT_WINDOW
from ccpo_cli.vocabulary import BACKENDS, LOCAL, VERL, one_of

_PUSH_WINDOW_HELP = (
    "--push-to-hub: first step of the window the cards report "
    "(default: " + DEFAULT_WINDOW.describe("the run's", example=False) + ")."
)


def seed_list(seeds: str | None, seed: int | None) -> list[int]:
    """--seed N (default 0) or --seeds SEEDS (lists and ranges, ccpo_cli/seeds.py): never both."""
    if seeds is None:
        return [0 if seed is None else check_seed(seed)]
    if seed is not None:
        raise UsageError("give either --seed or --seeds, not both")
    return parse_seeds(seeds)


# The options only one backend reads, by Click parameter name (the option's flag in the message).
LOCAL_ONLY = ("eval_games", "eval_from", "workers", "time_budget", "dump_batches")
VERL_ONLY = ("model", "gpus", "nnodes", "ray_address", "host_profile", "save_every")
# What both backends' requests take of the options, under the same names.
EITHER_BACKEND = ("run", "resume", "dry_run", "steps", "tasks", "group", "eval_every", "max_steps")
# The options only --push-to-hub reads (name: flag), in the order a refusal names them.
PUSH_ONLY = {
    "push_wait": "--push-wait",
    "window_start": "--window-start",
    "private": "--private/--public",
    "token": "--token",
    "token_file": "--token-file",
    "timeout": "--timeout",
    "deadline": "--deadline",
    "endpoint": "--endpoint",
}


def _given(ctx: typer.Context, names: tuple[str, ...]) -> list[str]:
    """The options of `names` the user typed (or set through the environment): Click's parameter
    source tells a typed `--nnodes 1` from the default 1, which comparing values cannot."""
    given = []
    for param in ctx.command.params:
        source = ctx.get_parameter_source(param.name) if param.name in names else None
        # By name: Typer may carry its own copy of Click, whose enum is another class.
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            given.append(param.opts[0] if param.opts else str(param.name))
    return given


def _refuse_other_backend_options(ctx: typer.Context, backend: str) -> None:
    """An option of the other backend would be silently ignored: say so instead."""
    given = _given(ctx, LOCAL_ONLY if backend == VERL else VERL_ONLY)
    if given:
        other = LOCAL if backend == VERL else VERL
        raise UsageError(
            f"{', '.join(given)} only apply to --backend {other} (this run uses --backend {backend})"
        )


def _print_local(runs: list[dict[str, Any]]) -> None:
    for run in runs:
        evaluations = run.get("evaluations") or []
        last = evaluations[-1] if evaluations else None
        held_out = f", held-out {last['success']:.1f}% at step {last['step']}" if last else ""
        say(f"{run['run']}: {run['arm']} seed {run['seed']}, {run['last_step']} steps{held_out}")


def _dry_run_script(result) -> str:
    """The verl dry run as one shell document: the one launch's run.sh, or each seed's run.sh in
    a subshell of its own (each ends in `exec`), one after the other."""
    if len(result.scripts) == 1:
        return result.scripts[0]
    parts = [
        "#!/usr/bin/env bash",
        f"# ccpo train --dry-run: {len(result.scripts)} launches, one per seed, run in turn;",
        "# nothing was written or started.",
        "set -euo pipefail",
    ]
    for launch, script in zip(result.launches, result.scripts):
        body = "\n".join(line for line in script.splitlines() if not line.startswith("#!"))
        parts += [
            f"# ── run {launch.run} (seed {launch.request.seed}): {launch.run_dir}/run.sh",
            "(",
            body,
            ")",
        ]
    return "\n".join(parts) + "\n"


# The options only one backend reads.
local_option = scoped_option("local")
verl_option = scoped_option("verl")


@dataclass(frozen=True)
class TrainOptions:
    """What `ccpo train` was asked, as Typer parsed it (one field an option; None: not given)."""

    arm_name: ArmOption
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            metavar="RUN",
            help="Run name (default: derived from arm and seed; -seedN is appended with --seeds).",
        ),
    ] = None
    backend: Annotated[
        str | None,
        backend_option(
            f"{one_of(BACKENDS)}: local, the CPU policy on real ALFWorld; verl, verl-agent on GPUs. Default: verl with a CUDA GPU, else local."
        ),
    ] = None
    seed: Annotated[int | None, typer.Option("--seed", help="Training seed (default 0).")] = None
    seeds: SeedsOption = None
    steps: Annotated[
        int | None, typer.Option("--steps", help="Training steps (policy updates).")
    ] = None
    tasks: Annotated[int | None, typer.Option("--tasks", help="Games per step.")] = None
    group: Annotated[
        int | None, typer.Option("--group", help="Rollouts per game (group size).")
    ] = None
    eval_every: Annotated[
        int | None, typer.Option("--eval-every", help="Held-out evaluation every K steps.")
    ] = None
    max_steps: Annotated[
        int | None, typer.Option("--max-steps", help="Turn limit per episode.")
    ] = None
    set_flags: SetOption = None
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Continue a run: verl, a checkpoint folder (global_step_N or its parent); local, the run's own folder (it must exist).",
        ),
    ] = None
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Resolve the runs and print them as one document; write and start nothing.",
        ),
    ] = False
    as_json: JsonOption = False
    # local backend
    eval_games: Annotated[
        int | None,
        local_option("--eval-games", help="evaluate on a fixed subset of N held-out games."),
    ] = None
    eval_from: Annotated[
        int | None,
        local_option(
            "--eval-from",
            help="first evaluated step (default 0, the untrained policy); then every --eval-every steps and the last.",
        ),
    ] = None
    workers: Annotated[int | None, local_option("--workers", help="rollout worker processes.")] = (
        None
    )
    time_budget: Annotated[
        float | None,
        local_option("--time-budget", help="stop after this many minutes of training wall time."),
    ] = None
    dump_batches: Annotated[
        bool | None,
        local_option(
            "--dump-batches/--no-dump-batches", help="save each step's estimator batch as .npz."
        ),
    ] = None
    # verl backend
    model: Annotated[
        str | None, verl_option("--model", help="base model (Hugging Face id or path).")
    ] = None
    gpus: Annotated[int | None, verl_option("--gpus", help="GPUs per node.")] = None
    nnodes: Annotated[int, verl_option("--nnodes", help="nodes.")] = 1
    ray_address: Annotated[
        str | None,
        verl_option("--ray-address", help="join this Ray cluster instead of starting one."),
    ] = None
    verl_agent: Annotated[
        Path | None,
        verl_option(
            "--verl-agent",
            envvar="VERL_AGENT_HOME",
            help="the verl-agent checkout (env VERL_AGENT_HOME).",
        ),
    ] = None
    host_profile: Annotated[
        str,
        verl_option("--host-profile", help="host profile of the protocol (reference, lean)."),
    ] = "reference"
    save_every: Annotated[
        int | None,
        verl_option(
            "--save-every",
            help="save a checkpoint every N steps (default: at every evaluation); the newest and the best-evaluated are kept.",
        ),
    ] = None
    report_to: Annotated[
        str | None,
        typer.Option(
            "--report-to",
            metavar="TRACKERS",
            help="Write the curves while training, from the untrained evaluation at step 0 on, to tensorboard (RUN_DIR/tensorboard), trackio (project ccpo, in TRACKIO_DIR) and/or wandb (an offline run in RUN_DIR/wandb for `wandb sync`, unless WANDB_MODE says otherwise), comma-separated, as TRL's report_to; none (the default) writes only metrics.jsonl and runs.db.",
        ),
    ] = None
    # publishing while training
    push_to_hub: Annotated[
        str | None,
        typer.Option(
            "--push-to-hub",
            metavar="OWNER/NAME",
            help="Push to this Hub repository while training: an interim card at every evaluation, a new best checkpoint first (verified, tagged step-N), at the end the final weights and card (tagged final). Uploads run in a separate process and never block or fail training.",
        ),
    ] = None
    push_wait: Annotated[
        float | None,
        typer.Option(
            "--push-wait",
            help="--push-to-hub: at most this many seconds of waiting for pending uploads after the last step (default 120); what is left stays queued for `ccpo publish --follow`.",
        ),
    ] = None
    window_start: Annotated[int | None, typer.Option("--window-start", help=_PUSH_WINDOW_HELP)] = (
        None
    )
    hub: HubPublishing = HubPublishing()


@options_command(TrainOptions)
def train(ctx: typer.Context, options: TrainOptions) -> None:
    """Train one arm; evaluations land in the database as they happen.

    Several seeds train one after the other, with a header per run in the log.

    Example: ccpo train --arm grpo --seeds 0-2 --steps 40 --dry-run
    """
    from ccpo_cli.arms import load_arm, parse_set_options
    from ccpo_cli.backends.device import default_backend

    chosen = options.backend or default_backend()
    if chosen not in BACKENDS:
        raise UsageError(f"--backend {chosen}: use one of {', '.join(BACKENDS)}")
    seeds = tuple(seed_list(options.seeds, options.seed))
    arm = load_arm(options.arm_name, parse_set_options(options.set_flags) or None)
    _refuse_other_backend_options(ctx, chosen)
    observer = _tracker_observer(ctx, options, _hub_publisher(ctx, options, chosen, seeds))
    if chosen == LOCAL:
        _train_local(ctx, options, arm, seeds, observer)
    else:
        _train_verl(ctx, options, arm, seeds, observer)


def _hub_publisher(ctx: typer.Context, options: TrainOptions, backend: str, seeds: tuple[int, ...]):
    """The --push-to-hub publisher (None without it, or for a dry run); a Hub option given
    without --push-to-hub would be ignored, so it is refused."""
    if options.push_to_hub is None:
        given = {
            **option_values(options, ("push_wait", "window_start")),
            **dataclasses.asdict(options.hub),
        }
        stray = [flag for name, flag in PUSH_ONLY.items() if given[name] is not None]
        if stray:
            raise UsageError(f"{', '.join(stray)} only apply with --push-to-hub")
        return None
    if options.dry_run:
        return None
    if len(seeds) > 1:
        raise UsageError("--push-to-hub publishes one run: give one --seed (a repository per seed)")
    from ccpo_cli.publishing.background import publisher_for

    return publisher_for(
        settings(ctx).db,
        options.push_to_hub,
        backend=backend,
        **dataclasses.asdict(options.hub),
        end_wait_s=options.push_wait,
        window_start=options.window_start,
        verl_agent=options.verl_agent,
        log=lambda message: info(ctx, message),
    )


def _tracker_observer(ctx: typer.Context, options: TrainOptions, observer):
    """--report-to: the trackers' observer around `observer` (a dry run checks the names only)."""
    if options.report_to is None:
        return observer
    from ccpo_cli.report.trackers import ReportingObserver, parse_trackers

    trackers = parse_trackers(options.report_to)  # a --dry-run checks it too
    if trackers and not options.dry_run:
        return ReportingObserver(trackers, inner=observer, log=lambda message: info(ctx, message))
    return observer


def _train_local(
    ctx: typer.Context, options: TrainOptions, arm, seeds: tuple[int, ...], observer
) -> None:
    import contextlib

    from ccpo_cli.backends.local.request import LocalTrainRequest, train_local
    from ccpo_cli.cli.progress import TrainBar

    # Resuming without --seed/--seeds continues the run with the seed it recorded.
    resumed_seed = options.resume is not None and options.seed is None and options.seeds is None
    time_budget = options.time_budget
    # In a terminal, a bar instead of a line per step; in a log, the step lines (with time and run).
    console = stderr_console()
    with (
        TrainBar(console)
        if console.is_terminal and not settings(ctx).quiet and not options.dry_run
        else contextlib.nullcontext()
    ) as bar:
        local_runs = train_local(
            LocalTrainRequest(
                arm=arm,
                seeds=() if resumed_seed else seeds,
                db_path=settings(ctx).db,
                **option_values(options, EITHER_BACKEND),
                **option_values(options, ("eval_games", "eval_from", "workers", "dump_batches")),
                time_budget_s=None if time_budget is None else time_budget * 60.0,
                observer=observer,
                progress=None if bar is None else bar.update,
            ),
            lambda message: info(ctx, message),
        )
    if options.as_json or options.dry_run:  # a dry run is one JSON document, whatever the seeds
        emit_json({"dry_run": options.dry_run, "runs": local_runs})
    else:
        _print_local(local_runs)


def _train_verl(
    ctx: typer.Context, options: TrainOptions, arm, seeds: tuple[int, ...], observer
) -> None:
    from ccpo_cli.backends.verl.request import VerlTrainRequest, train_verl

    result = train_verl(
        VerlTrainRequest(
            arm=arm,
            seeds=seeds,
            db_path=settings(ctx).db,
            **option_values(options, EITHER_BACKEND + VERL_ONLY + ("verl_agent",)),
            observer=observer,
        ),
        lambda message: info(ctx, message),
    )
    if options.as_json:
        emit_json({"dry_run": options.dry_run, "runs": result.runs})
    elif options.dry_run:  # verbatim (no console markup or emoji codes): it is a shell script
        typer.echo(_dry_run_script(result), nl=False)
