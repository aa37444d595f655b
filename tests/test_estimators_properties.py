"""Properties of the estimators: order-proof, padding-proof, the edge cases of docs/estimators.md
§9, and agreement with a literal loop-by-loop re-statement of docs/estimators.md across random
batches and flag settings."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_estimators import literal_advantages, random_batch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ccpo_cli.arms import load_arm
from ccpo_cli.estimators import RolloutBatch, compute_advantages

ARMS = ["grpo", "gigpo", "return-hard", "return-hard-fbjw", "global-successor"]
FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def with_changes(batch: RolloutBatch, **changes) -> RolloutBatch:
    mapping = batch.as_mapping()
    mapping.update(changes)
    return RolloutBatch.from_mapping(mapping)


@FAST
@given(seed=st.integers(0, 10_000), arm=st.sampled_from(ARMS), data=st.data())
def test_permuting_rows_permutes_the_advantages(seed, arm, data):
    batch = random_batch(seed)
    permutation = np.array(data.draw(st.permutations(list(range(batch.n_rows)))))
    straight = compute_advantages(batch, load_arm(arm))
    shuffled = compute_advantages(batch.take(permutation), load_arm(arm))
    np.testing.assert_array_equal(shuffled.advantages, straight.advantages[permutation])
    for key, values in straight.per_row.items():
        np.testing.assert_array_equal(shuffled.per_row[key], values[permutation], err_msg=key)


@FAST
@given(seed=st.integers(0, 10_000), arm=st.sampled_from(ARMS), pads=st.integers(1, 6))
def test_padding_rows_are_inert_and_get_zero(seed, arm, pads):
    padded = random_batch(seed, pad_rows=pads)
    real = np.flatnonzero(~padded.is_pad)
    result = compute_advantages(padded, load_arm(arm), padding="inert")
    clean = compute_advantages(padded.take(real), load_arm(arm), padding="inert")
    np.testing.assert_array_equal(result.advantages[real], clean.advantages)
    assert np.all(result.advantages[padded.is_pad] == 0)
    assert np.all(result.final[padded.is_pad] == 0)
    assert not result.live[padded.is_pad].any()


FLAG_CHOICES = {
    "gate": ["hard", "global"],
    "target": ["return", "nextnode"],
    "rho": ["0", "0.59", "1"],
    "backoff_task": ["0", "1"],
    "jweight_c": ["0", "1"],
    "prior_kappa": ["0", "2"],
    "lk_fix": ["", "0.5"],
    "lam_fix": ["", "0.3"],
    "phi": ["hidden", "hidden+ctx"],
    "whiten": ["0", "3"],
    "tau": ["0.15", "1"],
    "wmode": ["soft", "hard", "cos"],
    "shrink": ["eb", "mse", "eb_pooled", "eb_hier"],
    "std": ["task", "local"],
    "step_norm": ["mode", "std", "none"],
    "edge_w": ["0", "1"],
    "adv_mode": ["mean_std_norm", "mean_norm"],
    "min_traj": ["1", "2", "3"],
    "ctx_w": ["0", "1", "2"],
    "backoff_rho": ["0.5", "1"],
}


# Found by hypothesis: two one-turn trajectories whose φ are exactly orthogonal, so the cosine
# weight is rounding around 0 (test_estimators_kernel_weights.py works it out by hand).
FOUND_ORTHOGONAL = {
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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 5), st.integers(1, 8), st.integers(1, 6)),
    flags=st.fixed_dictionaries({k: st.sampled_from(v) for k, v in FLAG_CHOICES.items()}),
)
@example(seed=0, shape=(1, 2, 1, 1), flags=FOUND_ORTHOGONAL)
def test_matches_the_literal_spec_for_any_ccpo_flags(seed, shape, flags):
    n_tasks, trajectories, max_turns, n_obs = shape
    batch = random_batch(
        seed, n_tasks=n_tasks, trajectories=trajectories, max_turns=max_turns, n_obs=n_obs
    )
    arm = load_arm("return-hard", flags)
    expected = literal_advantages(batch, arm)
    np.testing.assert_allclose(compute_advantages(batch, arm).final, expected, rtol=0, atol=2e-5)


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_the_literal_spec_for_the_shipped_arms(arm, seed):
    batch = random_batch(seed, n_tasks=4, trajectories=5, max_turns=8)
    expected = literal_advantages(batch, load_arm(arm))
    np.testing.assert_allclose(
        compute_advantages(batch, load_arm(arm)).final, expected, rtol=0, atol=2e-5
    )


def test_singleton_gigpo_group_has_zero_step_term():
    batch = random_batch(5, n_obs=50)
    result = compute_advantages(batch, load_arm("gigpo"))
    keys = list(zip(batch.uid, batch.anchor_obs))
    singletons = np.array([keys.count(key) == 1 for key in keys])
    assert singletons.any()
    assert np.all(result.per_row["step_term"][singletons] == 0)
    assert np.any(result.per_row["step_term"][~singletons] != 0)


@pytest.mark.parametrize("arm", ["return-hard", "return-hard-fbjw"])
def test_rho_zero_makes_features_irrelevant(arm):
    batch = random_batch(7)
    other_features = (
        np.random.default_rng(99).standard_normal(batch.phi_feats.shape).astype(np.float32)
    )
    with_features = compute_advantages(batch, load_arm(arm))
    changed = compute_advantages(with_changes(batch, phi_feats=other_features), load_arm(arm))
    without = compute_advantages(with_changes(batch, phi_feats=None), load_arm(arm))
    np.testing.assert_array_equal(with_features.advantages, changed.advantages)
    np.testing.assert_array_equal(with_features.advantages, without.advantages)


def test_features_do_matter_when_rho_is_positive():
    batch = random_batch(7)
    other_features = (
        np.random.default_rng(99).standard_normal(batch.phi_feats.shape).astype(np.float32)
    )
    arm = load_arm("return-hard", {"rho": "1", "shrink": "eb_pooled"})
    first = compute_advantages(batch, arm).final
    second = compute_advantages(with_changes(batch, phi_feats=other_features), arm).final
    assert not np.allclose(first, second)


@pytest.mark.parametrize("rho", ["0", "0.59"])
def test_global_gate_gives_lambda_one(rho):
    batch = random_batch(3)
    result = compute_advantages(batch, load_arm("global-successor", {"rho": rho}))
    lam = result.per_row["lam"][result.live]
    assert lam.size and np.all(lam == 1.0)
    np.testing.assert_array_equal(
        result.per_row["baseline"][result.live], result.per_row["kernel_baseline"][result.live]
    )


@pytest.mark.parametrize("arm", ARMS)
def test_equal_scores_give_zero_episode_term(arm):
    batch = random_batch(4, success_rate=1.0, invalid_rate=0.0)
    result = compute_advantages(batch, load_arm(arm))
    assert np.all(result.per_row["episode_term"] == 0)


@pytest.mark.parametrize("arm", ARMS)
def test_one_row_task_passes_its_raw_score(arm):
    data = {
        "uid": ["solo"],
        "traj_uid": ["t"],
        "anchor_obs": ["o"],
        "step_index": [0],
        "env_reward": [10.0],
        "is_action_valid": [True],
        "episode_reward": [10.0],
        "response_mask": [[1, 1, 0]],
        "phi_feats": [[0.5, -1.0, 2.0]],
    }
    result = compute_advantages(RolloutBatch.from_mapping(data), load_arm(arm))
    assert result.final[0] == pytest.approx(10.0 / (1 + 1e-6), abs=1e-5)
    assert result.per_row["step_term"][0] == 0
    np.testing.assert_allclose(result.advantages[0], [result.final[0], result.final[0], 0])


def test_return_hard_closed_form():
    """(a): A^CC_i = G_i − mean{G_k : same task and observation, other trajectory}."""
    batch = random_batch(11, n_tasks=2, trajectories=6)
    result = compute_advantages(batch, load_arm("return-hard"))
    returns = result.per_row["return_to_go"]
    for i in range(batch.n_rows):
        pool = [
            k
            for k in range(batch.n_rows)
            if batch.uid[k] == batch.uid[i]
            and batch.anchor_obs[k] == batch.anchor_obs[i]
            and batch.traj_uid[k] != batch.traj_uid[i]
        ]
        if pool:
            assert result.live[i]
            assert result.per_row["cc_term"][i] == pytest.approx(
                returns[i] - np.mean(returns[pool]), abs=1e-9
            )
        else:
            assert not result.live[i] and result.per_row["cc_term"][i] == 0


def test_time_order_comes_from_step_index_not_row_position():
    batch = random_batch(21)
    # reverse every trajectory's rows in the file while keeping their step_index
    reversed_rows = np.lexsort((-batch.step_index, batch.traj_uid.astype(str)))
    a = compute_advantages(batch, load_arm("global-successor"))
    b = compute_advantages(batch.take(reversed_rows), load_arm("global-successor"))
    np.testing.assert_array_equal(b.final, a.final[reversed_rows])


def test_estimators_import_no_heavy_frameworks():
    import subprocess
    import sys

    code = (
        "import sys, ccpo_cli.estimators, ccpo_cli.batch_io\n"
        "heavy = [m for m in ('torch', 'verl', 'transformers', 'ray', 'alfworld') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
