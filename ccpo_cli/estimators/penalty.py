"""The invalid-action penalty: once per row, never propagated to earlier turns (docs/estimators.md §2.2)."""

from __future__ import annotations

import numpy as np


def invalid_penalty(is_action_valid: np.ndarray, coefficient: float) -> np.ndarray:
    """coefficient·(1 − valid) per row, float32."""
    invalid = 1.0 - np.asarray(is_action_valid, dtype=np.float32)
    return np.float32(coefficient) * invalid


def penalised_returns(
    return_to_go: np.ndarray, is_action_valid: np.ndarray, coefficient: float
) -> np.ndarray:
    """G_i = RTG_i − c·(1 − v_i), the GiGPO / CCPO return target (float32)."""
    return np.asarray(return_to_go, dtype=np.float32) - invalid_penalty(
        is_action_valid, coefficient
    )


def row_scores(
    episode_reward: np.ndarray, is_action_valid: np.ndarray, coefficient: float
) -> np.ndarray:
    """σ_i = R_j − c·(1 − v_i): the row's summed token-level score (float32)."""
    return np.asarray(episode_reward, dtype=np.float32) - invalid_penalty(
        is_action_valid, coefficient
    )
