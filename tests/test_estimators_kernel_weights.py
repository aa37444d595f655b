"""Neighbour weights that are zero in exact arithmetic stay zero (docs/estimators.md §5.6, §11).

A cosine similarity that is 0 by construction comes out of a float32 Gram matrix as ±6e-8 and
out of a float64 one as ±6e-17. Read as a weight, such a residue either becomes the whole
kernel baseline (its ratio to itself) or, below the 1e-12 floor on the weight sum, shrinks the
baseline towards 0; which one depends on the sign and size of the rounding. These cases are
built so that the exact answer is known by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers_estimators import literal_advantages, random_batch

from ccpo_cli.arms import load_arm
from ccpo_cli.estimators import RolloutBatch, compute_advantages

# The case hypothesis found (test_estimators_properties.py carries it as an explicit example).
FOUND_FLAGS = {
    "gate": "hard",
    "target": "return",
    "rho": "0",
    "backoff_task": "0",
    "jweight_c": "0",
    "prior_kappa": "0",
    "lk_fix": "",
    "lam_fix": "0.3",
    "phi": "hidden+ctx",
    "whiten": "0",
    "tau": "0.15",
    "wmode": "cos",
    "shrink": "eb",
    "std": "task",
    "step_norm": "none",
    "edge_w": "0",
    "adv_mode": "mean_std_norm",
    "min_traj": "1",
    "ctx_w": "1",
    "backoff_rho": "0.5",
}


def test_two_single_turn_trajectories_with_cosine_weights_and_a_fixed_lambda():
    """Two one-turn trajectories of one task, one won (Y = 10), one lost (Y = 0).

    Centring two rows makes their hidden parts exact opposites, and both rows have the same
    context block (turn 0, one observation), so with ctx_w = 1 the cosine of φ is exactly 0.
    Every weight is 0, each row keeps its nearest other-trajectory row: b^K = b^U = the other
    row's Y, and λ = 0.3 mixes two equal baselines. Residuals ∓10, plus A^EP = ∓0.70711.
    """
    batch = random_batch(0, n_tasks=1, trajectories=2, max_turns=1, n_obs=1)
    arm = load_arm("return-hard", FOUND_FLAGS)
    result = compute_advantages(batch, arm)
    np.testing.assert_array_equal(result.per_row["target"], [0.0, 10.0])
    np.testing.assert_allclose(result.per_row["kernel_baseline"], [10.0, 0.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(result.per_row["baseline"], [10.0, 0.0], rtol=0, atol=1e-12)
    expected = [-10.0 - 1 / np.sqrt(2), 10.0 + 1 / np.sqrt(2)]
    np.testing.assert_allclose(result.final, expected, rtol=0, atol=2e-5)
    np.testing.assert_allclose(literal_advantages(batch, arm), expected, rtol=0, atol=2e-5)


def opposed_rows(names=("a", "b", "c"), rewards=(0.0, 10.0, 0.0), seed=0) -> RolloutBatch:
    """Three one-turn trajectories of one task: the first row's features are −2× the others'
    offset from their common mean, the last two rows' features are identical."""
    v = np.random.default_rng(seed).standard_normal(12).astype(np.float32)
    return RolloutBatch.from_mapping(
        {
            "uid": ["g"] * 3,
            "traj_uid": list(names),
            "anchor_obs": ["s"] * 3,
            "step_index": [0, 0, 0],
            "env_reward": list(rewards),
            "is_action_valid": [True] * 3,
            "episode_reward": list(rewards),
            "response_mask": [[1]] * 3,
            "phi_feats": np.stack([2 * v, -v, -v]) + 5.0,
        }
    )


KERNEL_ONLY = {
    "rho": "1",
    "lam_fix": "1",
    "whiten": "0",
    "edge_w": "0",
    "step_norm": "none",
    "phi": "hidden+ctx",
    "ctx_w": "1",
}


@pytest.mark.parametrize("seed", range(6))
def test_a_row_orthogonal_to_every_neighbour_keeps_all_its_nearest_ones(seed):
    """Row a's φ is orthogonal to both others (cosine exactly 0), so it falls back to its
    nearest other-trajectory rows; b and c are equally near, so both count: b^K = (10 + 0)/2.
    b and c are identical (cosine 1) and see each other: b^K = Y of the other one."""
    batch = opposed_rows(seed=seed)
    arm = load_arm("return-hard", {**KERNEL_ONLY, "wmode": "cos"})
    result = compute_advantages(batch, arm)
    np.testing.assert_allclose(
        result.per_row["kernel_baseline"], [5.0, 0.0, 10.0], rtol=0, atol=1e-6
    )
    np.testing.assert_allclose(result.final, literal_advantages(batch, arm), rtol=0, atol=2e-5)


@pytest.mark.parametrize("wmode", ["hard", "cos"])
def test_renaming_trajectories_does_not_change_who_is_nearest(wmode):
    """With tau = 0.15 the hard window (0.15 × the median distance) holds none of a's
    neighbours either. Swapping the names of the two equally near trajectories must not decide
    which of them a is compared with: names are data, and sort order is not nearness."""
    arm = load_arm("return-hard", {**KERNEL_ONLY, "wmode": wmode, "tau": "0.15"})
    named = compute_advantages(opposed_rows(names=("a", "b", "c")), arm)
    renamed = compute_advantages(opposed_rows(names=("a", "c", "b")), arm)
    np.testing.assert_array_equal(named.final, renamed.final)
    assert named.per_row["kernel_baseline"][0] == pytest.approx(5.0, abs=1e-9)
