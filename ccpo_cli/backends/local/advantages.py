"""Advantages for a training batch, through the single entry point `ccpo estimate` also uses."""

from __future__ import annotations

import numpy as np

from ccpo_cli.arms import Arm
from ccpo_cli.estimators.batch import RolloutBatch
from ccpo_cli.estimators.compute import compute_advantages


def advantages_for(batch: dict[str, np.ndarray], arm: Arm) -> np.ndarray:
    """One advantage per row (one decision is one token), rows in batch order."""
    result = compute_advantages(
        RolloutBatch.from_mapping(batch, source="local training batch"), arm
    )
    advantages = np.asarray(result.advantages, dtype=np.float64)
    return advantages.reshape(len(batch["uid"]), -1)[:, 0]
