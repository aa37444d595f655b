"""The mix λ between the kernel and the uniform leave-one-out baselines (docs/estimators.md §5.8)."""

from __future__ import annotations

import numpy as np

from ccpo_cli.arms import Arm, fixed_lambda

MSE_BIAS_PRIOR = 0.30  # the mse rule's bias prior, in sd units


def variance_gain(n_eff: np.ndarray, n_traj: np.ndarray) -> np.ndarray:
    """vg = max(1/n_eff − 1/J, 0), both floored at 1e-9."""
    return np.maximum(1.0 / np.maximum(n_eff, 1e-9) - 1.0 / np.maximum(n_traj, 1e-9), 0.0)


def shrinkage_weights(
    arm: Arm,
    uniform: np.ndarray,
    kernel: np.ndarray,
    spread: np.ndarray,
    var_gain: np.ndarray,
    level_rho: np.ndarray,
) -> np.ndarray:
    """λ per credited row, clipped to [0, 1]. `spread` is s², the pool's population variance.

    Pooled rules (eb_pooled, eb_hier) pool over every credited row of the batch, all levels.
    """
    fixed = fixed_lambda(arm)
    if fixed is not None:
        return np.full(uniform.shape, fixed)
    if uniform.size == 0:
        return np.zeros(0)
    disagreement = level_rho * (uniform - kernel)
    own_noise = spread * var_gain
    if arm.shrink == "eb":
        with np.errstate(divide="ignore", invalid="ignore"):
            lam = np.where(np.abs(disagreement) < 1e-12, 0.0, 1.0 - own_noise / disagreement**2)
    elif arm.shrink == "mse":
        bias = level_rho * MSE_BIAS_PRIOR * (np.sqrt(spread) + 1e-9)
        lam = bias**2 / (bias**2 + own_noise + 1e-12)
    else:
        signal = float(np.mean(disagreement**2))
        noise = level_rho**2 * own_noise
        if arm.shrink == "eb_pooled":
            pooled = 0.0 if signal <= 1e-12 else 1.0 - float(np.mean(noise)) / signal
            lam = np.full(uniform.shape, pooled)
        else:  # eb_hier
            tau2 = max(0.0, signal - float(np.mean(noise)))
            total = tau2 + noise
            with np.errstate(divide="ignore", invalid="ignore"):
                lam = np.where(total <= 1e-12, 0.0, tau2 / total)
    return np.clip(lam, 0.0, 1.0)
