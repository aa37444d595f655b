"""`ccpo matrix`: arms × paired seeds on the CPU within a time budget, ending with `ccpo compare`.

One concern, kept in one file past 400 lines: the one command's options (every knob of a design
can be overridden, each with the help text the contract shows) and the named steps that read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    SEED_SYNTAX,
    emit,
    info,
    parse_seeds,
    settings,
)
from ccpo_cli.cli.options import TablesOutput, option_values, options_command
from ccpo_cli.experiments.matrix import DEFAULT_DESIGN, list_designs
from ccpo_cli.report.window import MatrixWindow

DESIGN_HELP = (
    "The matrix design (configs/designs/NAME.yaml): warm-up, run length, evaluations and window, "
    "games and rollouts per step, turn limits, panel and rooms; each option below of the same name "
    "overrides one knob, and --dry-run prints every knob. Designs: "
    + ", ".join(list_designs())
    + "."
)


def design_knob(flag: str, what: str) -> typer.models.OptionInfo:
    """An option that overrides one knob of the --design (None: the design's value)."""
    return typer.Option(flag, help=f"{what} (default: the design's).")


def warm_start_lines(effect: dict | None) -> list[str]:
    """`warm start: grpo trained 4 seeds, gigpo 3` and per pair the home advantage."""
    if not effect:
        return []
    counts = ", ".join(f"{arm} {n}" for arm, n in effect["warmups_by_arm"].items())
    lines = [f"warm-ups trained by: {counts} seed(s)"]
    for pair in effect["pairs"]:
        if pair.get("home_advantage") is None:
            lines.append(
                f"{pair['arm_a']} - {pair['arm_b']}: warm-start effect needs seeds with each arm's warm-up"
            )
            continue
        p = pair.get("p_home_advantage")
        lines.append(
            f"{pair['arm_a']} - {pair['arm_b']}: {pair['mean_difference_warmup_a']:+.1f} on {pair['n_warmup_a']} "
            f"seed(s) warmed by {pair['arm_a']}, {pair['mean_difference_warmup_b']:+.1f} on {pair['n_warmup_b']} "
            f"by {pair['arm_b']}: home advantage {pair['home_advantage']:+.1f} points"
            + ("" if p is None else f" (p = {p:.2f})")
            + f", balanced difference {pair['balanced_difference']:+.1f}"
        )
    return lines


@dataclass(frozen=True)
class MatrixOptions:
    """What `ccpo matrix` was asked (None: the design's value)."""

    arms: Annotated[
        str,
        typer.Option(
            "--arms",
            help="Arms to compare, e.g. grpo,gigpo,return-hard.",
            autocompletion=completion.arm_list,
        ),
    ]
    seeds: Annotated[
        str,
        typer.Option("--seeds", metavar="SEEDS", help=f"Every arm runs every seed: {SEED_SYNTAX}."),
    ] = "0-9"
    minutes: Annotated[
        float,
        typer.Option(
            "--minutes",
            help="Wall-time budget of the whole matrix; no block starts that would end past it.",
        ),
    ] = 30.0
    prefix: Annotated[str, typer.Option("--prefix", help="Run names are PREFIX-ARM-seedN.")] = (
        "matrix"
    )
    design: Annotated[str, typer.Option("--design", help=DESIGN_HELP)] = DEFAULT_DESIGN
    steps: Annotated[
        int | None, design_knob("--steps", "Training steps per run, the warm-up's included")
    ] = None
    tasks: Annotated[int | None, design_knob("--tasks", "Games per step")] = None
    group: Annotated[int | None, design_knob("--group", "Rollouts per game")] = None
    turn_limit: Annotated[int | None, design_knob("--turn-limit", "Turns per training episode")] = (
        None
    )
    eval_turn_limit: Annotated[
        int | None, design_knob("--eval-turn-limit", "Turns per held-out episode")
    ] = None
    room: Annotated[
        str | None,
        typer.Option(
            "--room",
            help="Room size of the shipped pool and panel: small, or large (search-sized rooms; default: the design's).",
        ),
    ] = None
    eval_every: Annotated[
        int | None,
        design_knob(
            "--eval-every",
            "Held-out evaluation every K steps from --eval-from, and at the last step",
        ),
    ] = None
    eval_games: Annotated[
        int | None,
        typer.Option(
            "--eval-games",
            help="Evaluate on a fixed subset of N held-out games (default: the design's; the whole panel in every shipped design).",
        ),
    ] = None
    eval_from: Annotated[
        int | None,
        typer.Option(
            "--eval-from",
            help="First evaluated step (default: the design's, its window start); earlier evaluations draw the curve and are not compared.",
        ),
    ] = None
    workers: Annotated[int | None, typer.Option("--workers", help="Rollout worker processes.")] = (
        None
    )
    window_start: Annotated[
        int | None,
        typer.Option(
            "--window-start",
            help=f"First step of the compared window (default: {MatrixWindow.describe_rule()}).",
        ),
    ] = None
    warm_start: Annotated[
        int | None,
        design_knob(
            "--warm-start",
            "Shared steps before the arms fork: one warm-start arm trains them per seed (rotating, --warm-start-arms) and every arm's run forks from there; 0: off",
        ),
    ] = None
    variant: Annotated[
        list[str] | None,
        typer.Option(
            "--variant",
            metavar="LABEL=ARM:KEY=VALUE",
            help="An arm of --arms that is an arm file's arm with flags set (gigpo-flip=gigpo:step_advantage_w=-1, a positive control) or on another rollout stream (gigpo-b=gigpo:stream=1, an A/A control); repeatable.",
        ),
    ] = None
    warm_start_arms: Annotated[
        str | None,
        typer.Option(
            "--warm-start-arms",
            help="Arms that train the warm-ups in turn (seed s: number s mod n); default: every arm of --arms. One arm: it trains them all.",
        ),
    ] = None
    cpu_minutes: Annotated[
        float | None,
        typer.Option(
            "--cpu-minutes",
            help="CPU-time budget (trainers and rollout workers) beside --minutes; no block starts that would end past it. 2 cores x 30 min = 60.",
        ),
    ] = None
    detect: Annotated[
        float,
        typer.Option(
            "--detect", help="Report the seeds per arm needed to detect this many points."
        ),
    ] = 5.0
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the resolved design (every knob), the arms and the runs; train nothing.",
        ),
    ] = False
    plot: Annotated[
        Path | None, typer.Option("--plot", help="Write the arms' curves to this PNG.")
    ] = None
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            metavar="ADDRESS|local",
            help="Run each seed block as a Ray task on this cluster (HOST:PORT), or on a new Ray instance of this machine ('local'); each task asks for --workers CPUs. Without it the matrix runs here and never touches Ray.",
        ),
    ] = None
    results: Annotated[
        Path | None,
        typer.Option(
            "--results",
            metavar="DIR",
            help="Record each complete seed block in DIR (results/PREREGISTRATION/, one small JSON per block, to commit) and skip the blocks DIR already records: a matrix stopped part-way resumes from DIR on any machine, and scripts/testbed_results.py re-analyses it without retraining.",
        ),
    ] = None
    plan_only: Annotated[
        bool,
        typer.Option(
            "--plan",
            help="Print the pairs a comparison needs for --power at --effect and --sd with α = --alpha, their CPU-minutes in the design and the wall time on --cores; train nothing.",
        ),
    ] = False
    effect: Annotated[
        float | None,
        typer.Option("--effect", help="With --plan: the difference to detect, in points."),
    ] = None
    sd: Annotated[
        float | None,
        typer.Option(
            "--sd",
            help="With --plan: the sd of the paired differences, in points (default: the design's measured one).",
        ),
    ] = None
    alpha: Annotated[
        float, typer.Option("--alpha", help="With --plan: the two-sided test's level.")
    ] = 0.01
    power: Annotated[float, typer.Option("--power", help="With --plan: the power wanted.")] = 0.8
    cores: Annotated[
        int | None,
        typer.Option(
            "--cores",
            help="With --plan: the cores the matrix has, here or on the Ray cluster (default: this machine's).",
        ),
    ] = None
    cost_from: Annotated[
        Path | None,
        typer.Option(
            "--cost-from",
            metavar="DIR",
            help="With --plan: the warm-up and fork CPU-minutes measured by the records in DIR (default: the design's measured ones).",
        ),
    ] = None
    eval_noise: Annotated[
        int,
        typer.Option(
            "--eval-noise",
            metavar="N",
            help="After the matrix, re-evaluate N compared checkpoints (the first two arms', seed by seed, at the last step) under --eval-noise-seeds other evaluation seeds, and report the evaluation-noise share of the paired variance with its 95 % CI; 0: off.",
        ),
    ] = 0
    eval_noise_seeds: Annotated[
        int,
        typer.Option(
            "--eval-noise-seeds", help="Evaluation seeds per re-evaluated checkpoint (1..K)."
        ),
    ] = 3
    output: TablesOutput = TablesOutput()


@options_command(MatrixOptions)
def matrix(ctx: typer.Context, options: MatrixOptions) -> None:
    """Train every arm on every seed (seed-major, paired), within --minutes, then compare.

    Example: ccpo matrix --arms grpo,return-hard --seeds 0-3 --minutes 30
    """
    from ccpo_cli.errors import UsageError
    from ccpo_cli.experiments.designs import load_design
    from ccpo_cli.experiments.matrix import run_matrix

    chosen = options.output.chosen()
    if not options.detect > 0:
        raise UsageError(f"--detect must be a positive number of points, got {options.detect}")
    testbed = load_design(options.design).with_options(**option_values(options, DESIGN_KNOBS))
    plan = _matrix_plan(options, testbed)
    if options.plan_only:
        _print_budget(options, testbed, chosen)
        return
    if options.dry_run:
        from ccpo_cli.cli.common import emit_json
        from ccpo_cli.experiments.matrix import plan_summary

        emit_json(plan_summary(plan, testbed, settings(ctx).db))
        return
    result = run_matrix(
        settings(ctx).db,
        plan,
        ray_address=options.ray_address,
        progress=lambda line: info(ctx, f"[matrix] {line}"),
        results_dir=options.results,
    )
    _report_run(ctx, options, result)
    summary = _matrix_summary(result)
    if options.eval_noise and result.comparison is not None:
        summary["evaluation_noise"] = _evaluation_noise(ctx, options, testbed, result)
    _emit_comparison(chosen, options, summary, result.comparison)
    if result.incomplete_blocks:
        raise typer.Exit(130)


# The options that override a knob of the design, under the knob's name.
DESIGN_KNOBS = (
    "steps",
    "warm_start",
    "window_start",
    "eval_from",
    "eval_every",
    "tasks",
    "group",
    "turn_limit",
    "eval_turn_limit",
    "eval_games",
    "room",
)


def _matrix_plan(options: MatrixOptions, testbed):
    """The arms × seeds matrix the options ask of the design (checked before anything runs)."""
    from ccpo_cli.experiments.matrix import matrix_of_design, parse_arm_list, parse_variant

    warm_start_arms = options.warm_start_arms
    return matrix_of_design(
        testbed,
        tuple(parse_arm_list(options.arms)),
        tuple(parse_seeds(options.seeds)),
        options.minutes,
        prefix=options.prefix,
        detect=options.detect,
        variants=tuple(parse_variant(spec) for spec in options.variant or ()),
        warm_start_arms=tuple(
            parse_arm_list(warm_start_arms, minimum=1, option="--warm-start-arms")
        )
        if warm_start_arms
        else (),
        cpu_minutes=options.cpu_minutes,
        workers=options.workers,
    )


def _print_budget(options: MatrixOptions, testbed, chosen) -> None:
    """--plan: the seeds and minutes the effect asks for, on these cores; nothing runs."""
    from ccpo_cli.experiments.budget import plan_lines, plan_matrix
    from ccpo_cli.experiments.matrix import parse_arm_list

    estimate = plan_matrix(
        testbed,
        parse_arm_list(options.arms),
        **option_values(options, ("effect", "sd", "cost_from", "alpha", "power", "cores")),
        workers=options.workers,
        ray=options.ray_address is not None,
    )
    emit(chosen, estimate, lambda: plan_lines(estimate), table=options.output.table)


def _report_run(ctx: typer.Context, options: MatrixOptions, result) -> None:
    """The log lines of a finished matrix: why it stopped, what it reused, the warm-start
    effect, and the learning-curve plot (--plot)."""
    cpu = f", {sum(result.block_cpu_seconds) / 60:.1f} CPU-min" if result.block_cpu_seconds else ""
    info(
        ctx,
        f"[matrix] {result.stopped_reason}; compared seeds {result.seeds_compared} "
        f"in {result.elapsed_s / 60:.1f} min{cpu}",
    )
    if result.seeds_from_records:
        info(
            ctx,
            f"[matrix] seeds {result.seeds_from_records} recorded in {options.results}: not "
            f"retrained; python scripts/testbed_results.py {options.results} analyses every "
            "recorded block",
        )
    for line in warm_start_lines(result.warm_start_effect):
        info(ctx, f"[matrix] {line}")
    if options.plot is not None and result.comparison is not None:
        from ccpo_cli.report.plot import plot_learning_curves

        plot_learning_curves(result.comparison, options.plot)
        info(ctx, f"wrote {options.plot}")


# The fields of a matrix's result its --json "matrix" document shows as they are, in order.
SUMMARY_FIELDS = (
    "seeds_compared",
    "incomplete_block",
    "seeds_not_started",
    "elapsed_s",
    "block_seconds",
    "stopped_reason",
    "incomplete_blocks",
    "nodes",
    "arms",
    "block_cpu_seconds",
    "run_cpu_seconds",
    "warm_start_arms",
    "warm_start_effect",
    "seeds_from_records",
)


def _matrix_summary(result) -> dict:
    """The "matrix" document: the result's run names as "runs", then its fields (the warm-up
    arm of each seed keyed by the seed as text)."""
    summary = {"runs": result.run_names, **option_values(result, SUMMARY_FIELDS)}
    summary["warm_start_arms"] = {str(seed): arm for seed, arm in result.warm_start_arms.items()}
    return summary


def _evaluation_noise(ctx: typer.Context, options: MatrixOptions, testbed, result) -> dict:
    """--eval-noise: each compared run's window re-evaluated on other evaluation seeds."""
    from ccpo_cli.experiments.eval_noise import measure_matrix, noise_line
    from ccpo_cli.experiments.matrix import parse_arm_list
    from ccpo_cli.store import open_db

    comparison = result.comparison
    noise = measure_matrix(
        open_db(settings(ctx).db),
        {entry.run: entry.window.mean for entry in comparison.runs if entry.window.n},
        options.prefix,
        parse_arm_list(options.arms),
        result.seeds_compared,
        testbed.steps,
        options.eval_noise,
        options.eval_noise_seeds,
        len(testbed.compared_evaluations),
    )
    info(ctx, f"[matrix] {noise_line(noise)}")
    return noise


def _emit_comparison(chosen, options: MatrixOptions, summary: dict, comparison) -> None:
    """The matrix document and its comparison (tables: the comparison's, when there is one)."""
    from ccpo_cli.report.compare_tables import comparison_tables

    if chosen.value == "json" or comparison is not None:
        emit(
            chosen,
            {"matrix": summary, "compare": {} if comparison is None else comparison.as_json()},
            lambda: [] if comparison is None else comparison_tables(comparison),
            table=options.output.table,
        )
