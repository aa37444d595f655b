"""Where a matrix's paired variance comes from: the evaluation-noise share, measured.

A compared checkpoint is played again on its held-out panel under other evaluation seeds
(the same games, turn limit and temperature as its run's evaluations, through the local
agent of `ccpo eval --agent local`). The spread of those evaluations around each checkpoint's
own mean is the evaluation noise, pooled over the checkpoints: s_e² with Σ(k − 1) degrees of
freedom. A paired difference of two window means, each the mean of w evaluations, carries
2 s_e² / w of it, and its share of the paired variance sd² is

    share = 2 s_e² / (w · sd²).

Two 95 % intervals are given: the one that takes the paired sd as known and only s_e² as
uncertain (chi-squared on its degrees of freedom: issue 40's 14–39 %), and the one that also
lets the paired sd vary (F on both degrees of freedom), which is the wider and the honest one
when the pairs are few. The training noise is the rest.

The sample is the first N compared checkpoints in seed order, alternating the arms of the
first pair; the evaluation seeds are 1..k (the matrix's own evaluations used seed 0 and are
not pooled with these, whose sampling goes through the agent rather than the trainer's
workers).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.vocabulary import EVAL_TEMPERATURE


@dataclass(frozen=True)
class Checkpoint:
    """A compared run's checkpoint at a step of its window, with what its evaluations were."""

    run: str
    step: int
    path: str
    eval_games: int | None
    eval_games_dir: str | None
    room: str
    turn_limit: int
    temperature: float


def checkpoint_of(db, run_name: str, step: int) -> Checkpoint:
    """The step-`step` checkpoint of a finished run and its evaluation protocol, from runs.db."""
    from ccpo_cli.backends.local.checkpoints import checkpoint_path
    from ccpo_cli.store import get_run

    run = get_run(db, run_name)
    config = run.get("config") or {}
    train = config.get("train") or {}
    folder = config.get("run_dir")
    if not folder:
        raise InvalidInput(f"run {run_name!r} records no run folder: its checkpoints are not known")
    path = checkpoint_path(Path(folder), step)
    if not path.is_file():
        raise InvalidInput(f"run {run_name!r} has no checkpoint at step {step} ({path})")
    return Checkpoint(
        run_name,
        step,
        str(path),
        train.get("eval_games"),
        train.get("eval_games_dir"),
        str(train.get("room") or "small"),
        int(train.get("eval_max_steps") or 50),
        float(train.get("eval_temperature") or EVAL_TEMPERATURE),
    )


def reevaluate(checkpoint: Checkpoint, eval_seeds: Sequence[int]) -> list[float]:
    """Held-out success (points) of the checkpoint under each evaluation seed, its panel once."""
    from ccpo_cli.agents.evaluate import evaluate
    from ccpo_cli.backends.local import games as game_sets
    from ccpo_cli.backends.local.agent import make_local_agent

    panel = game_sets.evaluation_games(
        checkpoint.eval_games, checkpoint.eval_games_dir, checkpoint.room
    )
    agent = make_local_agent(checkpoint.path, temperature=checkpoint.temperature)
    results = evaluate(
        agent, panel, seeds=list(eval_seeds), workers=0, max_steps=checkpoint.turn_limit
    )
    return [result.success for result in results]


def noise_share(
    evaluations: Mapping[str, Sequence[float]],
    paired_sd: float,
    pairs: int,
    window_evaluations: int = 1,
    confidence: float = 0.95,
) -> dict[str, Any]:
    """The evaluation-noise share of a paired variance (see the module's formula), with both
    intervals; `evaluations` holds each checkpoint's repeated evaluations (points)."""
    from ccpo_cli.distributions import chi2_ppf, f_ppf

    groups = [list(values) for values in evaluations.values() if len(values) >= 2]
    df_eval = sum(len(values) - 1 for values in groups)
    if df_eval < 1:
        raise InvalidInput("the evaluation noise needs a checkpoint evaluated at least twice")
    if not paired_sd > 0 or pairs < 2:
        raise InvalidInput("the evaluation-noise share needs a paired sd over at least 2 pairs")
    within = sum(
        sum((value - statistics.fmean(values)) ** 2 for value in values) for values in groups
    )
    eval_variance = within / df_eval
    scale = 2.0 / (window_evaluations * paired_sd**2)
    share = eval_variance * scale
    tail = (1.0 - confidence) / 2.0
    low_var = eval_variance * df_eval / chi2_ppf(1.0 - tail, df_eval)
    high_var = eval_variance * df_eval / chi2_ppf(tail, df_eval)
    df_pairs = pairs - 1
    return {
        "checkpoints": len(groups),
        "evaluations": sum(len(values) for values in groups),
        "df": df_eval,
        "evaluation_sd": math.sqrt(eval_variance),
        "evaluation_sd_ci": [math.sqrt(low_var), math.sqrt(high_var)],
        "paired_sd": paired_sd,
        "pairs": pairs,
        "window_evaluations": window_evaluations,
        "share": share,
        # the paired sd taken as known: only s_e² varies
        "share_ci_evaluation_only": [low_var * scale, high_var * scale],
        # both vary: (s_e²/σ_e²) / (sd²/σ_d²) ~ F(df_eval, pairs - 1)
        "share_ci": [
            share / f_ppf(1.0 - tail, df_eval, df_pairs),
            min(1.0, share / f_ppf(tail, df_eval, df_pairs)),
        ],
        "training_share": max(0.0, 1.0 - share),
        "confidence": confidence,
    }


def sample_checkpoints(
    db, run_pairs: Sequence[tuple[str, str]], step: int, count: int
) -> list[Checkpoint]:
    """The first `count` checkpoints at `step`, seed by seed, alternating the pair's two runs."""
    names = [name for pair in run_pairs for name in pair][:count]
    return [checkpoint_of(db, name, step) for name in names]


def measure(
    db,
    run_pairs: Sequence[tuple[str, str]],
    differences: Sequence[float],
    step: int,
    count: int,
    eval_seeds: Sequence[int],
    window_evaluations: int = 1,
) -> dict[str, Any]:
    """Re-evaluate `count` compared checkpoints under `eval_seeds` and give the share of the
    paired variance of `differences` that is evaluation noise."""
    if len(eval_seeds) < 2:
        raise InvalidInput("the evaluation noise needs at least 2 evaluation seeds per checkpoint")
    if len(differences) < 2:
        raise InvalidInput("the evaluation-noise share needs at least 2 compared pairs")
    evaluations = {
        checkpoint.run: reevaluate(checkpoint, eval_seeds)
        for checkpoint in sample_checkpoints(db, run_pairs, step, count)
    }
    result = noise_share(
        evaluations, statistics.stdev(differences), len(differences), window_evaluations
    )
    return {
        **result,
        "step": step,
        "eval_seeds": list(eval_seeds),
        "per_checkpoint": evaluations,
    }


def measure_matrix(
    db,
    run_means: Mapping[str, float],
    prefix: str,
    arms: Sequence[str],
    seeds: Sequence[int],
    step: int,
    count: int,
    eval_seeds: int,
    window_evaluations: int,
) -> dict[str, Any]:
    """`ccpo matrix --eval-noise`: the first two arms' compared runs seed by seed (their window
    means `run_means` by run name) re-evaluated `count` checkpoints deep under seeds 1..K."""
    from ccpo_cli.errors import UsageError
    from ccpo_cli.experiments.blocks import run_name

    if count < 1 or eval_seeds < 2:
        raise UsageError("--eval-noise needs N >= 1 and --eval-noise-seeds >= 2")
    first, second = arms[0], arms[1]
    pairs = [
        (run_name(prefix, first, seed), run_name(prefix, second, seed))
        for seed in seeds
        if run_name(prefix, first, seed) in run_means
        and run_name(prefix, second, seed) in run_means
    ]
    return {
        "arms": [first, second],
        **measure(
            db,
            pairs,
            [run_means[a] - run_means[b] for a, b in pairs],
            step,
            count,
            list(range(1, eval_seeds + 1)),
            window_evaluations,
        ),
    }


def noise_line(noise: dict[str, Any]) -> str:
    low, high = noise["share_ci"]
    first, second = noise["arms"]
    return (
        f"evaluation noise: sd {noise['evaluation_sd']:.2f} points per evaluation "
        f"({noise['checkpoints']} checkpoints x {len(noise['eval_seeds'])} seeds); "
        f"{noise['share']:.0%} of the paired variance of {first} - {second} (sd "
        f"{noise['paired_sd']:.2f}, {noise['pairs']} pairs), 95 % CI {low:.0%}-{high:.0%}; "
        "training noise the rest"
    )
