"""(e) The real `verl.utils.tracking.Tracking.log`, patched by the setup hook, feeds metrics.jsonl;
`ccpo ingest` reads it and runs.db shows the evaluations. Plus the entry module's merge of
verl-agent's real Ray runtime environment."""

from __future__ import annotations

import importlib
import json

from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl import checkout, entry, setup_hook, worker_env
from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db, run_evaluations


def test_real_tracking_log_feeds_metrics_jsonl_and_ingest(tmp_path, monkeypatch):
    arm = load_arm("gigpo")
    metrics = tmp_path / "metrics.jsonl"
    for name, value in {
        **worker_env.ArmSpec(arm.name, arm.fingerprint).to_environ(),
        worker_env.METRICS_JSONL: str(metrics),
        worker_env.RUN: "g",
    }.items():
        monkeypatch.setenv(name, value)
    tracking = importlib.import_module("verl.utils.tracking")
    original = tracking.Tracking.log
    try:
        setup_hook.setup()
        assert getattr(tracking.Tracking.log, "_ccpo_sink", None) is not None
        logger = tracking.Tracking(
            project_name="ccpo-test", experiment_name="g", default_backend=["console"]
        )
        logger.log(
            data={
                "episode/success_rate": 0.5,
                "val/success_rate": 0.25,
                "val/pick_and_place_success_rate": 0.5,
            },
            step=0,
        )
        logger.log(data={"episode/success_rate": 0.75, "actor/entropy": float("nan")}, step=1)
        logger.log(data={"val/success_rate": 0.5, "val/pick_and_place_success_rate": 1.0}, step=5)
    finally:
        tracking.Tracking.log = original
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 5]
    assert records[1]["actor/entropy"] is None  # NaN becomes null
    db_path = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(db_path),
            "ingest",
            str(metrics),
            "--run",
            "g",
            "--arm",
            "gigpo",
            "--format",
            "ccpo",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    evaluations = run_evaluations(open_db(db_path), "g")
    assert [(e["step"], e["success_rate"]) for e in evaluations] == [(0, 25.0), (5, 50.0)]


def test_entry_merges_verl_agents_real_runtime_env(verl_home, monkeypatch):
    for name in ("NCCL_CUMEM_ENABLE", "VLLM_ALLREDUCE_USE_SYMM_MEM", "CUDA_DEVICE_MAX_CONNECTIONS"):
        monkeypatch.delenv(name, raising=False)
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    verl_env = entry.verl_runtime_env()
    assert verl_env == get_ppo_ray_runtime_env()
    environ = {
        entry.FORWARD_ENV: "CCPO_ARM,TOKENIZERS_PARALLELISM",
        "CCPO_ARM": "gigpo",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env_vars = entry.ray_init_arguments([], environ, verl_env)["runtime_env"]["env_vars"]
    assert env_vars["NCCL_CUMEM_ENABLE"] == "0" and env_vars["VLLM_ALLREDUCE_USE_SYMM_MEM"] == "0"
    assert env_vars["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    assert env_vars["CCPO_ARM"] == "gigpo" and env_vars["TOKENIZERS_PARALLELISM"] == "false"
    # The dry-run's static reading of the same module gives the same variables (before verl drops
    # those already set in the launching process, which Ray workers on that host inherit).
    from verl.trainer.constants_ppo import PPO_RAY_RUNTIME_ENV

    assert checkout.ray_runtime_env_vars(verl_home) == PPO_RAY_RUNTIME_ENV["env_vars"]


def test_the_checkout_commit_is_the_tested_one(verl_home):
    commit, source = checkout.read_commit(verl_home)
    assert checkout.is_tested_commit(commit), (commit, source)
    assert checkout.describe(verl_home)["warning"] is None
