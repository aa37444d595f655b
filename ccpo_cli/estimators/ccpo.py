"""The CCPO step term: leave-one-trajectory-out baselines over gated buckets (docs/estimators.md §5).

Inputs are in canonical layout order. The uniform statistics of every level come from grouped
sums in one vectorised pass; the kernel statistics need the features and run bucket by bucket on
Gram matrices, and only when the arm's features can change the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccpo_cli.arms import Arm
from ccpo_cli.estimators.blas import side_by_side
from ccpo_cli.estimators.features import Features
from ccpo_cli.estimators.kernel import (
    KernelStats,
    kernel_statistics,
    kernel_width,
    neighbour_weights,
    pair_distances,
)
from ccpo_cli.estimators.layout import Layout, codes_of
from ccpo_cli.estimators.node_values import NodeValues, edge_term
from ccpo_cli.estimators.shrinkage import shrinkage_weights, variance_gain


@dataclass(frozen=True)
class CcpoStep:
    raw: np.ndarray  # float32 A^CC + E, the step value before the trainer's normalisation
    cc_term: np.ndarray  # A^CC (0 on dead rows)
    edge_term: np.ndarray  # E (0 when edge_w = 0)
    target: np.ndarray  # Y
    live: np.ndarray  # bool: served at some level
    level: np.ndarray  # level that served the row, −1 if dead
    n_traj: np.ndarray  # J of that level (0 if dead)
    uniform_baseline: np.ndarray  # b^U (NaN if dead)
    kernel_baseline: np.ndarray  # b^K (NaN if dead or features inert)
    lam: np.ndarray  # λ (NaN if dead)
    baseline: np.ndarray  # final baseline b (NaN if dead)


@dataclass(frozen=True)
class UniformPool:
    """Per row: the other-trajectory members of its bucket, as counts and moments."""

    others: np.ndarray  # |O_i|
    n_traj: np.ndarray  # J_i, distinct other trajectories
    bucket_traj: np.ndarray  # distinct trajectories in the row's bucket
    mean: np.ndarray  # b^U (NaN where O_i is empty)
    variance: np.ndarray  # s², population variance of the pool (0 for a pool of one)


def uniform_pool(
    targets: np.ndarray, bucket: np.ndarray, n_buckets: int, layout: Layout
) -> UniformPool:
    """Leave-one-trajectory-out moments from bucket sums minus the row's own-trajectory sums.

    Values are centred on their bucket mean first so the subtraction loses no precision.
    """
    size = np.bincount(bucket, minlength=n_buckets)
    bucket_mean = np.bincount(bucket, weights=targets, minlength=n_buckets) / np.maximum(size, 1)
    centred = targets - bucket_mean[bucket]
    pair, n_pairs = codes_of(bucket, layout.traj)
    pair_size = np.bincount(pair, minlength=n_pairs)
    pair_sum = np.bincount(pair, weights=centred, minlength=n_pairs)
    pair_squares = np.bincount(pair, weights=centred**2, minlength=n_pairs)
    bucket_sum = np.bincount(bucket, weights=centred, minlength=n_buckets)
    bucket_squares = np.bincount(bucket, weights=centred**2, minlength=n_buckets)
    bucket_of_pair = np.zeros(n_pairs, dtype=np.int64)
    bucket_of_pair[pair] = bucket
    bucket_traj = np.bincount(bucket_of_pair, minlength=n_buckets)[bucket]

    others = size[bucket] - pair_size[pair]
    with np.errstate(divide="ignore", invalid="ignore"):
        other_mean = (bucket_sum[bucket] - pair_sum[pair]) / others
        other_squares = (bucket_squares[bucket] - pair_squares[pair]) / others
    variance = np.where(others > 1, np.maximum(other_squares - other_mean**2, 0.0), 0.0)
    mean = np.where(others > 0, bucket_mean[bucket] + other_mean, np.nan)
    return UniformPool(
        others=others, n_traj=bucket_traj - 1, bucket_traj=bucket_traj, mean=mean, variance=variance
    )


def _gate_levels(arm: Arm, layout: Layout) -> list[tuple[np.ndarray, int, float]]:
    """(bucket code per row, number of buckets, level confidence ρ_ℓ) in processing order."""
    if arm.gate == "global":
        return [(layout.task, layout.n_tasks, arm.rho)]
    levels = [(layout.node, layout.n_nodes, arm.rho)]
    if arm.backoff_task:
        levels.append((layout.task, layout.n_tasks, arm.rho * arm.backoff_rho))
    return levels


def _kernel_for_level(
    features: Features,
    targets: np.ndarray,
    bucket: np.ndarray,
    credited: np.ndarray,
    layout: Layout,
    arm: Arm,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """b^K, n_eff and local sd for the credited rows (in row order), bucket by bucket."""
    baseline = np.full(layout.n, np.nan)
    n_eff = np.full(layout.n, np.nan)
    local_sd = np.full(layout.n, np.nan)
    active = np.unique(bucket[credited])
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.stack([active, active + 1]))

    def statistics_of(members: np.ndarray) -> tuple[np.ndarray, KernelStats]:
        gram, squared_norms = features.gram(members)
        distances = pair_distances(gram, squared_norms)
        tau = kernel_width(distances, arm.tau)
        local = np.flatnonzero(credited[members])
        _, trajectory = np.unique(layout.traj[members], return_inverse=True)
        others = trajectory[local][:, None] != trajectory[None, :]
        weights = neighbour_weights(gram, squared_norms, distances, local, others, tau, arm.wmode)
        return members[local], kernel_statistics(weights, targets[members], trajectory.reshape(-1))

    # buckets are independent: two at a time, each on one BLAS thread
    with side_by_side() as workers:
        results = workers.map(
            statistics_of, [order[start:stop] for start, stop in zip(bounds[0], bounds[1])]
        )
    for rows, stats in results:
        baseline[rows] = stats.baseline
        n_eff[rows] = stats.n_eff
        local_sd[rows] = stats.local_sd
    return baseline, n_eff, local_sd


def _task_prior(targets: np.ndarray, layout: Layout) -> np.ndarray:
    """b^T: mean target of the row's task over other trajectories (NaN if none)."""
    return uniform_pool(targets, layout.task, layout.n_tasks, layout).mean


@dataclass
class _Credited:
    """Per row, from the first gate level whose pool credits it (`live`): that level and its
    rho, the pool's trajectories, uniform mean and spread, and with features the kernel
    baseline, its effective size and the local scale. NaN or 0 where no level credits it."""

    live: np.ndarray
    level: np.ndarray
    n_traj: np.ndarray
    uniform: np.ndarray
    kernel: np.ndarray
    spread: np.ndarray
    n_eff: np.ndarray
    local_sd: np.ndarray
    rho: np.ndarray


def _credit_by_level(
    arm: Arm, layout: Layout, targets: np.ndarray, features: Features | None
) -> _Credited:
    """Walk the gate's levels (finest first); each row takes the first level whose pool has
    `min_traj` trajectories and another row to compare with."""
    n = layout.n
    rows = _Credited(
        live=np.zeros(n, dtype=bool),
        level=np.full(n, -1, dtype=np.int64),
        n_traj=np.zeros(n, dtype=np.int64),
        uniform=np.full(n, np.nan),
        kernel=np.full(n, np.nan),
        spread=np.zeros(n),
        n_eff=np.full(n, np.nan),
        local_sd=np.full(n, np.nan),
        rho=np.zeros(n),
    )
    for level, (bucket, n_buckets, rho) in enumerate(_gate_levels(arm, layout)):
        pool = uniform_pool(targets, bucket, n_buckets, layout)
        credited = ~rows.live & (pool.bucket_traj >= arm.min_traj) & (pool.others > 0)
        if not credited.any():
            continue
        if features is not None:
            level_kernel, level_n_eff, level_sd = _kernel_for_level(
                features, targets, bucket, credited, layout, arm
            )
            rows.kernel[credited] = level_kernel[credited]
            rows.n_eff[credited] = level_n_eff[credited]
            rows.local_sd[credited] = level_sd[credited]
        rows.uniform[credited] = pool.mean[credited]
        rows.spread[credited] = pool.variance[credited]
        rows.n_traj[credited] = pool.n_traj[credited]
        rows.rho[credited] = rho
        rows.level[credited] = level
        rows.live |= credited
    return rows


def _blend_task_prior(
    arm: Arm,
    targets: np.ndarray,
    layout: Layout,
    rows: _Credited,
    served: np.ndarray,
    baseline: np.ndarray,
) -> None:
    """Pull the finest level's baselines toward the task's prior (in place): by the credibility
    weight n/(n + prior_kappa), or the fixed `lk_fix`."""
    prior = _task_prior(targets, layout)
    blend = served[(rows.level[served] == 0) & np.isfinite(prior[served])]
    if arm.lk_fix is not None:
        weight = np.full(blend.shape, min(1.0, max(0.0, arm.lk_fix)))
    else:
        weight = rows.n_traj[blend] / (rows.n_traj[blend] + arm.prior_kappa)
    baseline[blend] = weight * baseline[blend] + (1.0 - weight) * prior[blend]


def _scale_cc_term(
    arm: Arm, targets: np.ndarray, rows: _Credited, served: np.ndarray, cc_term: np.ndarray
) -> None:
    """Divide by the local scale (floored by a share of the batch's sd) under `std = local`,
    and damp rows of small pools by n/(n + jweight_c); in place."""
    n = len(cc_term)
    if arm.std == "local":
        batch_sd = float(np.std(targets)) if n > 1 else 1.0
        if batch_sd < 1e-9:
            batch_sd = 1.0
        cc_term[served] /= np.maximum(rows.local_sd[served], arm.std_floor * batch_sd)
    if arm.jweight_c > 0:
        cc_term[served] *= rows.n_traj[served] / (rows.n_traj[served] + arm.jweight_c)


def _shrunk_baseline(
    arm: Arm, rows: _Credited, served: np.ndarray, has_features: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(λ, baseline) per row: the served rows' baseline is λ·b^K + (1 − λ)·b^U, with λ the
    shrinkage toward the kernel baseline; NaN elsewhere."""
    n = len(rows.live)
    lam = np.full(n, np.nan)
    baseline = np.full(n, np.nan)
    if has_features:
        kernel_served = rows.kernel[served]
    else:
        kernel_served = rows.uniform[served]  # λ ≡ 0 here, so b^K never enters
    lam[served] = shrinkage_weights(
        arm,
        rows.uniform[served],
        kernel_served,
        rows.spread[served],
        variance_gain(rows.n_eff[served], rows.n_traj[served]),
        rows.rho[served],
    )
    baseline[served] = lam[served] * kernel_served + (1.0 - lam[served]) * rows.uniform[served]
    return lam, baseline


def ccpo_step_term(
    arm: Arm,
    layout: Layout,
    targets: np.ndarray,
    values: NodeValues | None,
    features: Features | None,
) -> CcpoStep:
    """A^CC + E per row. `targets` is Y (float64); `features` is required iff features_active(arm)."""
    n = layout.n
    rows = _credit_by_level(arm, layout, targets, features)

    served = np.flatnonzero(rows.live)
    lam, baseline = _shrunk_baseline(arm, rows, served, features is not None)
    if (arm.prior_kappa > 0 or arm.lk_fix is not None) and arm.gate != "global":
        _blend_task_prior(arm, targets, layout, rows, served, baseline)

    cc_term = np.zeros(n)
    cc_term[served] = targets[served] - baseline[served]
    _scale_cc_term(arm, targets, rows, served, cc_term)

    edge = np.zeros(n)
    if arm.edge_w > 0 and values is not None:
        edge = edge_term(values, layout, arm.edge_w)

    return CcpoStep(
        raw=(cc_term + edge).astype(np.float32),
        cc_term=cc_term,
        edge_term=edge,
        target=targets,
        live=rows.live,
        level=rows.level,
        n_traj=rows.n_traj,
        uniform_baseline=rows.uniform,
        kernel_baseline=rows.kernel if features is not None else np.full(n, np.nan),
        lam=lam,
        baseline=baseline,
    )
