"""The oracle-credit ceiling: a step term from the game's stored plan (docs/estimators.md §4.2,
flag `step_oracle`).

Not an estimator anyone can train with outside the CPU testbed: it reads, for each decision,
whether the action was the next command of the plan the engine stores with the game (the
planner's distance to the goal fell by one). Within each task the 0/1 progress marks are
standardised, so the term has GiGPO's scale (mean 0 and sd 1 over a task's rows) but says,
exactly, which actions moved toward the goal. A design in which even this credit does not beat
GRPO cannot show a step-level estimator beating it, and is dropped cheaply.
"""

from __future__ import annotations

import numpy as np

from ccpo_cli.estimators.episode import EPSILON
from ccpo_cli.estimators.layout import group_mean_sd


def oracle_step_term(
    progress: np.ndarray, task: np.ndarray, n_tasks: int
) -> tuple[np.ndarray, np.ndarray]:
    """(step term (n,) float32, live (n,) bool) from `progress` (n,) 0/1 and `task` codes (n,).

    Standardised like the episode term (§3: the task's mean and unbiased sd, EPSILON added to
    the sd). A task whose rows all advanced the plan, or none did, says nothing about which
    action was better: its rows get 0 and are not live."""
    _, mean, sd = group_mean_sd(progress, task, n_tasks)
    live = sd[task] > 0
    centred = np.asarray(progress, dtype=np.float64) - mean[task]
    step = np.where(live, centred / (sd[task] + EPSILON), 0.0)
    return step.astype(np.float32), live
