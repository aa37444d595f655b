"""The normal, Student's t and noncentral t distributions, the trimmed mean and a least-squares
line, in math and numpy, so that `ccpo compare` and its tables start without importing scipy (most
of their start-up time otherwise; docs/architecture.md §5). tests/test_distributions.py checks
every function against scipy.

The t distribution's tail is the regularized incomplete beta function, evaluated by its
continued fraction (modified Lentz); its quantile is found by bisection on that tail. The
noncentral t tail (the power of a t-test, report/power.py) is the normal tail averaged over the
chi-squared denominator, integrated by the trapezoid rule on a log scale.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

_SQRT2 = math.sqrt(2.0)


def normal_pdf(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / _SQRT2)


# Acklam's rational approximation of the normal quantile: the central region's numerator (A) and
# denominator (B, its constant term 1) in r = q², and the lower tail's (C, D) in q = sqrt(-2 ln p),
# highest power first.
_ACKLAM_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_ACKLAM_B = (
    -5.447609879822406e01,
    1.615858368580409e02,
    -1.556989798598866e02,
    6.680131188771972e01,
    -1.328068155288572e01,
    1.0,
)
_ACKLAM_C = (
    -7.784894002430293e-03,
    -3.223964580411365e-01,
    -2.400758277161838e00,
    -2.549732539343734e00,
    4.374664141464968e00,
    2.938163982698783e00,
)
_ACKLAM_D = (
    7.784695709041462e-03,
    3.224671290700398e-01,
    2.445134137142996e00,
    3.754408661907416e00,
    1.0,
)
# Below this probability the lower tail's approximation holds, above it the central one's.
_ACKLAM_LOW = 0.02425


def _horner(coefficients: tuple[float, ...], x: float) -> float:
    """The polynomial with these coefficients (highest power first) at x."""
    value = 0.0
    for coefficient in coefficients:
        value = value * x + coefficient
    return value


def normal_ppf(probability: float) -> float:
    """The standard normal quantile (Acklam's rational approximation, then two Newton steps)."""
    if not 0.0 < probability < 1.0:
        raise ValueError("probability must lie strictly between 0 and 1")
    if probability > 0.5:
        return -normal_ppf(1.0 - probability)  # the lower tail keeps the precision Newton needs
    if probability < _ACKLAM_LOW:
        q = math.sqrt(-2 * math.log(probability))
        x = _horner(_ACKLAM_C, q) / _horner(_ACKLAM_D, q)
    else:
        q = probability - 0.5
        x = _horner(_ACKLAM_A, q * q) * q / _horner(_ACKLAM_B, q * q)
    for _ in range(2):
        x -= (normal_cdf(x) - probability) / max(normal_pdf(x), 1e-300)
    return x


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, epsilon = 1e-300, 1e-15
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 10_000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < epsilon:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with `df` degrees of freedom."""
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * regularized_beta(df / 2.0, 0.5, df / (df + t * t))
    return tail if t >= 0 else 1.0 - tail


def t_cdf(t: float, df: float) -> float:
    return 1.0 - t_sf(t, df)


@functools.lru_cache(maxsize=4096)
def t_ppf(probability: float, df: float) -> float:
    """The `probability` quantile of Student's t (bisection on the tail to 1e-12). Cached: a
    power search asks for the same critical value at every step of its bisection."""
    if not 0.0 < probability < 1.0:
        raise ValueError("probability must lie strictly between 0 and 1")
    if probability == 0.5:
        return 0.0
    upper_tail = 1.0 - probability if probability > 0.5 else probability
    low, high = 0.0, 1.0
    while t_sf(high, df) > upper_tail:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if t_sf(middle, df) > upper_tail:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    value = 0.5 * (low + high)
    return value if probability > 0.5 else -value


def f_cdf(x: float, df1: float, df2: float) -> float:
    """P(F <= x) for Fisher's F with (df1, df2) degrees of freedom."""
    if x <= 0.0:
        return 0.0
    return regularized_beta(df1 / 2.0, df2 / 2.0, df1 * x / (df1 * x + df2))


def regularized_gamma(a: float, x: float) -> float:
    """P(a, x), the regularized lower incomplete gamma: its series below a + 1, its continued
    fraction above (Lentz), each to 1e-14."""
    if x <= 0.0:
        return 0.0
    log_front = a * math.log(x) - x - math.lgamma(a)
    if x < a + 1.0:
        term = total = 1.0 / a
        for n in range(1, 1000):
            term *= x / (a + n)
            total += term
            if abs(term) < abs(total) * 1e-14:
                break
        return math.exp(log_front) * total
    tiny = 1e-300
    b, c, d = x + 1.0 - a, 1.0 / tiny, 1.0 / (x + 1.0 - a)
    h = d
    for n in range(1, 1000):
        an = -n * (n - a)
        b += 2.0
        d = an * d + b
        d = d if abs(d) > tiny else tiny
        c = b + an / c
        c = c if abs(c) > tiny else tiny
        d = 1.0 / d
        h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return 1.0 - math.exp(log_front) * h


def chi2_cdf(x: float, df: float) -> float:
    return regularized_gamma(df / 2.0, x / 2.0)


def _increasing_ppf(cdf, probability: float) -> float:
    """The `probability` quantile of a distribution on (0, inf) with this CDF (bisection)."""
    if not 0.0 < probability < 1.0:
        raise ValueError("probability must lie strictly between 0 and 1")
    low, high = 0.0, 1.0
    while cdf(high) < probability:
        low, high = high, high * 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        if cdf(middle) < probability:
            low = middle
        else:
            high = middle
        if high - low < 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


def chi2_ppf(probability: float, df: float) -> float:
    """The `probability` quantile of the chi-squared distribution with `df` degrees of freedom."""
    return _increasing_ppf(lambda x: chi2_cdf(x, df), probability)


def f_ppf(probability: float, df1: float, df2: float) -> float:
    """The `probability` quantile of Fisher's F with (df1, df2) degrees of freedom."""
    return _increasing_ppf(lambda x: f_cdf(x, df1, df2), probability)


@functools.lru_cache(maxsize=1024)
def _normal_log_scale_law(df: float) -> tuple[float, float]:
    """Points y and weights w such that sum(w * f(exp(y))) = E[f(S)] for S = sqrt(V / df),
    V ~ chi-squared(df).

    In y = log S the density is proportional to exp(df * (y - (exp(2y) - 1) / 2)): smooth, with
    its peak at 0, a width of 1 / sqrt(2 df) and tails that fall at least exponentially, which
    is where the trapezoid rule converges fastest. The grid spans the points where the log
    density has fallen by 60 (a mass below 1e-25 is left out) and the weights are normalised on
    the grid itself, so no gamma function enters.
    """

    def log_density(y: float) -> float:
        return df * (y - math.expm1(2.0 * y) / 2.0)

    def edge(outside: float) -> float:
        inside = 0.0
        while log_density(outside) > -60.0:
            outside *= 2.0
        for _ in range(80):
            middle = 0.5 * (inside + outside)
            inside, outside = (middle, outside) if log_density(middle) > -60.0 else (inside, middle)
        return outside

    return edge(-1.0), edge(1.0)


def noncentral_t_sf(t: float, df: float, noncentrality: float) -> float:
    """P(T > t) for T = (Z + noncentrality) / sqrt(V / df), Z standard normal, V ~ chi-squared(df).

    Given S = sqrt(V / df) = s, P(T > t) = P(Z > t s - noncentrality) = Phi(noncentrality - t s),
    so the tail is that normal cdf averaged over S's law (see `_normal_log_scale_law`). The step
    resolves both the density's width and the normal cdf's turn, which lies where t s is within a
    few units of the noncentrality and is there about 1 / (|noncentrality| + 1) wide in log s;
    scipy's `nct.sf` agrees to 1e-12 absolute (tested).
    """
    low, high = _normal_log_scale_law(df)
    step = 0.1 / max(math.sqrt(2.0 * df), abs(noncentrality) + 1.0)
    count = int(math.ceil((high - low) / step)) + 1
    scales, weights, total = _trapezoid_grid(df, low, high, count)
    arguments = (noncentrality - t * scales) / _SQRT2
    tails = 0.5 * np.fromiter(map(math.erfc, (-arguments).tolist()), float, count)
    return float(np.dot(weights, tails) / total)


@functools.lru_cache(maxsize=256)
def _trapezoid_grid(df: float, low: float, high: float, count: int) -> tuple:
    """The grid's scales s = exp(y), its trapezoid weights and their sum. Cached: a power search
    asks for the tail at many noncentralities on the same grid (read-only arrays)."""
    y = np.linspace(low, high, count)
    weights = np.exp(df * (y - np.expm1(2.0 * y) / 2.0))
    weights[0] *= 0.5
    weights[-1] *= 0.5
    scales = np.exp(y)
    scales.flags.writeable = weights.flags.writeable = False
    return scales, weights, weights.sum()


def trim_mean(values: np.ndarray, proportion: float, axis: int | None = None) -> np.ndarray | float:
    """The mean after cutting `proportion` of the values off each end (as scipy.stats.trim_mean)."""
    array = np.asarray(values, dtype=float)
    if axis is None:
        array, axis = array.ravel(), 0
    n = array.shape[axis]
    cut = int(proportion * n)
    kept = np.take(np.sort(array, axis=axis), range(cut, n - cut), axis=axis)
    result = kept.mean(axis=axis)
    return float(result) if np.ndim(result) == 0 else result


def least_squares_line(x: ArrayLike, y: ArrayLike) -> dict[str, float]:
    """Slope, intercept, the slope's standard error and its two-sided p (n - 2 df), as
    scipy.stats.linregress gives them; needs at least three points and x not all equal."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(xs)
    x_mean, y_mean = xs.mean(), ys.mean()
    sxx = float(np.sum((xs - x_mean) ** 2))
    slope = float(np.sum((xs - x_mean) * (ys - y_mean)) / sxx)
    intercept = float(y_mean - slope * x_mean)
    residual = float(np.sum((ys - intercept - slope * xs) ** 2))
    stderr = math.sqrt(residual / (n - 2) / sxx)
    if stderr == 0.0:
        p = 0.0 if slope != 0.0 else 1.0
    else:
        p = 2.0 * t_sf(abs(slope / stderr), n - 2)
    return {"slope": slope, "intercept": intercept, "stderr": stderr, "pvalue": p}


__all__ = [
    "least_squares_line",
    "noncentral_t_sf",
    "normal_cdf",
    "normal_pdf",
    "normal_ppf",
    "regularized_beta",
    "t_cdf",
    "t_ppf",
    "t_sf",
    "trim_mean",
]
