"""ccpo_cli.stats against independent references (scipy, direct simulation, published numbers)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ccpo_cli import stats


@pytest.mark.parametrize(
    "n, expected",
    [
        (2, 0.564),
        (3, 0.846),
        (5, 1.163),
        (8, 1.424),
        (10, 1.539),
        (16, 1.766),
        (20, 1.868),
        (30, 2.043),
        (50, 2.249),
        (100, 2.508),
    ],
)
def test_expected_max_of_normals_matches_the_published_table(n, expected):
    # The research table rounds to 3 decimals (its n = 20 entry, 1.868, is 1.86748 rounded up).

    assert stats.expected_max_of_normals(n) == pytest.approx(expected, abs=1e-3)


def test_expected_max_of_normals_exact_values_and_simulation():
    # n = 2 has the closed form 1/sqrt(pi); n = 3 has 3/(2 sqrt(pi)).
    assert stats.expected_max_of_normals(2) == pytest.approx(1 / np.sqrt(np.pi), abs=1e-10)
    assert stats.expected_max_of_normals(3) == pytest.approx(1.5 / np.sqrt(np.pi), abs=1e-10)
    assert stats.expected_max_of_normals(1) == 0.0
    draws = np.random.default_rng(0).normal(size=(200_000, 10)).max(axis=1)
    assert stats.expected_max_of_normals(10) == pytest.approx(draws.mean(), abs=0.01)
    with pytest.raises(ValueError):
        stats.expected_max_of_normals(0)


@pytest.mark.parametrize(
    "successes, trials", [(100, 128), (115, 128), (128, 128), (0, 20), (16, 20), (9, 12)]
)
def test_wilson_interval_matches_scipy(successes, trials):
    reference = scipy_stats.binomtest(successes, trials).proportion_ci(0.95, method="wilson")
    low, high = stats.wilson_interval(successes, trials)
    assert low == pytest.approx(reference.low, abs=1e-12)
    assert high == pytest.approx(reference.high, abs=1e-12)


def test_wilson_interval_of_the_research_examples():
    low, high = stats.wilson_interval(100, 128)
    assert (round(low, 3), round(high, 3)) == (0.702, 0.844)
    with pytest.raises(ValueError):
        stats.wilson_interval(5, 0)
    with pytest.raises(ValueError):
        stats.wilson_interval(6, 5)


def test_window_stats_selects_steps_from_the_window_start():
    steps = [0, 35, 70, 75, 80]
    values = [10.0, 50.0, 80.0, 84.0, 88.0]
    window = stats.window_stats(steps, values, 70)
    assert window["steps"] == [70, 75, 80]
    assert window["indices"] == [2, 3, 4]
    assert window["mean"] == pytest.approx(84.0)
    assert window["sd"] == pytest.approx(4.0)  # ddof 1
    assert window["n"] == 3
    empty = stats.window_stats(steps, values, 500)
    assert empty["n"] == 0 and empty["mean"] is None and empty["sd"] is None
    single = stats.window_stats(steps, values, 80)
    assert single["mean"] == 88.0 and single["sd"] is None


def test_welch_reproduces_the_three_seed_example():
    result = stats.welch_t_test([0.80, 0.83, 0.78], [0.76, 0.79, 0.74])
    assert result["t"] == pytest.approx(1.95, abs=0.01)
    assert result["df"] == pytest.approx(4.0, abs=0.05)
    assert result["p"] == pytest.approx(0.12, abs=0.01)
    assert (round(result["ci_low"], 3), round(result["ci_high"], 3)) == (-0.017, 0.097)
    assert result["difference"] == pytest.approx(0.04)


def test_welch_needs_two_values_per_side():
    result = stats.welch_t_test([80.0], [70.0, 75.0])
    assert result["t"] is None and result["p"] is None
    assert result["difference"] == pytest.approx(7.5)


def test_iqm_is_the_mean_of_the_middle_half():
    values = np.arange(1, 9, dtype=float)  # middle half: 3, 4, 5, 6
    assert stats.iqm(values) == pytest.approx(4.5)
    assert stats.iqm(values.reshape(4, 2)) == pytest.approx(4.5)


def test_stratified_bootstrap_is_seeded_and_brackets_the_iqm():
    scores = np.random.default_rng(1).uniform(60, 95, size=(5, 6))
    first = stats.stratified_bootstrap_iqm(scores, reps=1000, seed=3)
    again = stats.stratified_bootstrap_iqm(scores, reps=1000, seed=3)
    other = stats.stratified_bootstrap_iqm(scores, reps=1000, seed=4)
    assert first == again
    assert first["ci_low"] != other["ci_low"] or first["ci_high"] != other["ci_high"]
    assert first["ci_low"] <= first["iqm"] <= first["ci_high"]
    assert (first["n_runs"], first["n_tasks"]) == (5, 6)


def test_stratified_bootstrap_resamples_runs_within_each_task():
    # Each task column holds one constant value: any within-task resample reproduces it, so
    # the interval collapses; resampling whole rows across tasks would not matter here either,
    # but mixing values across columns would widen it.
    scores = np.tile(np.array([[10.0, 20.0, 30.0, 40.0]]), (4, 1))
    result = stats.stratified_bootstrap_iqm(scores, reps=200, seed=0)
    assert result["ci_low"] == pytest.approx(result["iqm"]) == pytest.approx(result["ci_high"])


def test_bootstrap_interval_matches_a_direct_loop():
    scores = np.random.default_rng(5).uniform(0, 1, size=(4, 3))
    result = stats.stratified_bootstrap_iqm(scores, reps=300, seed=11)
    rng = np.random.default_rng(11)
    picks = rng.integers(0, 4, size=(300, 4, 3))
    replicates = []
    for rep in range(300):
        resampled = np.stack([scores[picks[rep, :, task], task] for task in range(3)], axis=1)
        replicates.append(scipy_stats.trim_mean(resampled.ravel(), 0.25))
    assert result["ci_low"] == pytest.approx(np.percentile(replicates, 2.5))
    assert result["ci_high"] == pytest.approx(np.percentile(replicates, 97.5))


def test_probability_of_improvement_counts_pairs_and_ties():
    assert stats.probability_of_improvement([3.0, 4.0], [1.0, 2.0]) == 1.0
    assert stats.probability_of_improvement([1.0, 2.0], [3.0, 4.0]) == 0.0
    assert stats.probability_of_improvement([2.0], [2.0]) == 0.5
    # Two tasks: task 0 all better (1.0), task 1 one of two pairs better (0.5) -> 0.75.
    x = np.array([[5.0, 1.0], [6.0, 3.0]])
    y = np.array([[4.0, 2.0]])
    assert stats.probability_of_improvement(x, y) == pytest.approx(0.75)
    u = scipy_stats.mannwhitneyu([0.8, 0.83, 0.78], [0.76, 0.79, 0.74]).statistic
    assert stats.probability_of_improvement([0.8, 0.83, 0.78], [0.76, 0.79, 0.74]) == pytest.approx(
        u / 9
    )
