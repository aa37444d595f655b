"""The step-information control: a step term with its values moved between the live rows of a
task (docs/estimators.md §4.1, flag `step_permute`).

Within each task the live rows are put in an order that has nothing to do with their states (a
fixed integer hash of their canonical position), and each row takes the value of the next row in
that order, the last the first's. So the task's multiset of step values, their magnitude and
their mean, are exactly kept, no row keeps its own value (with two or more live rows), and which
value lands on which state is unrelated to the state. It is a fixed function of the canonical
layout, not a random draw: the same batch always gives the same advantages, in any row order.
"""

from __future__ import annotations

import numpy as np

_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mixed(positions: np.ndarray) -> np.ndarray:
    """splitmix64 of each position: an order unrelated to the positions' own order."""
    with np.errstate(over="ignore"):
        z = positions.astype(np.uint64) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX_1
        z = (z ^ (z >> np.uint64(27))) * _MIX_2
        return z ^ (z >> np.uint64(31))


def permute_within_tasks(step: np.ndarray, live: np.ndarray, task: np.ndarray) -> np.ndarray:
    """`step` (n,) with the values of the `live` rows (n,) bool cycled, within each `task` code
    (n,), along the hashed order; rows that are not live keep their value (0 for GiGPO)."""
    out = np.array(step, copy=True)
    live_rows = np.flatnonzero(live)
    if live_rows.size < 2:
        return out
    order = live_rows[np.lexsort((_mixed(live_rows), task[live_rows]))]
    tasks = task[order]
    starts = np.flatnonzero(np.r_[True, tasks[1:] != tasks[:-1]])
    ends = np.r_[starts[1:], order.size]
    for start, end in zip(starts, ends):
        members = order[start:end]
        out[members] = np.asarray(step)[np.roll(members, -1)]
    return out
