"""Is the CPU testbed's verdict on a difference to be believed? The paired comparison and the A/A control.

This module owns the testbed's statistics on the runs a matrix read back (testbed_runs.py):

- **The paired comparison** of two arms over the seeds both ran (`paired_stats`): the
  per-seed difference of window means, its mean, sd, paired t, p, the minimum detectable
  difference (ccpo_cli.report.power) and the effect-to-sd ratio; the warm-start arm's effect on
  it (`home_advantage`).
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

What a design costs and the signal it buys per CPU-minute is testbed_cost.py; what dumped
batches say about a design's credit signal (`batch_structure`) is batch_diagnostics.py.
Pure functions of the data; no training and no database here.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from ccpo_cli.experiments.testbed_runs import MatrixData
from ccpo_cli.stats import DEFAULT_CONFIDENCE, two_arm_test

ALPHA = 0.05


# ---- the paired comparison ---------------------------------------------------------------


def paired_stats(
    differences: Sequence[float], confidence: float = DEFAULT_CONFIDENCE
) -> dict[str, Any]:
    """The paired t-test on per-seed differences a − b: n, mean, sd, t, p, MDD, effect/sd and
    the CI at `confidence` (ci_low, ci_high; None below two seeds).

    A matrix pairs its arms by seed (one warm start, one game draw), so the testbed's test is the
    paired branch of `ccpo_cli.stats.two_arm_test`, the one compare and the power section use."""
    from ccpo_cli.report.power import paired_mdd

    # The one two-arm decision, told that the design paired every seed: a − b against b − b.
    seeds = range(len(differences))
    test = two_arm_test(
        dict(zip(seeds, differences)),
        dict.fromkeys(seeds, 0.0),
        paired_by_design=seeds,
        confidence=confidence,
    )
    # Below two seeds there is no paired test: the count and no spread, as before.
    n, sd = len(differences), test.get("sd")
    result: dict[str, Any] = {
        "n": n,
        "mean": test["difference"],
        "sd": sd,
        "t": None,
        "p": None,
        "mdd": None,
        "effect_to_sd": None,
        "ci_low": None,
        "ci_high": None,
    }
    if sd:
        result.update(
            t=test["t"],
            p=test["p"],
            mdd=paired_mdd(sd, n),
            effect_to_sd=float(test["difference"] / sd),
            ci_low=test.get("ci_low"),
            ci_high=test.get("ci_high"),
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


def _per_pair_p_values(
    groups: dict[str, dict[Any, float]],
) -> tuple[list[dict[str, Any]], list[int]]:
    """Each pair's leave-one-out p-value within its own set (arms may differ in their noise),
    and the sizes of the sets that were large enough to test."""
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
    return per_pair, sizes


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
    per_pair, sizes = _per_pair_p_values(groups)
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
