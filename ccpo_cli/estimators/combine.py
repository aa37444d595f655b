"""The trainer's combination of episode and step terms (docs/estimators.md §6)."""

from __future__ import annotations

import numpy as np

from ccpo_cli.arms import Arm
from ccpo_cli.estimators.episode import EPSILON
from ccpo_cli.estimators.layout import group_mean_sd


def step_normalisation_on(arm: Arm) -> bool:
    if arm.step_norm == "none":
        return False
    if arm.step_norm == "std":
        return True
    return arm.adv_mode == "mean_std_norm"


def normalise_live_steps(
    step: np.ndarray, live: np.ndarray, task: np.ndarray, n_tasks: int
) -> np.ndarray:
    """Per task, z-score the live rows when there are at least two; other rows keep their value."""
    out = np.asarray(step, dtype=np.float32).copy()
    live_rows = np.flatnonzero(live)
    if live_rows.size == 0:
        return out
    size, mean, sd = group_mean_sd(out[live_rows].astype(np.float64), task[live_rows], n_tasks)
    groups = task[live_rows]
    rescaled = (out[live_rows] - mean[groups]) / (sd[groups] + EPSILON)
    out[live_rows] = np.where(size[groups] >= 2, rescaled, out[live_rows]).astype(np.float32)
    return out


def combine_terms(episode: np.ndarray, step: np.ndarray, arm: Arm) -> np.ndarray:
    """ep_w·A^EP + step_advantage_w·A^step per row (float32); every valid token carries it."""
    combined = arm.ep_w * np.asarray(episode, dtype=np.float64) + arm.step_advantage_w * np.asarray(
        step, dtype=np.float64
    )
    return combined.astype(np.float32)
