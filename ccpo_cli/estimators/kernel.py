"""Kernel weights inside one bucket and the leave-one-trajectory-out kernel statistics
(docs/estimators.md §5.6, §5.7)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class KernelStats:
    baseline: np.ndarray  # b^K per credited row
    n_eff: np.ndarray  # (Σα)² / Σα² over the other trajectories' summed weights
    local_sd: np.ndarray  # sqrt(Σ ŵ (Y − b^K)²) with normalised weights


# Relative slack on the hard window's edge (see `neighbour_weights`).
HARD_WINDOW_SLACK = 1.0 + 1e-6


# φ rows have unit norm (or are zero), so squared distances below this are Gram rounding, not
# geometry: identical prompts (every trajectory's first turn) give identical hidden states, and
# float32 products leave ~1e-5 of noise whose square root (~3e-3) would otherwise become the
# bucket's median distance and so its kernel width.
SQUARED_DISTANCE_RESOLUTION = 1e-4

# The same resolution on the Gram entries themselves (‖a − b‖² = 2 − 2·a·b for unit rows): a
# cosine weight is 0 at or below it, since a cosine that close to 0 is rounding, not similarity
# (two rows exactly orthogonal by construction come out at ±6e-8). Taken as a weight, such a
# residue either becomes the whole baseline (its ratio to itself) or, under the 1e-12 floor on
# the weight sum, shrinks the baseline towards 0, depending on its sign and size.
COSINE_RESOLUTION = SQUARED_DISTANCE_RESOLUTION / 2


def pair_distances(gram: np.ndarray, squared_norms: np.ndarray) -> np.ndarray:
    """‖a − b‖ from the Gram matrix: sqrt(max(‖a‖² + ‖b‖² − 2 a·b, 0)), rounding residue → 0."""
    squared = squared_norms[:, None] + squared_norms[None, :] - 2.0 * gram
    squared[squared <= SQUARED_DISTANCE_RESOLUTION] = 0.0
    return np.sqrt(squared)


def kernel_width(distances: np.ndarray, tau_scale: float) -> float:
    """τ_B = (median pair distance, or 1 when that is ≤ 1e-9) · max(tau_scale, 1e-6)."""
    m = distances.shape[0]
    upper = distances[np.triu_indices(m, 1)]
    median = float(np.median(upper)) if upper.size else 0.0
    return (median if median > 1e-9 else 1.0) * max(float(tau_scale), 1e-6)


def neighbour_weights(
    gram: np.ndarray,
    squared_norms: np.ndarray,
    distances: np.ndarray,
    credited: np.ndarray,
    others: np.ndarray,
    tau: float,
    wmode: str,
) -> np.ndarray:
    """(credited × bucket) weights, zero on the row's own trajectory.

    soft: exp(−D/τ). hard: 1 within τ, else 0. cos: the cosine similarity where it exceeds
    COSINE_RESOLUTION, else 0. In hard and cos modes a row whose every neighbour gets weight 0
    keeps its nearest other-trajectory rows, weight 1 each: every one whose squared distance is
    within SQUARED_DISTANCE_RESOLUTION of the smallest, so that a tie is not broken by row order
    (which is trajectory-name order) or by rounding.
    """
    near = distances[credited]
    if wmode == "soft":
        weights = np.exp(-near / tau)
    elif wmode == "hard":
        # τ is a multiple of the median pair distance, so some pairs sit exactly on it: a
        # relative slack keeps rounding (randomized vs exact whitening) from flipping them.
        weights = (near <= tau * HARD_WINDOW_SLACK).astype(np.float64)
    else:
        norms = np.sqrt(np.maximum(squared_norms, 0.0))
        denominator = norms[credited][:, None] * np.maximum(norms, 1e-12)[None, :]
        cosine = gram[credited] / np.maximum(denominator, 1e-12)
        weights = np.where(cosine > COSINE_RESOLUTION, cosine, 0.0)
    weights = np.where(others, weights, 0.0)
    if wmode != "soft":
        empty = weights.sum(axis=1) <= 0.0
        if empty.any():
            squared = np.where(others[empty], near[empty] ** 2, np.inf)
            nearest = squared <= squared.min(axis=1, keepdims=True) + SQUARED_DISTANCE_RESOLUTION
            weights[empty] = nearest.astype(np.float64)
    return weights


def kernel_statistics(
    weights: np.ndarray, targets: np.ndarray, trajectory: np.ndarray
) -> KernelStats:
    """b^K, n_eff and the local sd for each credited row from its weights over the bucket.

    `trajectory` holds bucket-local trajectory codes 0..J_B−1 of the bucket members.
    """
    total = weights.sum(axis=1)
    safe_total = np.maximum(total, 1e-12)
    baseline = (weights @ targets) / safe_total
    membership = np.zeros((trajectory.shape[0], int(trajectory.max()) + 1))
    membership[np.arange(trajectory.shape[0]), trajectory] = 1.0
    alpha = weights @ membership
    n_eff = total**2 / np.maximum((alpha**2).sum(axis=1), 1e-12)
    normalised = weights / safe_total[:, None]
    deviation = targets[None, :] - baseline[:, None]
    local_sd = np.sqrt(np.maximum((normalised * deviation**2).sum(axis=1), 0.0))
    return KernelStats(baseline=baseline, n_eff=n_eff, local_sd=local_sd)
