"""The numbers behind an honest comparison (numpy/scipy only, no I/O).

Rates here are whatever unit the caller passes (the report uses percent), except the Wilson
interval, which works on proportions. See docs/statistics.md §1 for the
reasoning: a converged-window mean is the headline, a best point carries its selection bias,
one evaluation of N episodes has binomial noise, and seeds are compared with Welch's test,
IQM with a stratified bootstrap, and the probability of improvement.

One concern, kept in one file past 400 lines: the formulas docs/statistics.md §1 describes
(window statistics, the Wilson interval, Welch's and the paired test, IQM with its stratified
bootstrap, the probability of improvement, the trend test) share their quantile and tolerance
helpers, and the document points at this one module for all of them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ccpo_cli import distributions

# No scipy here: the distributions are ccpo_cli/distributions.py (math and numpy, checked
# against scipy by tests/test_distributions.py), so `ccpo compare` starts without its import,
# most of the command's start-up otherwise.

DEFAULT_CONFIDENCE = 0.95


def window_stats(steps: Sequence[int], values: Sequence[float], window_start: int) -> dict:
    """Mean, sample sd (ddof 1) and n of the values whose step is >= window_start.

    Returns {"mean", "sd", "n", "steps", "indices"}; mean is None with n = 0 and sd is None
    with n < 2. `indices` point into the inputs so callers can trace the rows used.
    """
    if len(steps) != len(values):
        raise ValueError("steps and values differ in length")
    indices = [i for i, step in enumerate(steps) if step >= window_start]
    chosen = np.asarray([values[i] for i in indices], dtype=float)
    n = len(indices)
    return {
        "mean": float(chosen.mean()) if n else None,
        "sd": float(chosen.std(ddof=1)) if n >= 2 else None,
        "n": n,
        "steps": [int(steps[i]) for i in indices],
        "indices": indices,
    }


@functools.lru_cache(maxsize=256)
def expected_max_of_normals(n: int) -> float:
    """E[max of n independent N(0, 1)] = ∫ x · n φ(x) Φ(x)^(n-1) dx (1.539 at n = 10).

    The upward bias, in standard deviations, of reporting the best of n noisy evaluations
    of the same underlying rate. 0 for n = 1.
    """
    if n < 1:
        raise ValueError("n must be at least 1")
    if n == 1:
        return 0.0
    # Composite Simpson over [-12, 12]: the integrand is smooth and its tails beyond are < 1e-30.
    x = np.linspace(-12.0, 12.0, 24_001)
    cdf = 0.5 * np.fromiter(map(math.erfc, (-x / math.sqrt(2.0)).tolist()), float, len(x))
    integrand = x * n * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi) * cdf ** (n - 1)
    weights = np.ones_like(x)
    weights[1:-1:2], weights[2:-1:2] = 4.0, 2.0
    return float((x[1] - x[0]) / 3.0 * np.dot(weights, integrand))


@functools.lru_cache(maxsize=64)
def t_quantile(probability: float, df: float) -> float:
    """The `probability` quantile of Student's t with `df` degrees of freedom."""
    return distributions.t_ppf(probability, df)


@functools.lru_cache(maxsize=16)
def _normal_quantile(probability: float) -> float:
    return distributions.normal_ppf(probability)


def wilson_interval(
    successes: float, trials: int, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[float, float]:
    """The Wilson score interval of a proportion (as fractions 0-1).

    `successes` may be fractional (e.g. the window mean times N) to ask "how precise is one
    evaluation of N episodes at this rate".
    """
    if trials <= 0:
        raise ValueError("trials must be positive")
    if not 0 <= successes <= trials:
        raise ValueError("successes must lie between 0 and trials")
    z = _normal_quantile(0.5 + confidence / 2)
    proportion = successes / trials
    denominator = 1 + z * z / trials
    centre = (proportion + z * z / (2 * trials)) / denominator
    half_width = (
        z
        * math.sqrt(proportion * (1 - proportion) / trials + z * z / (4 * trials * trials))
        / denominator
    )
    return float(max(0.0, centre - half_width)), float(min(1.0, centre + half_width))


# A test too thin to run: the keys `_t_statistics` gives, none of them known.
NO_T_STATISTICS: dict[str, float | None] = dict.fromkeys(("t", "df", "p", "ci_low", "ci_high"))


def _t_statistics(
    difference: float, standard_error: float, df: float, confidence: float
) -> dict[str, float]:
    """The t statistic of a difference, its two-sided p and its t interval at `confidence`: the
    one formula Welch's test and the paired test share (they differ in the error and the df)."""
    t = difference / standard_error
    half = distributions.t_ppf(0.5 + confidence / 2, df) * standard_error
    return {
        "t": float(t),
        "df": float(df),
        "p": float(min(1.0, 2.0 * distributions.t_sf(abs(t), df))),
        "ci_low": float(difference - half),
        "ci_high": float(difference + half),
    }


def welch_t_test(
    a: Sequence[float], b: Sequence[float], confidence: float = DEFAULT_CONFIDENCE
) -> dict:
    """Welch's unequal-variance t-test of mean(a) - mean(b).

    Returns {"difference", "t", "df", "p", "ci_low", "ci_high", "n_a", "n_b"}; needs at
    least two values on each side (else the statistics are None).
    """
    first = np.asarray(a, dtype=float)
    second = np.asarray(b, dtype=float)
    result: dict[str, Any] = {
        "difference": float(first.mean() - second.mean()) if len(first) and len(second) else None,
        **NO_T_STATISTICS,
        "n_a": int(len(first)),
        "n_b": int(len(second)),
    }
    if len(first) < 2 or len(second) < 2:
        return result
    if no_spread(first) and no_spread(second):
        return result  # no spread at all (rounding noise is none): the t statistic is undefined
    var_a, var_b = first.var(ddof=1) / len(first), second.var(ddof=1) / len(second)
    df = (var_a + var_b) ** 2 / (var_a**2 / (len(first) - 1) + var_b**2 / (len(second) - 1))
    result.update(_t_statistics(result["difference"], math.sqrt(var_a + var_b), df, confidence))
    return result


def paired_t_test(differences: Sequence[float], confidence: float = DEFAULT_CONFIDENCE) -> dict:
    """The paired (one-sample) t-test of per-seed differences a - b.

    Returns {"difference", "t", "df", "p", "ci_low", "ci_high", "n", "sd"}; needs two differences
    that vary (else the statistics are None).
    """
    values = np.asarray(differences, dtype=float)
    n = len(values)
    result: dict = {
        "difference": float(values.mean()) if n else None,
        **NO_T_STATISTICS,
        "n": n,
        "sd": None,
    }
    if n < 2:
        return result
    result["sd"] = 0.0 if no_spread(values) else float(values.std(ddof=1))
    if not result["sd"]:
        return result  # every seed moved by the same amount: the t statistic is undefined
    result.update(
        _t_statistics(result["difference"], result["sd"] / math.sqrt(n), n - 1, confidence)
    )
    return result


# The two tests of two arms, by the names the compare document, the power section and the
# testbed print.
PAIRED_TEST = "paired t"
WELCH_TEST = "Welch t"
# The fewest seeds a paired test is run on; with fewer shared seeds the arms are compared unpaired.
MIN_PAIRED_SEEDS = 2


def paired_seeds(
    seed_means_a: Mapping[Any, float],
    seed_means_b: Mapping[Any, float],
    paired_by_design: Iterable[Any] | None = None,
) -> list[Any]:
    """The seeds on which a and b are paired: seeds both ran, and, when `paired_by_design` is
    given, only those the design recorded as paired (compare: runs whose first rollouts match)."""
    allowed = None if paired_by_design is None else set(paired_by_design)
    return sorted(
        (
            seed
            for seed in seed_means_a
            if seed in seed_means_b and (allowed is None or seed in allowed)
        ),
        key=str,
    )


def two_arm_test(
    seed_means_a: Mapping[Any, float],
    seed_means_b: Mapping[Any, float],
    paired_by_design: Iterable[Any] | None = None,
    confidence: float = DEFAULT_CONFIDENCE,
) -> dict:
    """The one decision of how two arms are tested (docs/statistics.md, "Two arms").

    When the arms share at least MIN_PAIRED_SEEDS seeds (`paired_seeds`), the design paired them
    (a matrix trains each arm of a seed from the same start on the same games), so the test is the
    paired t over those shared seeds and seeds outside them are listed as left out; otherwise it is
    Welch's t over every seed. Returns the test's statistics with "test" (PAIRED_TEST or
    WELCH_TEST), "paired_seeds", "seeds_left_out" and "basis", the sentence that says why.
    """
    shared = paired_seeds(seed_means_a, seed_means_b, paired_by_design)
    if len(shared) >= MIN_PAIRED_SEEDS:
        result = paired_t_test(
            [seed_means_a[seed] - seed_means_b[seed] for seed in shared], confidence
        )
        left_out = sorted({*seed_means_a, *seed_means_b} - set(shared), key=str)
        return dict(
            result,
            test=PAIRED_TEST,
            paired_seeds=shared,
            seeds_left_out=left_out,
            basis=f"paired t over the {len(shared)} seeds both arms ran"
            + (
                f" ({len(left_out)} unpaired seed{'s' if len(left_out) != 1 else ''} left out)"
                if left_out
                else ""
            ),
        )
    result = welch_t_test(list(seed_means_a.values()), list(seed_means_b.values()), confidence)
    return dict(
        result,
        test=WELCH_TEST,
        paired_seeds=[],
        seeds_left_out=[],
        basis=f"Welch t over every seed: the arms share {len(shared) or 'no'} paired seed"
        f"{'s' if len(shared) != 1 else ''}, fewer than {MIN_PAIRED_SEEDS}",
    )


# Values closer than this, relative to their size, are one value: window means computed along
# two paths differ by float rounding (1e-13), which is neither spread nor an improvement.
RELATIVE_TIE = 1e-9


def _tolerance(*arrays: np.ndarray) -> float:
    largest = max((float(np.max(np.abs(array))) for array in arrays if array.size), default=0.0)
    return RELATIVE_TIE * max(1.0, largest)


def no_spread(values: Sequence[float] | np.ndarray) -> bool:
    """Whether values are all one value, up to float rounding (RELATIVE_TIE)."""
    array = np.asarray(values, dtype=float)
    return bool(array.size == 0 or float(np.ptp(array)) <= _tolerance(array))


def iqm(scores: np.ndarray | Sequence) -> float:
    """Interquartile mean: the mean of the middle 50 % of all scores (runs × tasks pooled)."""
    flat = np.asarray(scores, dtype=float).ravel()
    return float(distributions.trim_mean(flat, 0.25))


def stratified_bootstrap_iqm(
    scores: np.ndarray | Sequence,
    *,
    reps: int = 2000,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = 0,
) -> dict:
    """IQM of a (runs × tasks) score matrix with a percentile stratified-bootstrap CI.

    Each replicate resamples runs with replacement independently within every task (column),
    as rliable does. Seeded, so the interval is reproducible. With few runs the interval
    under-covers; callers should show the per-run values beside it.
    Returns {"iqm", "ci_low", "ci_high", "reps", "seed", "n_runs", "n_tasks"}.
    """
    matrix = np.asarray(scores, dtype=float)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    n_runs, n_tasks = matrix.shape
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_runs, size=(reps, n_runs, n_tasks))
    resampled = matrix[picks, np.arange(n_tasks)[None, None, :]].reshape(reps, n_runs * n_tasks)
    replicates = distributions.trim_mean(resampled, 0.25, axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(replicates, [tail, 100 - tail])
    return {
        "iqm": iqm(matrix),
        "ci_low": float(low),
        "ci_high": float(high),
        "reps": int(reps),
        "seed": int(seed),
        "n_runs": int(n_runs),
        "n_tasks": int(n_tasks),
    }


def probability_of_improvement(x: np.ndarray | Sequence, y: np.ndarray | Sequence) -> float:
    """P(X > Y): for each task, the Mann-Whitney U of runs of x against runs of y divided by
    n_x · n_y (ties, equal up to float rounding, count one half), averaged over tasks. Inputs are (runs × tasks) or 1-D."""
    first = np.asarray(x, dtype=float)
    second = np.asarray(y, dtype=float)
    if first.ndim == 1:
        first = first[:, None]
    if second.ndim == 1:
        second = second[:, None]
    if first.shape[1] != second.shape[1]:
        raise ValueError("x and y must have the same tasks (columns)")
    # Exact ties: values equal up to float rounding tie (count one half), never decided by noise.
    gap = first[:, None, :] - second[None, :, :]
    tolerance = _tolerance(first, second)
    greater = (gap > tolerance).mean(axis=(0, 1))
    ties = (np.abs(gap) <= tolerance).mean(axis=(0, 1))
    return float(np.mean(greater + 0.5 * ties))


def mean_sd_n(values: Sequence[float]) -> dict:
    """{"mean", "sd" (ddof 1, None below 2), "n"} of a list (mean None when empty)."""
    # Plain Python: this runs once per run and task type, on lists of about ten numbers.
    numbers = [float(value) for value in values]
    n = len(numbers)
    mean = math.fsum(numbers) / n if n else None
    sd = (
        math.sqrt(math.fsum((x - mean) ** 2 for x in numbers) / (n - 1))
        if mean is not None and n >= 2  # n >= 2 gives a mean; the check is for mypy
        else None
    )
    return {"mean": mean, "sd": sd, "n": n}


# Below five evaluations a line through the window is a guess: three points can put the slope's
# interval anywhere (-333 to +528 points per 100 steps was seen), or give it zero width.
MIN_TREND_POINTS = 5
TOO_FEW_FOR_TREND = "too few evaluations to judge convergence"
# A converged window's slope interval covers 0 and is narrow: its width times the window's span
# (the spread of changes over the window it allows) is at most this, in the values' units
# (percent points for the report). An interval of -51 to +153 points per 100 steps over 20 steps
# (41 points) covers 0 because it is wide, which shows nothing settled.
CONVERGED_MAX_WIDTH = 15.0


@dataclass(frozen=True, kw_only=True)
class Trend:
    """The trend test of a window (`trend_test`): the OLS slope of its values against its steps,
    the slope's t interval, and the verdict read from it. The fields are in the order the compare
    document writes them (`to_document`); every statistic is None when no line was fitted, and
    `note` then says why."""

    slope: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    p: float | None = None
    n: int
    change: float | None = None  # slope x the window's span
    residual_sd: float | None = None  # the noise around the fitted line (ddof 2)
    converged: bool | None = None
    direction: str | None = None  # "rising", "falling", "flat" or "uncertain"
    note: str | None = None
    confidence: float

    def to_document(self) -> dict[str, Any]:
        return {item.name: getattr(self, item.name) for item in fields(self)}


def trend_test(
    steps: Sequence[float], values: Sequence[float], confidence: float = DEFAULT_CONFIDENCE
) -> Trend:
    """Ordinary least-squares slope of values against steps, with its t interval (n - 2 df).

    A window whose slope interval excludes 0 still rises or falls beyond its own noise: it is
    not converged. One whose interval covers 0 is converged only when the interval, over the
    window's span, is at most CONVERGED_MAX_WIDTH wide; a wider one is too uncertain to say
    (`converged` None, `note`). `residual_sd` is the sd of the values around the fitted line (ddof 2), the
    noise of the window with the trend taken out. Below MIN_TREND_POINTS points (or with every
    point at one step, or every value equal: the trend is then undefined, as scipy's linregress
    gives NaN) there is no interval, and `converged` is None with the reason in `note`.
    """
    x = np.asarray(steps, dtype=float)
    y = np.asarray(values, dtype=float)
    unfitted = _unfitted_trend(x, y)
    if unfitted is not None:
        return Trend(n=len(x), confidence=confidence, note=unfitted)
    fit = distributions.least_squares_line(x, y)
    residuals = y - (fit["intercept"] + fit["slope"] * x)
    # A series lying exactly on a line has no residual noise: the interval is the slope itself.
    stderr = fit["stderr"] if math.isfinite(fit["stderr"]) else 0.0
    half = float(distributions.t_ppf(0.5 + confidence / 2, len(x) - 2) * stderr)
    low, high = float(fit["slope"] - half), float(fit["slope"] + half)
    covers_zero = bool(low <= 0.0 <= high)
    allowed = (high - low) * float(np.ptp(x))
    converged: bool | None = covers_zero and allowed <= CONVERGED_MAX_WIDTH
    note = None
    if covers_zero and not converged:
        converged = None  # neither rising nor settled: too uncertain to say
        note = (
            f"the slope's interval spans {allowed:.1f} points of change over the window, wider than "
            f"the {CONVERGED_MAX_WIDTH:g} a converged window may span"
        )
    return Trend(
        slope=fit["slope"],
        ci_low=low,
        ci_high=high,
        p=fit["pvalue"] if math.isfinite(fit["pvalue"]) else None,
        n=len(x),
        change=float(fit["slope"] * np.ptp(x)),
        residual_sd=float(np.sqrt(np.sum(residuals**2) / (len(x) - 2))),
        converged=converged,
        direction="flat"
        if converged
        else ("uncertain" if covers_zero else "rising" if fit["slope"] > 0 else "falling"),
        note=note,
        confidence=confidence,
    )


def _unfitted_trend(x: np.ndarray, y: np.ndarray) -> str | None:
    """Why no line is fitted through these points, or None when one is."""
    if len(x) < MIN_TREND_POINTS:
        return (
            f"{TOO_FEW_FOR_TREND} ({len(x)} evaluation{'s' if len(x) != 1 else ''}; "
            f"a trend needs at least {MIN_TREND_POINTS})"
        )
    if np.ptp(x) == 0:
        return "every evaluation is at one step: no trend can be fitted"
    if np.ptp(y) == 0:
        # scipy's linregress gives NaN here: a constant series has no slope interval to judge, and
        # a zero-width interval around 0 would call it converged on no evidence.
        return (
            f"every evaluation in the window is {float(y[0]):g}: with no variation the trend is "
            "undefined"
        )
    return None
