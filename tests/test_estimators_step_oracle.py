"""The oracle-credit ceiling (`step_oracle`): GiGPO's step term replaced by the game's stored plan,
standardised within each task; and the rollouts that mark which actions advanced the plan."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from ccpo_cli.arms import inert_flags, load_arm
from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimators.compute import compute_advantages
from ccpo_cli.estimators.oracle import oracle_step_term
from tests.helpers_estimators import random_batch


def loop_oracle(progress, task):
    """The term row by row: each task's mean and unbiased sd, rows of a constant task get 0."""
    out, live = [0.0] * len(progress), [False] * len(progress)
    for code in set(task):
        rows = [i for i, t in enumerate(task) if t == code]
        values = [progress[i] for i in rows]
        mean = sum(values) / len(values)
        sd = (
            math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
            if len(values) > 1
            else 0.0
        )
        for i in rows:
            if sd > 0:
                out[i], live[i] = (progress[i] - mean) / (sd + 1e-6), True
    return out, live


def test_the_oracle_term_equals_the_loop_by_loop_oracle():
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        task = rng.integers(0, 4, size=n)
        progress = (rng.random(n) < 0.3).astype(np.float64)
        step, live = oracle_step_term(progress, task, 4)
        expected, expected_live = loop_oracle(progress.tolist(), task.tolist())
        np.testing.assert_allclose(step, expected, rtol=1e-6, atol=1e-6)
        assert live.tolist() == expected_live


def _with_progress(batch, seed: int):
    progress = (np.random.default_rng(seed).random(batch.n_rows) < 0.3).astype(np.float64)
    return dataclasses.replace(batch, plan_progress=progress)


def test_gigpo_with_the_oracle_keeps_its_episode_term_and_takes_the_plans_step_term():
    batch = _with_progress(random_batch(3, n_tasks=3, trajectories=4, max_turns=6), 3)
    plain = compute_advantages(batch, load_arm("gigpo")).per_row
    oracle = compute_advantages(batch, load_arm("gigpo", {"step_oracle": "1"})).per_row
    np.testing.assert_array_equal(plain["episode_term"], oracle["episode_term"])
    real = ~batch.is_pad
    codes = np.unique(batch.uid[real], return_inverse=True)[1]
    expected, _ = oracle_step_term(batch.plan_progress[real], codes, codes.max() + 1)
    np.testing.assert_allclose(oracle["step_term"][real], expected, rtol=1e-6)
    # Credit goes to the rows that advanced the plan, within every task that has both kinds.
    for uid in np.unique(batch.uid):
        rows = (batch.uid == uid) & real
        marks = batch.plan_progress[rows]
        if 0 < marks.sum() < marks.size:
            assert (
                oracle["step_term"][rows][marks == 1].min()
                > 0
                > oracle["step_term"][rows][marks == 0].max()
            )


def test_the_oracle_needs_the_plan_marks_and_a_gigpo_arm():
    batch = random_batch(1)
    with pytest.raises(InvalidInput, match="plan_progress"):
        compute_advantages(batch, load_arm("gigpo", {"step_oracle": "1"}))
    with pytest.raises(InvalidInput, match="step_oracle"):
        load_arm("return-hard", {"step_oracle": "1"})
    assert "gamma" in inert_flags(load_arm("gigpo", {"step_oracle": "1"}))


def test_the_oracle_flag_leaves_every_shipped_fingerprint_alone_and_changes_its_own():
    arm = load_arm("gigpo")
    assert load_arm("gigpo", {"step_oracle": "0"}).fingerprint == arm.fingerprint
    assert load_arm("gigpo", {"step_oracle": "1"}).fingerprint != arm.fingerprint


def test_rollouts_that_follow_the_plan_mark_exactly_the_plans_next_commands():
    """Real engine, real policy: each marked decision's command is the plan's next one, in order,
    and the batch the trainer builds carries the marks."""
    import torch

    from ccpo_cli.backends.local.features import Featurizer
    from ccpo_cli.backends.local.games import training_games
    from ccpo_cli.backends.local.policy import CommandScorer
    from ccpo_cli.backends.local.rollouts import estimate_batch
    from ccpo_cli.backends.local.workers import EpisodeJob, EpisodePlayer
    from ccpo_cli.envs.engine import GameSession

    torch.manual_seed(0)
    player = EpisodePlayer(CommandScorer(), Featurizer())
    games = training_games()[:2]
    trajectories = []
    try:
        for index, game in enumerate(games):
            plan = GameSession(game, walkthrough=True).reset().info["walkthrough"]
            job = EpisodeJob(
                game_path=game,
                uid=f"t{index}",
                traj_uids=(f"t{index}/0", f"t{index}/1"),
                seeds=((0, index, 0), (0, index, 1)),
                temperature=1.0,
                max_steps=15,
                plan_progress=True,
            )
            played = player.play(job)
            for trajectory in played:
                marked = [d.action for d in trajectory.decisions if d.advanced_plan]
                assert marked == plan[: len(marked)]
                assert all(d.advanced_plan is not None for d in trajectory.decisions)
            trajectories += played
        plain = player.play(dataclasses.replace(job, plan_progress=False))
    finally:
        player.close()
    batch = estimate_batch(trajectories)
    marks = [d.advanced_plan for t in trajectories for d in t.decisions]
    assert batch["plan_progress"].tolist() == [float(m) for m in marks]
    assert 0 < sum(marks) < len(marks)  # the marks say something: some actions advanced a plan
    assert "plan_progress" not in estimate_batch(plain)
