"""Float rounding is neither spread nor an improvement, power is the noncentral t's,
and a slope interval that covers 0 only because it is wide is not "converged".

Asked for in issue 29.
"""

from __future__ import annotations

from ccpo_cli import stats
from ccpo_cli.report.power import pair_power, welch_mdd, welch_power


def test_identical_paired_seeds_up_to_rounding_have_undefined_power():
    a = {0: 66.6, 1: 70.2, 2: 61.0}
    b = {seed: value - 4.0 + (1e-13 if seed == 1 else 0.0) for seed, value in a.items()}
    result = pair_power(a, b, paired_seeds=[0, 1, 2])
    assert result["mdd"] is None and result["p"] is None and "undefined" in result["note"]


def test_rounding_noise_is_no_spread_in_welch():
    result = stats.welch_t_test([50.0, 50.0 + 1e-13], [48.0, 48.0 - 1e-13])
    assert result["p"] is None and result["t"] is None


def test_ties_up_to_float_rounding_count_one_half():
    one_third = 100 / 3
    other_path = sum([100 / 9] * 3)  # 33.33333333333333 vs 33.333333333333336
    assert one_third != other_path
    assert stats.probability_of_improvement([one_third], [other_path]) == 0.5
    assert stats.probability_of_improvement([one_third, 40.0], [other_path, 40.0]) == 0.5


def test_welch_mdd_has_the_power_it_claims_at_two_to_four_seeds():
    for n in (2, 3, 4):
        mdd = welch_mdd(5.0, n, 7.0, n)
        assert abs(welch_power(mdd, 5.0, n, 7.0, n) - 0.80) < 1e-6


def test_a_wide_slope_interval_covering_zero_is_not_converged():
    steps = [70, 80, 90, 100, 110]
    noisy = [60.0, 85.0, 55.0, 90.0, 62.0]
    trend = stats.trend_test(steps, noisy)
    assert trend.ci_low < 0 < trend.ci_high
    assert trend.converged is None and "wider than" in trend.note
    flat = stats.trend_test(steps, [80.0, 80.5, 79.5, 80.2, 79.9])
    assert flat.converged is True
    rising = stats.trend_test(steps, [60.0, 65.0, 70.0, 75.0, 80.5])
    assert rising.converged is False and rising.direction == "rising"
