"""Is the CPU testbed's verdict on a difference to be believed? Controls, cost and design.

A matrix's runs are read back from runs.db (and each run's `metrics.jsonl` for its CPU cost)
into `RunData`, one per run: every evaluation as the per-game outcomes, every training step's
and evaluation's CPU seconds. From them:

- **The paired comparison** of two arms over the seeds both ran (`paired_stats`): the
  per-seed difference of window means, its mean, sd, paired t, p, the minimum detectable
  difference (ccpo_cli.report.power) and the effect-to-sd ratio.
- **The A/A control** (`aa_false_positive_rate`). Two runs of one arm whose training noise is
  independent after the fork (rollout streams 0 and K, `TrainConfig.rollout_stream`) differ by
  training noise alone, so any "difference" the testbed finds between them is a false positive.
  Each seed's pair is tested on its own: its difference d_i against the spread of the other
  pairs' differences, t_i = d_i / s_(-i), where s_(-i) is the sample sd of the other N - 1
  differences. Under the null (mean 0, normal noise) d_i is independent of s_(-i) and t_i
  follows t with N - 2 degrees of freedom; a shift of the mean (an arm-like effect of the stream,
  an advantage of continuing the warm-up's own history) makes |t_i| larger. So N pairs give N
  per-pair p-values, uniform under the null, and the share below alpha is the false-positive
  rate, judged against the central 95 % range of Binomial(N, alpha). The t_i share their
  denominators a little (a large d_i enlarges the others' s_(-j)), which makes the count slightly
  less spread than a binomial; `null_count_range` gives its range by simulation, next to the
  binomial one.
- **Cost** (`design_cost`): the CPU seconds of a block (the warm-up and each arm's fork) as
  recorded by the trainer, for the design the runs were trained with or any design read out of
  them (a shorter horizon, fewer evaluations, a smaller panel; `SubDesign`).
- **Signal per CPU-minute**: a paired t grows as (effect/sd)·√pairs, and a budget of B
  CPU-minutes buys B/c pairs of blocks costing c, so (effect/sd)²/c is what a design earns per
  CPU-minute, and (effect/sd)·√(B/c) is the t a matrix of B CPU-minutes is expected to reach.
- **Batch structure** (`batch_structure`, in batch_diagnostics.py): from dumped training batches, how often GiGPO's step
  groups form (a (task, observation) state reached by two or more trajectories of a group),
  the horizon, and how sparse the reward is.

Pure functions of the data apart from the loader; no training happens here.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ccpo_cli.experiments.blocks import run_name
from ccpo_cli.stats import two_arm_test

ALPHA = 0.05
# The budget a "30-minute matrix" of this project's 2-core machine is: 2 cores for 30 minutes.
THIRTY_MINUTE_CPU_MINUTES = 60.0


@dataclass
class RunData:
    """One run as the testbed reads it. `evaluations`: step -> {game id: won}; `step_cpu_s` /
    `eval_cpu_s`: step -> CPU seconds of that training step / evaluation (absent where the run
    did not record it); `start_step`: the step it forked at (0 from scratch)."""

    name: str
    seed: int | None
    stream: int
    start_step: int
    start_from: str | None
    evaluations: dict[int, dict[str, bool]]
    step_cpu_s: dict[int, float] = field(default_factory=dict)
    eval_cpu_s: dict[int, float] = field(default_factory=dict)
    step_decisions: dict[int, int] = field(default_factory=dict)
    eval_turns: dict[int, int] = field(default_factory=dict)
    start_arm: str | None = None  # the arm that trained the checkpoint it forked from

    def window_mean(self, steps: Iterable[int], games: set[str] | None = None) -> float | None:
        """Mean success (points) over the evaluations at `steps`, each over `games` (all: None)."""
        rates = []
        for step in steps:
            outcomes = self.evaluations.get(step)
            if outcomes is None:
                return None
            kept = [won for game, won in outcomes.items() if games is None or game in games]
            if not kept:
                return None
            rates.append(100.0 * sum(kept) / len(kept))
        return statistics.fmean(rates) if rates else None


def load_run(db, name: str) -> RunData:
    """A run of runs.db with its evaluations' episodes and its metrics file's CPU seconds."""
    from ccpo_cli.store import get_run, run_evaluations
    from ccpo_cli.store.queries import evaluation_episodes

    run = get_run(db, name)
    config = run.get("config") or {}
    train = config.get("train") or {}
    evaluations: dict[int, dict[str, bool]] = {}
    eval_turns: dict[int, int] = {}
    for evaluation in run_evaluations(db, name):
        episodes = evaluation_episodes(db, evaluation["id"])
        evaluations[int(evaluation["step"])] = {
            row["game_id"]: bool(row["won"]) for row in episodes
        }
        eval_turns[int(evaluation["step"])] = sum(int(row["turns"] or 0) for row in episodes)
    data = RunData(
        name,
        run.get("seed"),
        int(train.get("rollout_stream") or 0),
        int((config.get("start") or {}).get("step") or 0),
        train.get("start_from"),
        evaluations,
        eval_turns=eval_turns,
        start_arm=(config.get("start") or {}).get("arm"),
    )
    folder = config.get("run_dir")
    metrics = Path(folder) / "metrics.jsonl" if folder else None
    if metrics is not None and metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            step = row.get("step")
            if not isinstance(step, int):
                continue
            if "cpu/step_s" in row:
                data.step_cpu_s[step] = float(row["cpu/step_s"])
            if "eval/cpu_s" in row:
                data.eval_cpu_s[step] = float(row["eval/cpu_s"])
            if "train/decisions" in row:
                data.step_decisions[step] = int(row["train/decisions"])
    return data


def warmup_name_of(run: RunData) -> str | None:
    """The warm-up run a fork started from (its folder's name is the run's name)."""
    return None if not run.start_from else Path(run.start_from).parent.parent.name


@dataclass
class MatrixData:
    """The runs of one matrix prefix: runs[label][seed], and the warm-ups by name."""

    prefix: str
    runs: dict[str, dict[int, RunData]]
    warmups: dict[str, RunData]

    def seeds(self, *labels: str) -> list[int]:
        """Seeds every one of `labels` ran, in order."""
        sets = [set(self.runs.get(label, {})) for label in labels]
        return sorted(set.intersection(*sets)) if sets else []

    def warmup_of(self, label: str, seed: int) -> RunData | None:
        name = warmup_name_of(self.runs[label][seed])
        return None if name is None else self.warmups.get(name)


def load_matrix(db, prefix: str, labels: Sequence[str], seeds: Iterable[int]) -> MatrixData:
    """Every run PREFIX-LABEL-seedN that runs.db holds (finished or not), and their warm-ups."""
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.store import get_run

    runs: dict[str, dict[int, RunData]] = defaultdict(dict)
    warmups: dict[str, RunData] = {}
    for seed in seeds:
        for label in labels:
            name = run_name(prefix, label, seed)
            try:
                status = get_run(db, name)["status"]
            except InvalidInput:
                continue
            if status != "finished":
                continue
            data = load_run(db, name)
            runs[label][seed] = data
            warm = warmup_name_of(data)
            if warm is not None and warm not in warmups:
                try:
                    warmups[warm] = load_run(db, warm)
                except InvalidInput:
                    pass
    return MatrixData(prefix, dict(runs), warmups)


# ---- the paired comparison ---------------------------------------------------------------


def paired_stats(differences: Sequence[float]) -> dict[str, Any]:
    """The paired t-test on per-seed differences a − b: n, mean, sd, t, p, MDD, effect/sd.

    A matrix pairs its arms by seed (one warm start, one game draw), so the testbed's test is the
    paired branch of `ccpo_cli.stats.two_arm_test`, the one compare and the power section use."""
    from ccpo_cli.report.power import paired_mdd
    from ccpo_cli.stats import paired_t_test

    test = paired_t_test(differences)
    n, sd = test["n"], test["sd"]
    result: dict[str, Any] = {
        "n": n,
        "mean": test["difference"],
        "sd": sd,
        "t": None,
        "p": None,
        "mdd": None,
        "effect_to_sd": None,
    }
    if sd:
        result.update(
            t=test["t"],
            p=test["p"],
            mdd=paired_mdd(sd, n),
            effect_to_sd=float(test["difference"] / sd),
        )
    return result


def differences(
    data: MatrixData,
    arm_a: str,
    arm_b: str,
    steps_after_fork: Sequence[int],
    games: set[str] | None = None,
) -> dict[int, float]:
    """Per seed, window mean of a − window mean of b over the evaluations at fork + offset."""
    found = {}
    for seed in data.seeds(arm_a, arm_b):
        a, b = data.runs[arm_a][seed], data.runs[arm_b][seed]
        steps = [a.start_step + offset for offset in steps_after_fork]
        mean_a, mean_b = a.window_mean(steps, games), b.window_mean(steps, games)
        if mean_a is not None and mean_b is not None:
            found[seed] = mean_a - mean_b
    return found


def home_advantage(
    found: Mapping[int, float], warmed_by: Mapping[int, str | None], arm_a: str, arm_b: str
) -> dict[str, Any]:
    """The warm-start arm's effect on a − b: the per-seed differences on seeds whose warm-up a
    trained against those b trained. Half their gap is the home advantage h (a's gain when the
    warm-up is its own, its loss when it is b's); the mean of the two groups' means is a − b with
    the warm-up balanced out (what `ccpo_cli.experiments.matrix.warm_start_effect` reports)."""
    own = [value for seed, value in found.items() if warmed_by.get(seed) == arm_a]
    other = [value for seed, value in found.items() if warmed_by.get(seed) == arm_b]
    result: dict[str, Any] = {
        "n_warmup_a": len(own),
        "n_warmup_b": len(other),
        "mean_difference_warmup_a": statistics.fmean(own) if own else None,
        "mean_difference_warmup_b": statistics.fmean(other) if other else None,
    }
    if own and other:
        result["home_advantage"] = (statistics.fmean(own) - statistics.fmean(other)) / 2
        result["balanced_difference"] = (statistics.fmean(own) + statistics.fmean(other)) / 2
    if len(own) >= 2 and len(other) >= 2:
        # Two groups of different seeds: nothing pairs them, so the one decision gives Welch's t.
        result["p_home_advantage"] = two_arm_test(
            dict(enumerate(own)), dict(enumerate(other)), paired_by_design=()
        )["p"]
        # its standard error: half that of the gap between the two group means
        result["home_advantage_se"] = 0.5 * math.sqrt(
            statistics.variance(own) / len(own) + statistics.variance(other) / len(other)
        )
    return result


# ---- the A/A control ---------------------------------------------------------------------


def leave_one_out_p_values(pair_differences: Sequence[float]) -> list[float]:
    """Per pair, the two-sided p of t_i = d_i / s_(-i) under t with N − 2 df (module doc)."""
    values = np.asarray(pair_differences, dtype=float)
    n = len(values)
    if n < 4:
        return []
    p_values = []
    for index in range(n):
        others = np.delete(values, index)
        spread = float(others.std(ddof=1))
        if spread > 0:
            t = values[index] / spread
        else:  # the other pairs agree exactly: only a pair that differs from them is out of line
            t = 0.0 if values[index] == others[0] == 0 else math.inf
        p_values.append(float(2 * stats.t.sf(abs(t), n - 2)))
    return p_values


def binomial_range(n: int, alpha: float = ALPHA, coverage: float = 0.95) -> tuple[int, int]:
    """The central `coverage` range of Binomial(n, alpha) counts: the false positives a correct
    test at level alpha gives in n independent tries, 95 % of the time."""
    tail = (1 - coverage) / 2
    low = int(stats.binom.ppf(tail, n, alpha))
    high = int(stats.binom.isf(tail, n, alpha))
    # ppf/isf land on the count where the tail crosses; keep the range's tails at most `tail` each.
    while low > 0 and stats.binom.cdf(low - 1, n, alpha) > tail:
        low -= 1
    while stats.binom.sf(high, n, alpha) > tail:
        high += 1
    return low, high


def null_count_range(
    sizes: int | Sequence[int],
    alpha: float = ALPHA,
    draws: int = 20_000,
    seed: int = 0,
    coverage: float = 0.95,
) -> tuple[int, int]:
    """The same range for the leave-one-out count under normal null pairs, by simulation (the
    shared denominators make the count a little less spread than a binomial); `sizes` lists the
    pair sets tested separately (one leave-one-out per set), whose counts add up."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(draws, dtype=int)
    for n in [sizes] if isinstance(sizes, int) else list(sizes):
        samples = rng.standard_normal((draws, n))
        totals = samples.sum(axis=1, keepdims=True)
        squares = (samples**2).sum(axis=1, keepdims=True)
        rest_n = n - 1
        rest_mean = (totals - samples) / rest_n
        rest_var = ((squares - samples**2) - rest_n * rest_mean**2) / (rest_n - 1)
        t = np.abs(samples) / np.sqrt(rest_var)
        counts += (t > stats.t.isf(alpha / 2, n - 2)).sum(axis=1)
    tail = (1 - coverage) / 2
    return int(np.quantile(counts, tail, method="lower")), int(
        np.quantile(counts, 1 - tail, method="higher")
    )


def aa_false_positive_rate(
    pair_differences: Mapping[Any, float] | Mapping[str, Mapping[Any, float]], alpha: float = ALPHA
) -> dict[str, Any]:
    """The A/A document: per-pair p-values, the count and rate below alpha, its Clopper–Pearson
    95 % interval, the binomial and simulated null ranges of the count, and the verdict.

    `pair_differences` is {seed: difference} for one A/A pair set, or {set name: {seed:
    difference}} for several (the twins of several arms): each set is tested leave-one-out
    within itself, since arms may differ in their noise, and the counts are pooled."""
    groups = (
        dict(pair_differences)
        if pair_differences
        and all(isinstance(value, Mapping) for value in pair_differences.values())
        else {"": dict(pair_differences)}
    )
    per_pair: list[dict[str, Any]] = []
    sizes = []
    for name, found in groups.items():
        keys = list(found)
        p_values = leave_one_out_p_values([found[key] for key in keys])
        if p_values:
            sizes.append(len(p_values))
        per_pair.extend(
            {**({"set": name} if name else {}), "seed": key, "difference": found[key], "p": p}
            for key, p in zip(keys, p_values)
        )
    n = len(per_pair)
    if not n:
        return {
            "pairs": sum(len(found) for found in groups.values()),
            "note": "needs ≥ 4 A/A pairs per set",
            "within_binomial_range": None,
        }
    p_values = [row["p"] for row in per_pair]
    count = sum(p < alpha for p in p_values)
    interval = stats.binomtest(count, n, alpha).proportion_ci(0.95, method="exact")
    low, high = binomial_range(n, alpha)
    simulated = null_count_range(sizes, alpha)
    uniform = stats.kstest(p_values, "uniform")
    return {
        "pairs": n,
        "sets": {name or "pairs": len(found) for name, found in groups.items()},
        "alpha": alpha,
        "false_positives": count,
        "rate": count / n,
        "rate_interval_95": [float(interval.low), float(interval.high)],
        "binomial_range_95": [low, high],
        "simulated_null_range_95": list(simulated),
        "within_binomial_range": low <= count <= high,
        "ks_uniform_p": float(uniform.pvalue),
        "whole_matrix": {
            name or "pairs": paired_stats(list(found.values())) for name, found in groups.items()
        },
        "per_pair": per_pair,
    }


# ---- cost --------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostModel:
    """CPU seconds per training decision and per evaluation turn, fitted on runs that recorded
    their CPU; used for runs that did not (trained before the trainer counted it)."""

    per_decision_s: float | None
    per_eval_turn_s: float | None
    fitted_on: int

    def step(self, run: RunData, step: int) -> float | None:
        if step in run.step_cpu_s:
            return run.step_cpu_s[step]
        if self.per_decision_s is None or step not in run.step_decisions:
            return None
        return self.per_decision_s * run.step_decisions[step]

    def evaluation(self, run: RunData, step: int, fraction: float = 1.0) -> float | None:
        if step in run.eval_cpu_s:
            return run.eval_cpu_s[step] * fraction
        if self.per_eval_turn_s is None or step not in run.eval_turns:
            return None
        return self.per_eval_turn_s * run.eval_turns[step] * fraction


def fit_cost_model(runs: Iterable[RunData]) -> CostModel:
    decisions = cpu = turns = eval_cpu = 0.0
    fitted = 0
    for run in runs:
        shared = [step for step in run.step_cpu_s if step in run.step_decisions]
        if shared:
            fitted += 1
        decisions += sum(run.step_decisions[step] for step in shared)
        cpu += sum(run.step_cpu_s[step] for step in shared)
        evaluated = [step for step in run.eval_cpu_s if step in run.eval_turns]
        turns += sum(run.eval_turns[step] for step in evaluated)
        eval_cpu += sum(run.eval_cpu_s[step] for step in evaluated)
    return CostModel(
        cpu / decisions if decisions else None, eval_cpu / turns if turns else None, fitted
    )


@dataclass(frozen=True)
class SubDesign:
    """A design read out of longer runs: the forks train `horizon` steps after a fork at
    `warm_start`, the window averages the evaluations `eval_offsets` steps after the fork, each
    on `panel` games (None: the whole panel). Runs trained longer, or evaluated more often, give
    exactly this design's training and, with the panel subset, the same evaluation protocol
    (other sampling draws for a subset: the panel index seeds them)."""

    warm_start: int
    horizon: int
    eval_offsets: tuple[int, ...]
    panel: int | None = None

    @property
    def label(self) -> str:
        evaluations = ",".join(str(self.warm_start + offset) for offset in self.eval_offsets)
        return (
            f"K={self.warm_start} H={self.horizon} evals@{evaluations} "
            f"panel={'all' if self.panel is None else self.panel}"
        )


def block_cpu_seconds(
    data: MatrixData,
    labels: Sequence[str],
    seed: int,
    design: SubDesign,
    model: CostModel,
    panel_fraction: float = 1.0,
) -> float | None:
    """CPU seconds of one block of `design` with these arms: the warm-up's K steps, and each
    arm's `horizon` steps after the fork with its window's evaluations."""
    total = 0.0
    if design.warm_start:
        warm = data.warmup_of(labels[0], seed)
        if warm is None:
            return None
        for step in range(1, design.warm_start + 1):
            cost = model.step(warm, step)
            if cost is None:
                return None
            total += cost
    for label in labels:
        run = data.runs[label][seed]
        for step in range(run.start_step + 1, run.start_step + design.horizon + 1):
            cost = model.step(run, step)
            if cost is None:
                return None
            total += cost
        for offset in design.eval_offsets:
            cost = model.evaluation(run, run.start_step + offset, panel_fraction)
            if cost is None:
                return None
            total += cost
    return total


def design_point(
    data: MatrixData,
    arm_a: str,
    arm_b: str,
    design: SubDesign,
    model: CostModel,
    panels: Mapping[int, set[str]] | None = None,
    budget_cpu_minutes: float = THIRTY_MINUTE_CPU_MINUTES,
) -> dict[str, Any]:
    """One point of the design curve: the paired comparison a − b in `design`, its block cost
    and the signal it buys per CPU-minute."""
    games = None if design.panel is None else (panels or {}).get(design.panel)
    found = differences(data, arm_a, arm_b, design.eval_offsets, games)
    result = paired_stats(list(found.values()))
    full = max(
        (
            len(run.evaluations.get(run.start_step + design.eval_offsets[0], {}))
            for run in data.runs[arm_a].values()
        ),
        default=0,
    )
    fraction = 1.0 if games is None or not full else len(games) / full
    costs = [
        block_cpu_seconds(data, [arm_a, arm_b], seed, design, model, fraction) for seed in found
    ]
    known = [cost for cost in costs if cost is not None]
    block_minutes = statistics.fmean(known) / 60 if known else None
    ratio = result["effect_to_sd"]
    merit = None if ratio is None or not block_minutes else ratio**2 / block_minutes
    return {
        "design": design.label,
        "warm_start": design.warm_start,
        "horizon": design.horizon,
        "eval_steps": [design.warm_start + offset for offset in design.eval_offsets],
        "panel": design.panel,
        "arms": [arm_a, arm_b],
        "seeds": sorted(found),
        **result,
        "block_cpu_minutes": block_minutes,
        "effect_to_sd_squared_per_cpu_minute": merit,
        f"expected_t_in_{budget_cpu_minutes:g}_cpu_minutes": None
        if merit is None
        else math.copysign(math.sqrt(merit * budget_cpu_minutes), ratio),
        "pairs_in_budget": None if not block_minutes else int(budget_cpu_minutes // block_minutes),
    }


def seeds_within_budget(
    data: MatrixData, labels: Sequence[str], design: SubDesign, model: CostModel, cpu_minutes: float
) -> tuple[list[int], float]:
    """The seeds a matrix of these arms in `design` completes within `cpu_minutes`, seed-major
    (the matrix's own rule: no block starts that would end past the budget, by the costliest
    block so far), and the CPU minutes they take."""
    spent, costliest, kept = 0.0, 0.0, []
    for seed in data.seeds(*labels):
        cost = block_cpu_seconds(data, labels, seed, design, model)
        if cost is None:
            continue
        if kept and spent + costliest > cpu_minutes * 60:
            break
        kept.append(seed)
        spent += cost
        costliest = max(costliest, cost)
    return kept, spent / 60


__all__ = [
    "ALPHA",
    "THIRTY_MINUTE_CPU_MINUTES",
    "CostModel",
    "MatrixData",
    "RunData",
    "SubDesign",
    "aa_false_positive_rate",
    "batch_structure",
    "binomial_range",
    "block_cpu_seconds",
    "design_point",
    "differences",
    "fit_cost_model",
    "home_advantage",
    "leave_one_out_p_values",
    "load_matrix",
    "load_run",
    "null_count_range",
    "paired_stats",
    "seeds_within_budget",
    "step_term_overlap",
]

# The batches' diagnostics live in batch_diagnostics.py; kept importable from here.
from ccpo_cli.experiments.batch_diagnostics import batch_structure, step_term_overlap  # noqa: E402
