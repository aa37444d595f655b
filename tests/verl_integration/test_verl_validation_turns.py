"""Mean turns of validation episodes: measured by the hook around verl-agent's real `_validate`,
logged through the real `Tracking.log` into the run's metrics.jsonl, read back by `ccpo ingest`.

verl-agent logs no `val/episode_length/mean`; the validation rollout below runs live through its
`TrajectoryCollector` (tiny Qwen2 via `HFRollout`, hash game), inside `fit`'s validation before
training (see cpu_trainer.py for what is real and what stands in).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl import setup_hook, worker_env

pytestmark = pytest.mark.slow  # each test runs verl-agent's code for seconds to a minute

REPO = Path(__file__).resolve().parents[2]


def test_validation_mean_turns_reach_metrics_jsonl_and_runs_db(
    verl_agent_home, monkeypatch, tmp_path
):
    from agent_system.multi_turn_rollout import TrajectoryCollector
    from helpers_tiny_lm import tiny_qwen2, train_tokenizer
    from verl.utils.tracking import Tracking

    from verl_integration import cpu_trainer

    arm = load_arm("gigpo")
    metrics_file = tmp_path / "metrics.jsonl"
    for name, value in worker_env.ArmSpec(arm.name, arm.fingerprint, {}).to_environ().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(worker_env.ARM_SET, raising=False)
    monkeypatch.setenv(worker_env.METRICS_JSONL, str(metrics_file))
    # This process's Tracking.log may already mirror another test's file: start from verl's own.
    monkeypatch.setattr(Tracking, "log", getattr(Tracking.log, "__wrapped__", Tracking.log))
    setup_hook.setup()

    tokenizer = train_tokenizer(cpu_trainer.STATES + cpu_trainer.TASKS)
    model = tiny_qwen2(tokenizer)
    config = cpu_trainer.trainer_config(
        verl_agent_home,
        [
            "algorithm.adv_estimator=ccpo",
            "trainer.val_before_train=True",
            "trainer.test_freq=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.val_kwargs.do_sample=True",
            "actor_rollout_ref.rollout.val_kwargs.temperature=1.0",
            "actor_rollout_ref.rollout.val_kwargs.n=4",
        ],
    )
    collector = cpu_trainer.ReplayCollector(TrajectoryCollector(config, tokenizer))
    actor = cpu_trainer.CpuWorkerGroup(config, model, tokenizer)
    val_envs = cpu_trainer.game_manager(
        config, [cpu_trainer.TASKS[i // 4 % 3] for i in range(3 * 4)]
    )
    trainer = cpu_trainer.cpu_trainer(config, tokenizer, collector, actor, val_envs=val_envs)
    torch.manual_seed(1)
    cpu_trainer.run_fit(trainer, seed=1)

    # Two validations (before training, and after step 1), each over verl-agent's own episode lengths.
    assert len(collector.validation_outputs) == 2
    expected = []
    for output in collector.validation_outputs:
        _, first = np.unique(output.non_tensor_batch["traj_uid"], return_index=True)
        expected.append(
            float(np.mean(output.non_tensor_batch["episode_lengths"][first].astype(np.float64)))
        )
    records = [json.loads(line) for line in metrics_file.read_text(encoding="utf-8").splitlines()]
    logged = {
        record["step"]: record.get("val/episode_length/mean")
        for record in records
        if "val/success_rate" in record
    }
    print(f"validation mean turns: logged {logged}, from verl-agent's episode_lengths {expected}")
    assert sorted(logged) == [0, 1]
    np.testing.assert_allclose([logged[0], logged[1]], expected, rtol=0, atol=1e-6)
    assert expected != [
        4.0,
        4.0,
    ]  # some episodes end before max_steps: not a constant any code would give

    database = tmp_path / "runs.db"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ccpo_cli",
            "--db",
            str(database),
            "ingest",
            str(metrics_file),
            "--run",
            "turns",
            "--arm",
            "gigpo",
            "--seed",
            "0",
            "--base-model",
            "tiny",
            "--total-steps",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    with sqlite3.connect(database) as connection:
        rows = connection.execute(
            "SELECT step, mean_turns FROM evaluations ORDER BY step"
        ).fetchall()
    assert [step for step, _ in rows] == [0, 1]
    np.testing.assert_allclose([turns for _, turns in rows], expected, atol=1e-3)
