"""Trajectory context block for the `hidden+ctx` features (docs/estimators.md §5.3), walked by step_index."""

from __future__ import annotations

import numpy as np

from ccpo_cli.estimators.layout import Layout

THERMOMETER_BINS = 12


def thermometer(values: np.ndarray, low: float, high: float) -> np.ndarray:
    """First floor(clip((x − low)/(high − low), 0, 1)·12) of 12 bins set to 1."""
    fraction = (np.asarray(values, dtype=np.float64) - low) / max(high - low, 1e-9)
    filled = np.floor(np.clip(fraction, 0.0, 1.0) * THERMOMETER_BINS).astype(np.int64)
    return (np.arange(THERMOMETER_BINS)[None, :] < filled[:, None]).astype(np.float64)


def trajectory_context(layout: Layout) -> np.ndarray:
    """(n, 37) context c_i = [therm(t; 0, 30), therm(nu; 0, 25), therm(nu/(t+1); 0, 1), revisit]."""
    n = layout.n
    # A row revisits when its node already occurred at an earlier turn of its trajectory; the
    # first visit is the row with the smallest step among rows sharing (trajectory, node).
    order = np.lexsort((layout.step, layout.node, layout.traj))
    pair = np.stack([layout.traj[order], layout.node[order]], axis=1)
    first_in_run = np.ones(n, dtype=bool)
    if n > 1:
        first_in_run[1:] = np.any(pair[1:] != pair[:-1], axis=1)
    revisit = np.zeros(n, dtype=bool)
    revisit[order] = ~first_in_run
    # Canonical rows of a trajectory are contiguous and in step order, so a running count of
    # first visits within the trajectory gives the number of distinct observations so far.
    new_obs = (~revisit).astype(np.int64)
    cumulative = np.cumsum(new_obs)
    start = np.flatnonzero(layout.step == 0)
    before_start = np.zeros(n, dtype=np.int64)
    before_start[start] = cumulative[start] - new_obs[start]
    # forward-fill each trajectory's offset over its rows
    offset = np.maximum.accumulate(np.where(layout.step == 0, np.arange(n), 0))
    distinct = cumulative - before_start[offset]
    turn = layout.step.astype(np.float64)
    progress = distinct / (turn + 1.0)
    return np.concatenate(
        [
            thermometer(turn, 0, 30),
            thermometer(distinct, 0, 25),
            thermometer(progress, 0.0, 1.0),
            revisit.astype(np.float64)[:, None],
        ],
        axis=1,
    )
