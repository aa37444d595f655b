"""Data for the card and publish tests: a runs.db shaped like the seed card's.

The series are built so that their converged windows (steps >= 70) have exactly the mean and
sd the seed card states; the tests then check that the card reports what the database holds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ccpo_cli import store
from ccpo_cli.arms import Arm
from ccpo_cli.store.identity import ExternalArm

BASE_MODEL = "Qwen/Qwen2.5-7B-Instruct"
TOTAL_STEPS = 150
SHARED_CONFIG = {
    "protocol": "ccpo-alfworld-150",
    "eval_split": "eval_in_distribution",
    "data": {
        "train_batch_size": 16,
        "max_prompt_length": 2048,
        "max_response_length": 512,
        "train_files": "/home/someone/data/train.parquet",
    },
    "env": {"max_steps": 50, "history_length": 2, "rollout": {"n": 8}},
    "actor_rollout_ref": {
        "actor": {"optim": {"lr": 1e-6}, "kl_loss_coef": 0.01, "kl_loss_type": "low_var_kl"}
    },
    "algorithm": {"gamma": 0.95},
}
BEST_TYPES = {"pick": 100.0, "look": 84.5, "clean": 96.7, "heat": 87.5, "cool": 83.8, "pick2": 96.2}


def window_series(mean: float, sd: float, n: int, best: float) -> list[float]:
    """n values with exactly this mean and sample sd whose last value is the maximum `best`."""
    z_last = (best - mean) / sd
    rest = n - 1
    rest_mean = -z_last / rest
    rest_pop_var = ((n - 1) - z_last**2) / rest - rest_mean**2
    pattern = np.sin(np.arange(rest) * 1.7)
    pattern = (pattern - pattern.mean()) / pattern.std()
    z = np.concatenate([rest_mean + np.sqrt(rest_pop_var) * pattern, [z_last]])
    values = mean + sd * z
    assert values.argmax() == n - 1
    return [float(v) for v in values]


def add_run(
    db,
    name: str,
    arm: str | Arm | None,
    *,
    mean: float,
    sd: float,
    n: int,
    best: float,
    last_step: int = 119,
    seed: int = 0,
    total_steps: int = TOTAL_STEPS,
    config: dict | None = None,
    hardware: str = "8xH100",
    best_types: dict | None = None,
    episodes: int | None = 128,
    base_model: str = BASE_MODEL,
) -> None:
    store.ensure_run(
        db,
        name,
        arm=ExternalArm(arm) if isinstance(arm, str) else arm,  # a name, a typed Arm or None
        seed=seed,
        base_model=base_model,
        total_steps=total_steps,
        benchmark="alfworld",
        hardware=hardware,
        backend="verl",
        data_order_seed=0,
        config=config if config is not None else SHARED_CONFIG,
    )
    store.update_run_state(
        db, name, status="running", last_step=last_step, step1_rollout_hash="abc123"
    )
    # A warm-up stretch below the window, then the window itself ending at the best point.
    for step in range(5, 70, 5):
        store.record_evaluation(
            db,
            name,
            step,
            success_rate=20.0 + step * 0.6,
            episodes=episodes,
            temperature=0.4,
            mean_turns=39.0 - step * 0.2,
        )
    window = window_series(mean, sd, n, best)
    steps = [70 + 5 * i for i in range(n)]
    for step, value in zip(steps, window):
        is_best = value == max(window)
        store.record_evaluation(
            db,
            name,
            step,
            success_rate=value,
            episodes=episodes,
            temperature=0.4,
            mean_turns=12.5 if is_best else 15.0,
            train_success_rate=99.2 if is_best else 95.0,
            task_types=(best_types or BEST_TYPES) if is_best else None,
        )


def seed_card_db(path: Path, *, arms: int = 3, grpo: str | None = None):
    """The seed card's database: return-hard (the card's run) and optionally its two sister arms.

    `grpo` adds a GRPO run: "isolated" (same setup) or "contaminated" (a config that differs).
    """
    db = store.open_db(path)
    add_run(db, "return-hard", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    # The seed card publishes the best-scoring checkpoint so far, saved by the trainer at step 115.
    store.record_checkpoint(db, "return-hard", 115, "checkpoints/global_step_115")
    if arms >= 2:
        add_run(db, "return-hard-fbjw", "return-hard-fbjw", mean=90.0, sd=3.1, n=9, best=95.3)
    if arms >= 3:
        add_run(db, "global-successor", "global-successor", mean=77.5, sd=6.3, n=9, best=86.7)
    if grpo == "isolated":
        add_run(db, "grpo-baseline", "grpo", mean=72.0, sd=5.0, n=10, best=80.5)
    elif grpo == "contaminated":
        # A relaunch that silently ran a shorter episode limit: a protocol difference.
        config = dict(
            SHARED_CONFIG, env={"max_steps": 30, "history_length": 2, "rollout": {"n": 8}}
        )
        add_run(db, "grpo-baseline", "grpo", mean=72.0, sd=5.0, n=10, best=80.5, config=config)
    return db
