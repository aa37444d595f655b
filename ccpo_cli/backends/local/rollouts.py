"""Trajectories of the local policy and the estimator batch built from them.

A training step plays `group` episodes of each of `tasks` games. Every decision keeps what the
update and the estimator need: the observation the action was taken in (the `anchor_obs` the
step-level estimators group on), the admissible commands, the chosen index and the features.
The batch follows the `ccpo estimate` schema exactly (docs/estimators.md §1.1): one row per
(trajectory, turn), rows of a trajectory in time order, response length 1 (one decision is one
"token").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

from ccpo_cli.backends.local.features import DecisionFeatures


@dataclass
class Decision:
    observation: str
    candidates: tuple[str, ...]
    action_index: int
    reward: float
    features: DecisionFeatures
    # Whether the action was the next command of the game's stored plan (the oracle-credit
    # ceiling, docs/estimators.md §4.2); None when the rollout did not follow the plan.
    advanced_plan: bool | None = None

    @property
    def action(self) -> str:
        return self.candidates[self.action_index]


@dataclass
class Trajectory:
    uid: str  # the group: one task (game) within one training step
    traj_uid: str
    game_id: str
    task_type: str
    decisions: list[Decision] = field(default_factory=list)
    won: bool = False

    @property
    def episode_reward(self) -> float:
        return float(sum(d.reward for d in self.decisions))


def flat_decisions(trajectories: list[Trajectory]) -> list[Decision]:
    return [decision for trajectory in trajectories for decision in trajectory.decisions]


def estimate_batch(
    trajectories: list[Trajectory], phi_feats: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """The `ccpo estimate` input for these trajectories, rows in `flat_decisions` order."""
    uid, traj_uid, anchor_obs, step_index, env_reward, episode_reward = [], [], [], [], [], []
    for trajectory in trajectories:
        total = trajectory.episode_reward
        for index, decision in enumerate(trajectory.decisions):
            uid.append(trajectory.uid)
            traj_uid.append(trajectory.traj_uid)
            anchor_obs.append(decision.observation)
            step_index.append(index)
            env_reward.append(decision.reward)
            episode_reward.append(total)
    rows = len(uid)
    batch = {
        "uid": np.asarray(uid, dtype=str),
        "traj_uid": np.asarray(traj_uid, dtype=str),
        "anchor_obs": np.asarray(anchor_obs, dtype=str),
        "step_index": np.asarray(step_index, dtype=np.int64),
        "env_reward": np.asarray(env_reward, dtype=np.float64),
        # Commands are chosen from the admissible list, so every action parses.
        "is_action_valid": np.ones(rows, dtype=bool),
        "episode_reward": np.asarray(episode_reward, dtype=np.float64),
        "response_mask": np.ones((rows, 1), dtype=np.int64),
    }
    progress = [d.advanced_plan for t in trajectories for d in t.decisions]
    if progress and all(value is not None for value in progress):
        batch["plan_progress"] = np.asarray(progress, dtype=np.float64)
    if phi_feats is not None:
        if phi_feats.shape[0] != rows:
            raise ValueError(f"phi_feats has {phi_feats.shape[0]} rows for {rows} decisions")
        batch["phi_feats"] = phi_feats.astype(np.float32)
    return batch


def rollout_digest(trajectories: list[Trajectory]) -> str:
    """sha256 of everything that defines the rollouts (games, groups, observations, commands,
    choices, rewards), independent of the arm; arms sharing a seed must agree on step 1."""
    digest = hashlib.sha256()
    for trajectory in trajectories:
        record = {
            "uid": trajectory.uid,
            "traj_uid": trajectory.traj_uid,
            "game_id": trajectory.game_id,
            "won": trajectory.won,
            "turns": [
                [d.observation, list(d.candidates), d.action_index, d.reward]
                for d in trajectory.decisions
            ],
        }
        digest.update(json.dumps(record, sort_keys=True).encode())
        digest.update(b"\n")
    return digest.hexdigest()
