"""Advantages for a training batch, through the single entry point `ccpo estimate` also uses."""

from __future__ import annotations

import numpy as np

from ccpo_cli.arms import Arm
from ccpo_cli.estimators.batch import RolloutBatch
from ccpo_cli.estimators.compute import compute_advantages


def advantages_for(batch: RolloutBatch | dict[str, np.ndarray], arm: Arm) -> np.ndarray:
    """One advantage per row (one decision is one token), rows in batch order."""
    if not isinstance(batch, RolloutBatch):
        batch = RolloutBatch.from_mapping(batch, source="local training batch")
    result = compute_advantages(batch, arm)
    advantages = np.asarray(result.advantages, dtype=np.float64)
    return advantages.reshape(batch.n_rows, -1)[:, 0]
