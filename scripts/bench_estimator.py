#!/usr/bin/env python
"""Time each CCPO arm on a training-shaped batch against the reference's dominant cost, a full SVD.

The batch: 16 tasks x 8 trajectories x 10-50 turns (about 4,000 rows), d = 3,584 float32 features
with a realistic spectrum (a large common offset with a few outlier dimensions, three strong shared
directions, weaker ones, per-task and per-observation structure, anisotropic noise). Both timings
are taken in this process, side by side, so the ratio is what to read on a shared machine.

    python scripts/bench_estimator.py [--repeats 3] [--check-subspace] [--seed 0]
"""

from __future__ import annotations

import argparse
import functools
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccpo_cli.arms import load_arm  # noqa: E402
from ccpo_cli.estimators import RolloutBatch, compute_advantages  # noqa: E402
from ccpo_cli.estimators.features import principal_directions  # noqa: E402

TASKS, TRAJECTORIES, MIN_TURNS, MAX_TURNS = 16, 8, 10, 50
HIDDEN, RESPONSE_LENGTH, OBSERVATIONS_PER_TASK = 3584, 512, 40
CCPO_ARMS = ("return-hard", "return-hard-fbjw", "global-successor")
REFERENCE_ARMS = ("grpo", "gigpo")
TARGET_RATIO, TARGET_PEAK_MB = 0.03, 2048


def training_batch(seed: int) -> RolloutBatch:
    rng = np.random.default_rng(seed)
    popularity = 1.0 / np.arange(
        1, OBSERVATIONS_PER_TASK + 1
    )  # a few rooms are visited by everyone
    popularity /= popularity.sum()
    uid, traj_uid, anchor_obs, step_index, env_reward, valid, episode_reward, node = (
        [] for _ in range(8)
    )
    for task in range(TASKS):
        for traj in range(TRAJECTORIES):
            turns = int(rng.integers(MIN_TURNS, MAX_TURNS + 1))
            success = rng.random() < 0.5
            for t in range(turns):
                observation = 0 if t == 0 else int(rng.choice(OBSERVATIONS_PER_TASK, p=popularity))
                uid.append(f"task-{task}")
                traj_uid.append(f"task-{task}/traj-{traj}")
                anchor_obs.append(
                    f"task {task}: you are in room {observation}. " + "You see a cabinet 1. " * 20
                )
                step_index.append(t)
                env_reward.append(10.0 if success and t == turns - 1 else 0.0)
                valid.append(rng.random() > 0.05)
                episode_reward.append(10.0 if success else 0.0)
                node.append(task * OBSERVATIONS_PER_TASK + observation)
    n = len(uid)
    lengths = rng.integers(8, RESPONSE_LENGTH, size=n)
    mask = (np.arange(RESPONSE_LENGTH)[None, :] < lengths[:, None]).astype(np.float32)
    return RolloutBatch.from_mapping(
        {
            "uid": np.array(uid),
            "traj_uid": np.array(traj_uid),
            "anchor_obs": np.array(anchor_obs),
            "step_index": np.array(step_index),
            "env_reward": np.array(env_reward),
            "is_action_valid": np.array(valid),
            "episode_reward": np.array(episode_reward),
            "response_mask": mask,
            "phi_feats": hidden_states(np.array(node), np.array(step_index), rng),
        },
        source="benchmark batch",
    )


def hidden_states(node: np.ndarray, step: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Final-norm-like states: offset + strong shared directions + task/node structure + noise."""
    n = node.shape[0]
    features = rng.standard_normal((n, HIDDEN), dtype=np.float32)
    features *= (0.3 + rng.random(HIDDEN, dtype=np.float32)) * 0.5  # anisotropic noise floor
    offset = rng.standard_normal(HIDDEN).astype(np.float32)
    offset[rng.choice(HIDDEN, 6, replace=False)] = 80.0  # massive-activation dimensions
    features += offset
    strengths = np.array([30.0, 18.0, 10.0, 3.0, 2.0, 1.5], dtype=np.float32)
    directions = np.linalg.qr(rng.standard_normal((HIDDEN, strengths.size)))[0].T.astype(np.float32)
    features += (
        rng.standard_normal((n, strengths.size)).astype(np.float32) * strengths
    ) @ directions
    features += (
        0.05 * np.minimum(step, 30)[:, None].astype(np.float32) * directions[3]
    )  # drift with the turn
    node_codes, node_index = np.unique(node, return_inverse=True)
    node_vectors = rng.standard_normal((node_codes.size, HIDDEN), dtype=np.float32) * 0.6
    features += node_vectors[node_index]
    return features


def timed(function, repeats: int) -> tuple[float, object]:
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        value = function()
        best = min(best, time.perf_counter() - start)
    return best, value


def peak_megabytes(function) -> float:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="best-of repeats for each arm")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--check-subspace",
        action="store_true",
        help="also compare the whitening subspace with an exact SVD of the centred matrix",
    )
    args = parser.parse_args()

    batch = training_batch(args.seed)
    features = batch.phi_feats
    print(
        f"batch: {batch.n_rows} rows, {TASKS} tasks x {TRAJECTORIES} trajectories, features {features.shape} {features.dtype}",
        flush=True,
    )

    rows = []
    for name in CCPO_ARMS + REFERENCE_ARMS:
        arm = load_arm(name)
        run_arm = functools.partial(compute_advantages, batch, arm)
        seconds, _ = timed(run_arm, args.repeats)
        rows.append((name, seconds, peak_megabytes(run_arm)))
        print(f"  timed {name}: {seconds:.3f} s", flush=True)
    svd_seconds, _ = timed(lambda: np.linalg.svd(features, full_matrices=False), 1)
    print(
        f"  timed numpy.linalg.svd(features, full_matrices=False): {svd_seconds:.2f} s", flush=True
    )

    print()
    print(f"{'arm':<20} {'seconds':>9} {'x SVD':>8} {'peak MB':>9}  target")
    ok = True
    for name, seconds, peak in rows:
        ratio = seconds / svd_seconds
        verdict = ""
        if name in CCPO_ARMS:
            passed = ratio <= TARGET_RATIO and peak <= TARGET_PEAK_MB
            ok &= passed
            verdict = (
                "ok" if passed else "MISSED"
            ) + f" (<= {TARGET_RATIO} x SVD, <= {TARGET_PEAK_MB} MB)"
        print(f"{name:<20} {seconds:>9.3f} {ratio:>8.4f} {peak:>9.1f}  {verdict}")
    print(f"{'numpy.linalg.svd':<20} {svd_seconds:>9.3f} {1.0:>8.4f}")
    print(f"process max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")

    if args.check_subspace:
        real = features.astype(np.float64)
        mean = real.mean(axis=0)
        start = time.perf_counter()
        fast = principal_directions(features, mean, 3)
        fast_seconds = time.perf_counter() - start
        start = time.perf_counter()
        _, _, vt = np.linalg.svd(
            real - mean, full_matrices=False
        )  # what the reference whitening runs
        reference_seconds = time.perf_counter() - start
        difference = np.linalg.norm(fast @ fast.T - vt[:3].T @ vt[:3], 2)
        print(
            f"whitening subspace vs exact SVD (k = 3): projection difference {difference:.2e} "
            f"({'ok' if difference <= 1e-6 else 'MISSED'} <= 1e-6), found in {fast_seconds:.3f} s"
        )
        print(
            f"reference whitening SVD (float64, centred): {reference_seconds:.2f} s; "
            + ", ".join(
                f"{name} {seconds / reference_seconds:.4f} x"
                for name, seconds, _ in rows
                if name in CCPO_ARMS
            )
        )
        ok &= difference <= 1e-6
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
