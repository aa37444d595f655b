"""`ccpo matrix`: arms × paired seeds on the CPU within a time budget, ending with `ccpo compare`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.backends.local.matrix import (
    DEFAULT_EVAL_EVERY,
    DEFAULT_EVAL_GAMES,
    DEFAULT_STEPS,
    DEFAULT_WARM_START,
)
from ccpo_cli.cli.common import JsonOption, emit_json, handle_errors, info, settings, stdout_console


@handle_errors
def matrix(
    ctx: typer.Context,
    arms: Annotated[str, typer.Option("--arms", help="Arms to compare, e.g. grpo,gigpo,return-hard.")],
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds, e.g. 0-9 or 0,1,2; every arm runs every seed.")] = "0-9",
    minutes: Annotated[float, typer.Option("--minutes", help="Wall-time budget of the whole matrix; no block starts that would end past it.")] = 30.0,
    prefix: Annotated[str, typer.Option("--prefix", help="Run names are PREFIX-ARM-seedN.")] = "matrix",
    steps: Annotated[int | None, typer.Option("--steps", help=f"Training steps per run (default: {DEFAULT_STEPS}).")] = None,
    tasks: Annotated[int | None, typer.Option("--tasks", help="Games per step.")] = None,
    group: Annotated[int | None, typer.Option("--group", help="Rollouts per game.")] = None,
    eval_every: Annotated[int | None, typer.Option("--eval-every", help=f"Held-out evaluation every K steps (default: {DEFAULT_EVAL_EVERY}).")] = None,
    eval_games: Annotated[int | None, typer.Option("--eval-games", help="Evaluate on a fixed subset of N held-out games (default: the whole panel).")] = None,
    eval_from: Annotated[int | None, typer.Option("--eval-from", help="First evaluated step (default: the window start; 0 adds the untrained policy and the early curve).")] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Rollout worker processes.")] = None,
    window_start: Annotated[int | None, typer.Option("--window-start", help="First step of the compared window (default: the end of the warm start; without one, half of --steps).")] = None,
    warm_start: Annotated[int, typer.Option("--warm-start", help="Train the first arm alone for K steps per seed and fork every arm's run from there; 0: off.")] = DEFAULT_WARM_START,
    detect: Annotated[float, typer.Option("--detect", help="Report the seeds per arm needed to detect this many points.")] = 5.0,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write the arms' curves to this PNG.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Train every arm on every seed (seed-major, paired), within --minutes, then compare."""
    from ccpo_cli.backends.local.matrix import parse_arm_list, parse_seed_list, run_matrix
    from ccpo_cli.errors import UsageError
    from ccpo_cli.report.tables import comparison_renderables

    if not detect > 0:
        raise UsageError(f"--detect must be a positive number of points, got {detect}")
    options = {key: value for key, value in {"tasks": tasks, "group": group, "workers": workers}.items()
               if value is not None}
    result = run_matrix(
        settings(ctx).db, parse_arm_list(arms), parse_seed_list(seeds), minutes, prefix=prefix,
        steps=DEFAULT_STEPS if steps is None else steps,
        eval_every=DEFAULT_EVAL_EVERY if eval_every is None else eval_every,
        eval_games=DEFAULT_EVAL_GAMES if eval_games is None else eval_games,
        eval_from=eval_from, window_start=window_start, detect=detect,
        warm_start=warm_start,
        progress=lambda line: info(ctx, f"[matrix] {line}"), **options,
    )
    info(ctx, f"[matrix] {result.stopped_reason}; compared seeds {result.seeds_compared} "
              f"in {result.elapsed_s / 60:.1f} min")
    if plot is not None and result.comparison:
        from ccpo_cli.report.plot import plot_learning_curves

        plot_learning_curves(result.comparison, plot)
        info(ctx, f"wrote {plot}")
    summary = {
        "runs": result.run_names, "seeds_compared": result.seeds_compared,
        "incomplete_block": result.incomplete_block, "seeds_not_started": result.seeds_not_started,
        "elapsed_s": result.elapsed_s, "block_seconds": result.block_seconds,
        "stopped_reason": result.stopped_reason,
    }
    if as_json:
        emit_json({"matrix": summary, "compare": result.comparison})
    elif result.comparison:
        for renderable in comparison_renderables(result.comparison):
            stdout_console.print(renderable)
    if result.incomplete_block is not None:
        raise typer.Exit(130)
