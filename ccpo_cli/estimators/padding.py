"""What padding rows (`is_pad`) do: the two rules a baseline arm can follow (docs/estimators.md §7).

verl-agent pads every batch up to a multiple of its micro-batch sizes by appending copies of
randomly chosen real rows, and its own GRPO and GiGPO then treat each copy as one more row: it
enters the task's (and the anchor state's) mean and standard deviation and is trained on with the
advantage computed for it, which is its source row's advantage.

* `inert` (every arm): copies enter no statistic and get advantage 0, so the advantages of real
  rows do not depend on how many copies the trainer happened to add;
* `upstream` (grpo and gigpo only): verl-agent's behaviour, so that a baseline run trains on the
  same advantages as verl-agent's own estimator would give it. A copy is matched to its source by
  (traj_uid, step_index) and counts as one more occurrence of that row.
"""

from __future__ import annotations

import numpy as np

from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimators.batch import RolloutBatch
from ccpo_cli.estimators.layout import Layout


def padding_sources(batch: RolloutBatch, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """(batch positions of the padding rows, canonical index of the real row each one copies).

    A padding row must repeat a real row's trajectory, turn, task, observation, validity and
    rewards; anything else is not a copy and fails naming the row.
    """
    pad_rows = np.flatnonzero(batch.is_pad)
    if pad_rows.size == 0:
        return pad_rows, np.zeros(0, dtype=np.int64)
    canonical = {
        (str(batch.traj_uid[row]), int(batch.step_index[row])): index
        for index, row in enumerate(layout.rows)
    }
    sources = np.empty(pad_rows.size, dtype=np.int64)
    for position, row in enumerate(pad_rows):
        key = (str(batch.traj_uid[row]), int(batch.step_index[row]))
        index = canonical.get(key)
        if index is None:
            raise InvalidInput(
                f"key 'is_pad', row {int(row)}: padding = upstream needs each padding row to copy a real row, "
                f"but no real row has traj_uid {key[0]!r} and step_index {key[1]}"
            )
        source = int(layout.rows[index])
        for name in ("uid", "anchor_obs", "env_reward", "is_action_valid", "episode_reward"):
            if getattr(batch, name)[row] != getattr(batch, name)[source]:
                raise InvalidInput(
                    f"key '{name}', row {int(row)}: padding row differs from the real row {source} it copies"
                )
        sources[position] = index
    return pad_rows, sources
