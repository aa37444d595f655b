"""Discounted return-to-go per trajectory, walked by step_index (docs/estimators.md §2.1)."""

from __future__ import annotations

import numpy as np

from ccpo_cli.estimators.layout import Layout


def discounted_return_to_go(rewards: np.ndarray, layout: Layout, gamma: float) -> np.ndarray:
    """RTG_t = r_t + γ·RTG_{t+1}, 0 after the last turn, in float32 as the trainer computes it.

    `rewards` are in canonical order; the recursion runs over turn indices from the last one down,
    all trajectories at once.
    """
    rewards32 = np.asarray(rewards, dtype=np.float32)
    gamma32 = np.float32(gamma)
    rtg = np.zeros_like(rewards32)
    if layout.n == 0:
        return rtg
    has_next = layout.next_row >= 0
    for turn in range(int(layout.step.max()), -1, -1):
        rows = np.flatnonzero(layout.step == turn)
        following = np.where(
            has_next[rows], rtg[np.maximum(layout.next_row[rows], 0)], np.float32(0)
        )
        rtg[rows] = rewards32[rows] + gamma32 * following
    return rtg
