"""Statistical power of an arm comparison: what a set of seeds can and cannot tell apart.

For every pair of arms, `power_report` gives the minimum detectable difference (MDD: the true
gap in window-mean points that a two-sided test at level alpha would find with the given power,
at the observed variance and the number of seeds compared) and, for a difference the user
names, the number of seeds per arm that would detect it.

Which test: runs of the same seed in two arms play identical step-1 rollouts (the isolation
check compares their `step1_rollout_hash`), so their seed-to-seed luck is shared and the
per-seed difference is the right unit: a paired t-test on the differences, with their sd.
Without that evidence the arms are independent samples: Welch's t-test, with each arm's sd.

Power uses the noncentral t distribution: with noncentrality nc and df degrees of freedom,
power = P(T > t_crit) + P(T < -t_crit), T ~ nct(df, nc). For the paired test this is exact. For
Welch's test it is an approximation (Welch's statistic is not noncentral-t distributed; with
Welch's df it reaches 68-79 % instead of 80 % at the MDD with 2-5 seeds, by simulation), and
each pair's `power_method` says which. Pure functions, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ccpo_cli.distributions import noncentral_t_sf, t_ppf
from ccpo_cli.stats import PAIRED_TEST, WELCH_TEST, two_arm_test

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import ArmSummary, PairComparison

# No scipy here: compare computes every pair's power, and importing scipy would double its
# start-up (docs/architecture.md §5); ccpo_cli/distributions.py holds the distributions.

ALPHA = 0.05
POWER = 0.80
MIN_SEEDS = 2
NEEDS_SEEDS_NOTE = f"needs ≥ {MIN_SEEDS} seeds"
MAX_SEEDS_SEARCHED = 10_000
PAIRED = PAIRED_TEST
EXACT_POWER = "exact: noncentral t of the paired t-test"
APPROXIMATE_POWER = "approximate: noncentral t with Welch's df (Welch's test is not exactly t)"
WELCH = WELCH_TEST


def t_test_power(noncentrality: float, df: float, alpha: float = ALPHA) -> float:
    """Power of a two-sided t-test with `df` degrees of freedom at this noncentrality."""
    critical = t_ppf(1 - alpha / 2, df)
    # P(T < -c; nc) = P(T > c; -nc): both tails as upper tails of the noncentral t.
    near, far = (
        noncentral_t_sf(critical, df, value) for value in (abs(noncentrality), -abs(noncentrality))
    )
    return near + far


def paired_power(
    difference: float, sd_of_differences: float, n_pairs: int, alpha: float = ALPHA
) -> float:
    """Power of the paired (one-sample) t-test on n_pairs differences with this sd."""
    return t_test_power(difference / sd_of_differences * math.sqrt(n_pairs), n_pairs - 1, alpha)


def welch_df(sd_a: float, n_a: int, sd_b: float, n_b: int) -> float:
    """Welch-Satterthwaite degrees of freedom."""
    va, vb = sd_a**2 / n_a, sd_b**2 / n_b
    return (va + vb) ** 2 / (va**2 / (n_a - 1) + vb**2 / (n_b - 1))


def welch_power(
    difference: float, sd_a: float, n_a: int, sd_b: float, n_b: int, alpha: float = ALPHA
) -> float:
    """Power of Welch's t-test (noncentral t with Welch's standard error and df)."""
    standard_error = math.sqrt(sd_a**2 / n_a + sd_b**2 / n_b)
    return t_test_power(difference / standard_error, welch_df(sd_a, n_a, sd_b, n_b), alpha)


def _smallest_detectable(power_at: Any, scale: float, power: float) -> float:
    """The difference at which `power_at(difference)` reaches `power` (power rises with it):
    bracketed by doubling, then bisected to 1e-10."""
    lower, upper = 0.0, scale
    while power_at(upper) < power:
        lower, upper = upper, upper * 2
    while upper - lower > 1e-10 + 1e-12 * upper:
        middle = 0.5 * (lower + upper)
        lower, upper = (middle, upper) if power_at(middle) < power else (lower, middle)
    return 0.5 * (lower + upper)


def paired_mdd(
    sd_of_differences: float, n_pairs: int, alpha: float = ALPHA, power: float = POWER
) -> float:
    return _smallest_detectable(
        lambda d: paired_power(d, sd_of_differences, n_pairs, alpha), sd_of_differences, power
    )


def welch_mdd(
    sd_a: float, n_a: int, sd_b: float, n_b: int, alpha: float = ALPHA, power: float = POWER
) -> float:
    return _smallest_detectable(
        lambda d: welch_power(d, sd_a, n_a, sd_b, n_b, alpha), math.sqrt(sd_a**2 + sd_b**2), power
    )


def paired_seeds_needed(
    difference: float, sd_of_differences: float, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """Smallest number of paired seeds whose test detects `difference` (None above the cap)."""
    return _first_n(lambda n: paired_power(difference, sd_of_differences, n, alpha) >= power)


def welch_seeds_needed(
    difference: float, sd_a: float, sd_b: float, alpha: float = ALPHA, power: float = POWER
) -> int | None:
    """Smallest equal number of seeds per arm whose Welch test detects `difference`."""
    return _first_n(lambda n: welch_power(difference, sd_a, n, sd_b, n, alpha) >= power)


def _first_n(enough: Any) -> int | None:
    # Power rises with n: double to bracket, then bisect.
    if enough(MIN_SEEDS):
        return MIN_SEEDS
    low, high = MIN_SEEDS, MIN_SEEDS * 2
    while not enough(high):
        if high >= MAX_SEEDS_SEARCHED:
            return None
        low, high = high, min(high * 2, MAX_SEEDS_SEARCHED)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def _sd(values: Sequence[float]) -> float | None:
    """The sd (ddof 1); 0.0 for values that differ only by float rounding (1e-13 is no spread)."""
    if len(values) < 2:
        return None
    from ccpo_cli.stats import no_spread

    return 0.0 if no_spread(values) else float(np.std(np.asarray(values, dtype=float), ddof=1))


def pair_power(
    seed_means_a: dict[Any, float],
    seed_means_b: dict[Any, float],
    paired_seeds: Sequence[Any] = (),
    detect: float | None = None,
    alpha: float = ALPHA,
    power: float = POWER,
) -> dict[str, Any]:
    """Power of comparing two arms from their per-seed window means.

    `paired_seeds` are the seeds whose runs in both arms are known to share their rollouts. Which
    test is used is `stats.two_arm_test`'s decision, the one compare reports: the paired test on
    those seeds when at least two (seeds outside them are left out and listed), else Welch's test
    on all seeds.
    """
    result: dict[str, Any] = {
        "test": None,
        "n_a": len(seed_means_a),
        "n_b": len(seed_means_b),
        "n_pairs": None,
        "seeds_left_out": [],
        "observed_difference": None,
        "sd": None,
        "sd_a": None,
        "sd_b": None,
        "p": None,
        "mdd": None,
        "alpha": alpha,
        "power": power,
        "detect": detect,
        "seeds_needed": None,
        "power_method": None,
        "note": None,
    }
    if seed_means_a and seed_means_b:
        result["observed_difference"] = float(
            np.mean(list(seed_means_a.values())) - np.mean(list(seed_means_b.values()))
        )
    decided = two_arm_test(seed_means_a, seed_means_b, paired_by_design=paired_seeds)
    if decided["test"] == PAIRED:
        return _paired_power(result, decided)
    if len(seed_means_a) < MIN_SEEDS or len(seed_means_b) < MIN_SEEDS:
        result["note"] = NEEDS_SEEDS_NOTE
        return result
    return _welch_power(result, list(seed_means_a.values()), list(seed_means_b.values()), decided)


def _paired_power(result: dict[str, Any], decided: dict[str, Any]) -> dict[str, Any]:
    """`result` with the paired test's power: its mdd and, to `detect`, the pairs needed; none
    when the paired differences do not vary."""
    sd = decided["sd"]
    result.update(
        test=PAIRED,
        n_pairs=decided["n"],
        seeds_left_out=decided["seeds_left_out"],
        observed_difference=decided["difference"],
        sd=sd,
        power_method=EXACT_POWER,
    )
    if not sd:
        result["note"] = "the paired differences do not vary: power is undefined"
        return result
    alpha, power, detect = result["alpha"], result["power"], result["detect"]
    result["p"] = decided["p"]
    result["mdd"] = paired_mdd(sd, decided["n"], alpha, power)
    if detect is not None:
        result["seeds_needed"] = paired_seeds_needed(detect, sd, alpha, power)
    return result


def _welch_power(
    result: dict[str, Any], a: list[float], b: list[float], decided: dict[str, Any]
) -> dict[str, Any]:
    """`result` with Welch's test's power over every seed of both arms (each has at least
    MIN_SEEDS); none when neither arm's seeds spread."""
    sd_a, sd_b = _sd(a), _sd(b)
    # Each arm has at least MIN_SEEDS (2) seeds here, so each has an sd.
    assert sd_a is not None and sd_b is not None
    result.update(
        test=WELCH,
        sd_a=sd_a,
        sd_b=sd_b,
        sd=math.sqrt((sd_a**2 + sd_b**2) / 2),
        power_method=APPROXIMATE_POWER,
    )
    if not sd_a and not sd_b:
        result["note"] = "no spread over seeds in either arm: power is undefined"
        return result
    alpha, power, detect = result["alpha"], result["power"], result["detect"]
    result["p"] = decided["p"]
    result["mdd"] = welch_mdd(sd_a, len(a), sd_b, len(b), alpha, power)
    if detect is not None:
        result["seeds_needed"] = welch_seeds_needed(detect, sd_a, sd_b, alpha, power)
    return result


def shared_rollout_seeds(
    arm_a: ArmSummary, arm_b: ArmSummary, rollout_hashes: dict[str, str | None]
) -> list[Any]:
    """Seeds whose runs in both arms all recorded one and the same non-empty step-1 rollout hash:
    the record that the design paired them."""
    shared = []
    for seed, runs_a in arm_a.seed_runs.items():
        runs_b = arm_b.seed_runs.get(seed)
        if not runs_b:
            continue
        found = {rollout_hashes.get(name) for name in [*runs_a, *runs_b]}
        if len(found) == 1 and None not in found:
            shared.append(seed)
    return sorted(shared, key=str)


def power_report(
    comparisons: Sequence[PairComparison],
    detect: float | None = None,
    alpha: float = ALPHA,
    power: float = POWER,
) -> dict[str, Any]:
    """The `power` section of the compare document.

    `comparisons` are the pairs compare compares (units that differ only in the arm), each with
    its two units' seed means and the `test` compare chose for it (its paired seeds).
    """
    pairs = [
        {
            "arm_a": comparison.first.name,
            "arm_b": comparison.second.name,
            **pair_power(
                comparison.first.seed_means,
                comparison.second.seed_means,
                comparison.test["paired_seeds"],
                detect,
                alpha,
                power,
            ),
        }
        for comparison in comparisons
    ]
    return {"alpha": alpha, "power": power, "detect": detect, "sided": "two-sided", "pairs": pairs}
