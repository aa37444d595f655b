"""The step-information control (`step_permute`): the step term's values, moved between the live
rows of each task, so it keeps its magnitude and mean and loses what it says about states."""

from __future__ import annotations

import numpy as np

from ccpo_cli.arms import load_arm
from ccpo_cli.estimators.compute import compute_advantages
from ccpo_cli.estimators.permute import permute_within_tasks
from tests.helpers_estimators import random_batch


def test_permutation_keeps_each_tasks_values_and_moves_every_live_row():
    step = np.array([1.0, 2.0, 3.0, 0.0, 5.0, -1.0, 7.0])
    live = np.array([True, True, True, False, True, True, False])
    task = np.array([0, 0, 0, 0, 1, 1, 1])
    out = permute_within_tasks(step, live, task)
    for code in (0, 1):
        rows = (task == code) & live
        assert sorted(out[rows]) == sorted(step[rows])
        assert np.all(out[rows] != step[rows])  # no live row keeps its own value
    assert out[3] == 0.0 and out[6] == 7.0  # rows that are not live are untouched


def test_a_single_live_row_keeps_its_value():
    out = permute_within_tasks(np.array([4.0, 0.0]), np.array([True, False]), np.array([0, 0]))
    assert out.tolist() == [4.0, 0.0]


def test_gigpo_with_permuted_step_term_has_the_same_step_values_per_task_but_not_per_row():
    batch = random_batch(3, n_tasks=3, trajectories=4, max_turns=6)
    plain = compute_advantages(batch, load_arm("gigpo")).per_row
    permuted = compute_advantages(batch, load_arm("gigpo", {"step_permute": "1"})).per_row
    np.testing.assert_array_equal(plain["episode_term"], permuted["episode_term"])
    live = plain["live"]
    assert live.sum() > 4
    for uid in np.unique(batch.uid):
        rows = (batch.uid == uid) & live & ~batch.is_pad
        np.testing.assert_allclose(
            np.sort(plain["step_term"][rows]), np.sort(permuted["step_term"][rows])
        )
    assert not np.allclose(plain["step_term"][live], permuted["step_term"][live])


def test_the_control_flag_leaves_every_shipped_fingerprint_alone_and_changes_its_own():
    arm = load_arm("gigpo")
    assert load_arm("gigpo", {"step_permute": "0"}).fingerprint == arm.fingerprint
    assert load_arm("gigpo", {"step_permute": "1"}).fingerprint != arm.fingerprint
