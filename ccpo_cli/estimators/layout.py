"""Canonical row layout: real rows sorted by (task, trajectory, step_index), with integer codes.

Every estimator works on this layout and never on input row positions, so a permuted batch gives
bit-identical values (permuted back), padding rows are not in it (the padding rule decides whether
they count, padding.py), and "next turn" means step_index + 1 of the same trajectory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccpo_cli.estimators.batch import RolloutBatch


def codes_of(*keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense integer codes (sorted by key value) for the rows' joint key, and their count."""
    if len(keys) == 1:
        key = keys[0]
        if key.dtype == object:
            key = key.astype(str)
        unique, codes = np.unique(key, return_inverse=True)
        return codes.astype(np.int64).reshape(-1), int(unique.shape[0])
    combined = np.stack([codes_of(key)[0] for key in keys], axis=1)
    unique, codes = np.unique(combined, axis=0, return_inverse=True)
    return codes.astype(np.int64).reshape(-1), int(unique.shape[0])


@dataclass(frozen=True)
class Layout:
    rows: np.ndarray  # batch position of each canonical row (real rows only)
    task: np.ndarray  # task code
    traj: np.ndarray  # trajectory code
    step: np.ndarray  # 0-based turn index t
    traj_length: np.ndarray  # T of the row's trajectory
    node: np.ndarray  # (task, anchor_obs) code
    next_row: np.ndarray  # canonical index of the same trajectory's next turn, -1 after the last
    n_tasks: int
    n_trajs: int
    n_nodes: int

    @property
    def n(self) -> int:
        return int(self.rows.shape[0])


def build_layout(batch: RolloutBatch) -> Layout:
    real = np.flatnonzero(~batch.is_pad)
    task_all, n_tasks = codes_of(batch.uid[real])
    traj_all, n_trajs = codes_of(batch.traj_uid[real])
    # traj_uid is unique per trajectory and each trajectory sits in one task (validated), so
    # sorting by (task, trajectory, step) is a total order on real rows.
    order = np.lexsort((batch.step_index[real], traj_all, task_all))
    rows = real[order]
    task = task_all[order]
    traj = traj_all[order]
    step = batch.step_index[rows].astype(np.int64)
    traj_length = np.bincount(traj, minlength=n_trajs)[traj]
    node, n_nodes = codes_of(task, batch.anchor_obs[rows])
    index = np.arange(rows.shape[0], dtype=np.int64)
    next_row = np.where(step + 1 < traj_length, index + 1, -1)
    return Layout(
        rows=rows,
        task=task,
        traj=traj,
        step=step,
        traj_length=traj_length,
        node=node,
        next_row=next_row,
        n_tasks=n_tasks,
        n_trajs=n_trajs,
        n_nodes=n_nodes,
    )


def group_mean_sd(
    values: np.ndarray, groups: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group size, mean and unbiased sd (sd 0 for groups of one), two-pass for accuracy."""
    values = np.asarray(values, dtype=np.float64)
    size = np.bincount(groups, minlength=n_groups)
    mean = np.bincount(groups, weights=values, minlength=n_groups) / np.maximum(size, 1)
    centred = values - mean[groups]
    squares = np.bincount(groups, weights=centred * centred, minlength=n_groups)
    sd = np.sqrt(squares / np.maximum(size - 1, 1))
    return size, mean, sd
