"""The Ray worker setup hook on a real local Ray cluster, the import-time patching it relies on,
verl's estimator registry, and the metrics sink (one flat JSON object per step)."""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl import setup_hook, worker_env
from ccpo_cli.backends.verl.entry import SETUP_HOOK
from ccpo_cli.backends.verl.imports import when_imported
from ccpo_cli.backends.verl.metrics import (
    MetricsSink,
    flat_record,
    last_logged_step,
    mirror_tracking_to_sink,
)
from ccpo_cli.store import get_run, open_db, run_evaluations
from ccpo_cli.store.identity import ExternalArm
from ccpo_cli.store.ingest import ingest_file

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# A trainer module as verl-agent lays it out (a module-level `compute_advantage` the trainer calls
# through the module's globals), written to disk so Ray workers import it like the real one.
FAKE_TRAINER = textwrap.dedent(
    """
    import torch

    def compute_advantage(data, adv_estimator, gamma=1.0, **kwargs):
        if adv_estimator == "grpo":
            data.batch["advantages"] = -3.0 * data.batch["response_mask"].float()
            return data
        raise NotImplementedError(adv_estimator)

    def fit_step(data, adv_estimator):
        # what RayPPOTrainer.fit does: look compute_advantage up in this module at call time
        return compute_advantage(data, adv_estimator=adv_estimator, gamma=0.95)
    """
)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    import ray

    folder = tmp_path_factory.mktemp("fake-verl")
    (folder / "ccpo_fake_trainer.py").write_text(FAKE_TRAINER)
    arm = load_arm("return-hard")
    spec = worker_env.ArmSpec("return-hard", arm.fingerprint)
    env_vars = {
        **spec.to_environ(),
        worker_env.TRAINER_MODULES: "ccpo_fake_trainer",
        "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS), str(folder)]),
        "RAY_AUTH_MODE": "disabled",
    }
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"worker_process_setup_hook": SETUP_HOOK, "env_vars": env_vars},
    )
    try:
        yield ray, arm
    finally:
        ray.shutdown()


def worker_round_trip(adv_estimator: str):
    import ccpo_fake_trainer  # imported after the hook ran: patched on import
    from helpers_verl import per_row, spec_example_one

    from ccpo_cli.backends.verl import setup_hook as hook

    data = ccpo_fake_trainer.fit_step(spec_example_one(), adv_estimator)
    return hook.registered_estimators(), per_row(
        data.batch["advantages"], data.batch["response_mask"]
    ).tolist()


def worker_with_changed_fingerprint():
    launched = os.environ[worker_env.ARM_FINGERPRINT]
    os.environ[worker_env.ARM_FINGERPRINT] = "f" * 64
    try:
        return worker_round_trip("ccpo")
    finally:  # Ray reuses worker processes
        os.environ[worker_env.ARM_FINGERPRINT] = launched


@pytest.mark.slow
def test_worker_sees_the_registered_estimator_and_runs_the_arm(ray_cluster):
    ray, arm = ray_cluster
    from helpers_verl import EXAMPLE_ONE_EXPECTED

    remote = ray.remote(num_cpus=0.1)(worker_round_trip)
    registered, values = ray.get(remote.remote("ccpo"), timeout=120)
    assert registered == {"ccpo": {"arm": "return-hard", "fingerprint": arm.fingerprint}}
    np.testing.assert_allclose(values, EXAMPLE_ONE_EXPECTED["return-hard"], atol=2e-4)
    _, delegated = ray.get(remote.remote("grpo"), timeout=120)
    assert delegated == [-3.0] * 6  # other estimators still go to the trainer's own code


@pytest.mark.slow
def test_fingerprint_mismatch_stops_the_worker(ray_cluster):
    ray, _ = ray_cluster
    # Changed after start-up: the estimator call itself refuses.
    remote = ray.remote(num_cpus=0.1, max_retries=0)(worker_with_changed_fingerprint)
    with pytest.raises(ray.exceptions.RayTaskError, match="fingerprint"):
        ray.get(remote.remote(), timeout=120)
    # Wrong from the start: the setup hook refuses and the worker never runs a task.
    starting_wrong = ray.remote(num_cpus=0.1, max_retries=0)(worker_round_trip).options(
        runtime_env={"env_vars": {worker_env.ARM_FINGERPRINT: "0" * 64}}
    )
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(starting_wrong.remote("ccpo"), timeout=120)
    # The cluster itself is fine: a worker with the launched fingerprint still runs.
    healthy = ray.remote(num_cpus=0.1)(worker_round_trip)
    assert ray.get(healthy.remote("ccpo"), timeout=120)[0]["ccpo"]["arm"] == "return-hard"


def test_setup_hook_refuses_a_mismatch_in_process(monkeypatch):
    monkeypatch.setenv(worker_env.ARM, "gigpo")
    monkeypatch.setenv(worker_env.ARM_FINGERPRINT, load_arm("grpo").fingerprint)
    with pytest.raises(worker_env.ArmMismatch, match="'gigpo' resolves to fingerprint"):
        setup_hook.setup()
    monkeypatch.delenv(worker_env.ARM_FINGERPRINT)
    with pytest.raises(worker_env.ArmMismatch, match="CCPO_ARM_FINGERPRINT is not"):
        setup_hook.setup()
    monkeypatch.delenv(worker_env.ARM)
    setup_hook.setup()  # not a ccpo run: nothing to do, no error


def test_patches_wait_for_their_module(tmp_path, monkeypatch):
    name = "ccpo_late_module_for_test"
    (tmp_path / f"{name}.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    when_imported(name, lambda module: seen.append(module.VALUE))
    assert seen == [] and name not in sys.modules
    module = importlib.import_module(name)
    assert seen == [1] and module.VALUE == 1
    when_imported(name, lambda module: seen.append(2))  # already loaded: runs at once
    assert seen == [1, 2]
    sys.modules.pop(name)


def test_registry_entry_is_idempotent_and_fails_loudly():
    core_algos = types.SimpleNamespace(ADV_ESTIMATOR_REGISTRY={"grpo": object()})
    setup_hook.register_in_verl_registry(core_algos)
    setup_hook.register_in_verl_registry(core_algos)
    assert set(core_algos.ADV_ESTIMATOR_REGISTRY) == {"grpo", "ccpo"}
    with pytest.raises(worker_env.ArmMismatch, match="not wrapped"):
        core_algos.ADV_ESTIMATOR_REGISTRY["ccpo"](token_level_rewards=None)
    taken = types.SimpleNamespace(ADV_ESTIMATOR_REGISTRY={"ccpo": object()})
    with pytest.raises(worker_env.ArmMismatch, match="different"):
        setup_hook.register_in_verl_registry(taken)
    setup_hook.register_in_verl_registry(types.SimpleNamespace())  # verl-agent: no registry


def test_flat_record_is_flat_sorted_and_json_safe():
    record = flat_record(
        3,
        {
            "val/success_rate": np.float64(0.5),
            "b": float("nan"),
            "a": float("inf"),
            "n": np.int64(4),
            "flag": True,
            "name": "x",
            "step": 99,
        },
        wall_time=12.5,
    )
    assert list(record) == ["step", "wall_time", "a", "b", "flag", "n", "name", "val/success_rate"]
    assert record == {
        "step": 3,
        "wall_time": 12.5,
        "a": None,
        "b": None,
        "flag": 1.0,
        "n": 4.0,
        "name": "x",
        "val/success_rate": 0.5,
    }


def test_tracking_mirror_appends_and_the_file_ingests_while_it_grows(tmp_path):
    class Tracking:  # verl's logger facade: log(data, step)
        def __init__(self):
            self.logged = []

        def log(self, data, step, backend=None):
            self.logged.append(step)

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        json.dumps({"step": 0, "wall_time": 1.0, "val/success_rate": 0.125}) + "\n"
    )  # an earlier process
    sink = MetricsSink(path)
    assert mirror_tracking_to_sink(Tracking, sink) is True
    assert mirror_tracking_to_sink(Tracking, sink) is False  # once only
    tracker = Tracking()
    tracker.log(
        {"val/success_rate": 0.5, "val/pick_and_place_success_rate": 1.0, "actor/kl": float("nan")},
        step=5,
    )
    assert tracker.logged == [5]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [0, 5]  # appended, not truncated
    assert lines[1]["actor/kl"] is None and math.isfinite(lines[1]["wall_time"])
    db = open_db(tmp_path / "runs.db")
    ingest_file(db, path, "r", fmt="ccpo", arm=ExternalArm("gigpo", load_arm("gigpo").fingerprint))
    tracker.log({"val/success_rate": 0.75}, step=10)
    ingest_file(db, path, "r", fmt="ccpo")
    assert [(e["step"], e["success_rate"]) for e in run_evaluations(db, "r")] == [
        (0, 12.5),
        (5, 50.0),
        (10, 75.0),
    ]
    assert get_run(db, "r")["last_step"] == 10 and last_logged_step(path) == 10


def test_setup_hook_sink_adds_estimator_diagnostics(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    tracking_module = types.SimpleNamespace(
        Tracking=type("Tracking", (), {"log": lambda self, data, step: None})
    )
    setup_hook.attach_metrics_sink(tracking_module, str(path))
    monkeypatch.setitem(setup_hook._PENDING_METRICS, "ccpo/rows", 6.0)
    tracking_module.Tracking().log({"val/success_rate": 0.5}, 1)
    tracking_module.Tracking().log({"val/success_rate": 0.5}, 2)
    first, second = [json.loads(line) for line in path.read_text().splitlines()]
    assert first["ccpo/rows"] == 6.0 and "ccpo/rows" not in second


def test_entry_starts_ray_with_the_hook_and_the_run_environment(tmp_path):
    from ccpo_cli.backends.verl import entry
    from ccpo_cli.backends.verl.launcher import VerlLaunchRequest, build_launch

    launch = build_launch(
        VerlLaunchRequest(
            arm=load_arm("gigpo"),
            model="m",
            gpus=1,
            host_profile="lean",
            runs_root=tmp_path,
            ray_address="10.0.0.1:6379",
        )
    )
    arguments = entry.ray_init_arguments(launch.hydra_overrides(), dict(launch.environment))
    runtime_env = arguments["runtime_env"]
    assert runtime_env["worker_process_setup_hook"] == "ccpo_cli.backends.verl.setup_hook.setup"
    assert runtime_env["env_vars"][worker_env.ARM] == "gigpo"
    assert runtime_env["env_vars"][worker_env.ARM_FINGERPRINT] == load_arm("gigpo").fingerprint
    assert (
        runtime_env["env_vars"]["OMP_NUM_THREADS"] == "1"
        and runtime_env["env_vars"]["NCCL_DEBUG"] == "WARN"
    )
    assert (
        arguments["address"] == "10.0.0.1:6379" and "num_cpus" not in arguments
    )  # a cluster sizes itself
    local = build_launch(
        VerlLaunchRequest(
            arm=load_arm("gigpo"), model="m", gpus=1, host_profile="lean", runs_root=tmp_path
        )
    )
    assert (
        entry.ray_init_arguments(local.hydra_overrides(), dict(local.environment))["num_cpus"] == 64
    )
