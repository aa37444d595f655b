"""GiGPO's step term: exact (task, observation) groups on the penalised return (docs/estimators.md §4)."""

from __future__ import annotations

import numpy as np

from ccpo_cli.estimators.episode import EPSILON
from ccpo_cli.estimators.layout import group_mean_sd


def gigpo_step_term(returns: np.ndarray, node: np.ndarray, n_nodes: int, mode: str) -> np.ndarray:
    """Self-inclusive group-normalised return; a group of one row gets 0.

    Revisits of one trajectory all enter their group, as in the reference.
    """
    size, mean, sd = group_mean_sd(returns, node, n_nodes)
    centred = np.asarray(returns, dtype=np.float64) - mean[node]
    step = centred if mode == "mean_norm" else centred / (sd[node] + EPSILON)
    return np.where(size[node] > 1, step, 0.0)
