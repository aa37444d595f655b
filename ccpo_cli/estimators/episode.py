"""The episode term A^EP shared by GRPO, GiGPO and CCPO (docs/estimators.md §3)."""

from __future__ import annotations

import numpy as np

from ccpo_cli.estimators.layout import group_mean_sd

EPSILON = 1e-6


def episode_term(scores: np.ndarray, task: np.ndarray, n_tasks: int, mode: str) -> np.ndarray:
    """Per-task normalised row scores; every row of a task enters its mean and sd.

    A one-row task uses mean 0 and sd 1, so it passes its score through (divided by 1 + 1e-6).
    """
    size, mean, sd = group_mean_sd(scores, task, n_tasks)
    single = size == 1
    mean = np.where(single, 0.0, mean)
    sd = np.where(single, 1.0, sd)
    centred = np.asarray(scores, dtype=np.float64) - mean[task]
    if mode == "mean_norm":
        return centred
    return centred / (sd[task] + EPSILON)
