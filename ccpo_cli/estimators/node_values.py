"""G2PO node values, successor values and the edge (value-gain) term (docs/estimators.md §5.2, §5.11)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccpo_cli.estimators.episode import EPSILON
from ccpo_cli.estimators.layout import Layout, group_mean_sd


@dataclass(frozen=True)
class NodeValues:
    current: np.ndarray  # V(N_i), the node the row's action was taken in
    successor: np.ndarray  # V(S_i): next turn's node, or the terminal value after the last turn


def node_values(
    layout: Layout, episode_reward: np.ndarray, gamma: float, success_reward: float
) -> NodeValues:
    """V(N) = mean over visits (j, t) of γ^(T_j − t)·R_j; terminal = success_reward on success, else 0."""
    reward = np.asarray(episode_reward, dtype=np.float64)
    visit_value = (
        np.power(float(gamma), (layout.traj_length - layout.step).astype(np.float64)) * reward
    )
    _, value_of_node, _ = group_mean_sd(visit_value, layout.node, layout.n_nodes)
    current = value_of_node[layout.node]
    terminal = np.where(np.abs(reward - success_reward) < 1e-9, float(success_reward), 0.0)
    has_next = layout.next_row >= 0
    successor = np.where(has_next, current[np.maximum(layout.next_row, 0)], terminal)
    return NodeValues(current=current, successor=successor)


def edge_term(values: NodeValues, layout: Layout, weight: float) -> np.ndarray:
    """weight·(g − mean_task g)/(sd_task(g) + 1e-6) with g = V(S) − V(N); 0 in one-row tasks."""
    gain = values.successor - values.current
    size, mean, sd = group_mean_sd(gain, layout.task, layout.n_tasks)
    edge = weight * (gain - mean[layout.task]) / (sd[layout.task] + EPSILON)
    return np.where(size[layout.task] > 1, edge, 0.0)
