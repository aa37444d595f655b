"""The padding rule: `inert` copies are invisible, `upstream` copies count as verl-agent counts them.

The literal reference below restates, loop by loop, how verl-agent's GRPO and GiGPO treat a
padded batch: every row (copies included) enters its task's and its anchor state's statistics,
returns come from each trajectory's real rows in time order, and every row gets an advantage.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from helpers_estimators import random_batch

from ccpo_cli.arms import load_arm
from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimators import RolloutBatch, compute_advantages

EPS = 1e-6


def upstream_reference(batch: RolloutBatch, arm) -> np.ndarray:
    """Per-row advantages as verl-agent computes them on a padded batch (numpy, float64)."""
    n = batch.n_rows
    valid = batch.is_action_valid.astype(np.float64)
    penalty = arm.invalid_penalty * (1.0 - valid)
    scores = batch.episode_reward - penalty
    # Discounted return per (trajectory, turn) from the real rows, then the copy's own penalty.
    rewards_by_traj: dict[str, dict[int, float]] = defaultdict(dict)
    for row in range(n):
        if not batch.is_pad[row]:
            rewards_by_traj[batch.traj_uid[row]][int(batch.step_index[row])] = batch.env_reward[row]
    returns = np.zeros(n)
    for row in range(n):
        turns = rewards_by_traj[batch.traj_uid[row]]
        running = 0.0
        for t in range(max(turns), int(batch.step_index[row]) - 1, -1):
            running = turns[t] + arm.gamma * running
        returns[row] = running - penalty[row]

    def normalised(values, groups, single_mean_zero):
        members = defaultdict(list)
        for row in range(n):
            members[groups[row]].append(row)
        out = np.zeros(n)
        for rows in members.values():
            group = values[rows]
            if len(rows) == 1:
                mean, sd = (0.0 if single_mean_zero else group[0]), 1.0
            else:
                mean, sd = group.mean(), group.std(ddof=1)
            centred = group - mean
            out[rows] = centred if arm.adv_mode == "mean_norm" else centred / (sd + EPS)
        return out

    episode = normalised(scores, list(batch.uid), single_mean_zero=True)
    if arm.estimator == "grpo":
        return episode
    nodes = [(u, o) for u, o in zip(batch.uid, batch.anchor_obs)]
    return episode + arm.step_advantage_w * normalised(returns, nodes, single_mean_zero=False)


@pytest.mark.parametrize("arm_name", ["grpo", "gigpo"])
@pytest.mark.parametrize("seed,pads", [(0, 1), (1, 5), (2, 14), (3, 0)])
def test_upstream_padding_counts_copies_as_verl_agent_does(arm_name, seed, pads):
    arm = load_arm(arm_name)
    batch = random_batch(seed, pad_rows=pads)
    result = compute_advantages(batch, arm, padding="upstream")
    np.testing.assert_allclose(result.final, upstream_reference(batch, arm), rtol=0, atol=1e-5)
    # A copy trains with its source row's advantage, on its own response tokens.
    assert np.all(result.advantages == result.final[:, None] * batch.response_mask)
    if pads:
        inert = compute_advantages(batch, arm, padding="inert")
        assert np.all(inert.final[batch.is_pad] == 0)
        real = ~batch.is_pad
        assert np.max(np.abs(inert.final[real] - result.final[real])) > 1e-3  # the rules differ


def test_worked_grpo_example_with_two_copies():
    # Six rows of one task scoring [10, 10, 0, 0, 0, 0]; copies of a 0-row and a 10-row make the
    # population [10, 10, 0, 0, 0, 0, 0, 10]: mean 3.75, sd sqrt(187.5 / 7).
    columns = {
        "uid": ["a"] * 8,
        "traj_uid": ["t1", "t1", "t2", "t2", "t3", "t3", "t2", "t1"],
        "anchor_obs": ["s0", "s1", "s0", "s1", "s0", "s2", "s1", "s1"],
        "step_index": [0, 1, 0, 1, 0, 1, 1, 1],
        "env_reward": [0, 10, 0, 0, 0, 0, 0, 10],
        "is_action_valid": [True] * 8,
        "episode_reward": [10, 10, 0, 0, 0, 0, 0, 10],
        "response_mask": [[1, 1]] * 8,
        "is_pad": [False] * 6 + [True, True],
    }
    batch = RolloutBatch.from_mapping(columns)
    sd = np.sqrt(187.5 / 7)
    expected = np.array([6.25, 6.25, -3.75, -3.75, -3.75, -3.75, -3.75, 6.25]) / (sd + EPS)
    np.testing.assert_allclose(
        compute_advantages(batch, load_arm("grpo"), padding="upstream").final, expected, atol=1e-6
    )
    inert = compute_advantages(batch, load_arm("grpo"), padding="inert").final
    np.testing.assert_allclose(
        inert, [1.29099, 1.29099, -0.64550, -0.64550, -0.64550, -0.64550, 0, 0], atol=1e-5
    )


@pytest.mark.parametrize("arm_name", ["grpo", "gigpo", "return-hard"])
def test_without_padding_the_rules_agree(arm_name):
    batch = random_batch(4)
    arm = load_arm(arm_name)
    inert = compute_advantages(batch, arm, padding="inert")
    if arm.estimator == "ccpo":
        with pytest.raises(InvalidInput, match="estimator 'ccpo' has no upstream rule"):
            compute_advantages(batch, arm, padding="upstream")
        return
    assert np.array_equal(
        inert.advantages, compute_advantages(batch, arm, padding="upstream").advantages
    )


def test_upstream_rule_refuses_a_padding_row_that_copies_nothing():
    data = random_batch(5, pad_rows=2).as_mapping()
    data["step_index"] = data["step_index"].copy()
    data["step_index"][-1] = 99
    with pytest.raises(
        InvalidInput, match=r"row \d+: padding = upstream needs each padding row to copy a real row"
    ):
        compute_advantages(RolloutBatch.from_mapping(data), load_arm("gigpo"), padding="upstream")
    data = random_batch(5, pad_rows=2).as_mapping()
    data["anchor_obs"] = data["anchor_obs"].copy()
    data["anchor_obs"][-1] = "elsewhere"
    with pytest.raises(InvalidInput, match="key 'anchor_obs', row .*differs from the real row"):
        compute_advantages(RolloutBatch.from_mapping(data), load_arm("gigpo"), padding="upstream")
    with pytest.raises(InvalidInput, match="padding rule 'copy'"):
        compute_advantages(random_batch(5), load_arm("gigpo"), padding="copy")
