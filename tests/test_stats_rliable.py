"""Cross-check of ccpo's IQM bootstrap and probability of improvement against rliable.

rliable is a test-only dependency (the `crosscheck` extra, with pandas<3: rliable 1.2.0 does
not import under pandas 3)."""

from __future__ import annotations

import numpy as np
import pytest
from rliable import library as rly
from rliable import metrics as rly_metrics

from ccpo_cli import stats


@pytest.mark.slow
def test_iqm_and_its_stratified_bootstrap_interval_agree_with_rliable():
    scores = np.random.default_rng(2).uniform(0.55, 0.95, size=(5, 6))  # seeds x task types
    points, intervals = rly.get_interval_estimates(
        {"arm": scores},
        lambda matrix: np.array([rly_metrics.aggregate_iqm(matrix)]),
        reps=20_000,
        random_state=np.random.RandomState(0),
    )
    ours = stats.stratified_bootstrap_iqm(scores, reps=20_000, seed=0)
    assert ours["iqm"] == pytest.approx(float(points["arm"][0]), abs=1e-12)
    # Different random streams: the percentile ends agree to Monte Carlo error.
    assert ours["ci_low"] == pytest.approx(float(intervals["arm"][0, 0]), abs=4e-3)
    assert ours["ci_high"] == pytest.approx(float(intervals["arm"][1, 0]), abs=4e-3)


def test_probability_of_improvement_equals_rliable():
    rng = np.random.default_rng(9)
    x = np.round(rng.uniform(0.6, 0.9, size=(3, 6)), 2)  # rounding makes ties happen
    y = np.round(rng.uniform(0.6, 0.9, size=(4, 6)), 2)
    assert stats.probability_of_improvement(x, y) == pytest.approx(
        float(rly_metrics.probability_of_improvement(x, y)), abs=1e-12
    )
