"""(b) `run.sh` -> `entry.py` starts a local Ray cluster; in the worker that runs verl-agent's
TaskRunner, the setup hook has patched the real `compute_advantage`, `adjust_batch`,
`RayPPOTrainer.__init__` and `Tracking.log`, and the real `RayPPOTrainer.__init__` accepts
`adv_estimator=ccpo`. A fingerprint mismatch stops the run. The probe (CCPO_VERL_PROBE) reports
from inside that worker and stops the run where verl-agent would build ALFWorld environments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl import probe, worker_env
from ccpo_cli.backends.verl.entry import SETUP_HOOK
from ccpo_cli.backends.verl.launcher import VerlLaunchRequest, build_launch
from ccpo_cli.backends.verl.protocol import HostProfile, load_protocol
from ccpo_cli.backends.verl.run_folder import prepare_run_folder

REPO = Path(__file__).resolve().parents[2]
# A tiny Ray: two logical CPUs (the TaskRunner takes one), a 100 MB object store, no dashboard.
SMALL_RAY = ["+ray_init.object_store_memory=100000000", "+ray_init.include_dashboard=False"]


def small_host_protocol():
    protocol = load_protocol()
    lean = protocol.host_profile("lean")
    small = HostProfile("lean", {**lean.overrides, "ray_init.num_cpus": 2}, lean.environment)
    return replace(protocol, host_profiles={**protocol.host_profiles, "lean": small})


def run_script(
    verl_home: Path,
    tmp_path: Path,
    arm: str,
    extra_env: dict[str, str],
    fingerprint: str | None = None,
) -> tuple[subprocess.CompletedProcess, object]:
    """Write the run folder as `ccpo train --backend verl` does and run its run.sh (optionally
    with the recorded fingerprint replaced, as when the arm's definition changed since)."""
    launch = build_launch(
        VerlLaunchRequest(
            arm=load_arm(arm),
            model="Qwen/Qwen2.5-7B-Instruct",
            gpus=1,
            host_profile="lean",
            run=f"probe-{arm}",
            runs_root=tmp_path,
            verl_agent=verl_home,
        ),
        protocol=small_host_protocol(),
    )
    prepare_run_folder(launch)
    script = launch.run_dir / "run.sh"
    if fingerprint is not None:
        script.write_text(script.read_text().replace(launch.arm_spec.fingerprint, fingerprint))
    env = {
        **os.environ,
        "VERL_AGENT_HOME": str(verl_home),
        "CCPO_VERL_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(verl_home)]),
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        **extra_env,
    }
    completed = subprocess.run(
        ["bash", str(script), *SMALL_RAY],
        cwd=verl_home,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return completed, launch


def test_the_task_runner_worker_is_patched_and_accepts_ccpo(verl_home, tmp_path):
    report_path = tmp_path / "probe.json"
    completed, launch = run_script(
        verl_home, tmp_path, "gigpo", {worker_env.PROBE: str(report_path)}
    )
    output = completed.stdout + completed.stderr
    assert report_path.is_file(), output[-4000:]
    assert (
        completed.returncode != 0 and probe.STOP_MESSAGE in output
    )  # stopped by the probe, nothing else
    report = json.loads(report_path.read_text())
    assert (
        report["actor_id"] and report["pid"] != os.getpid()
    )  # a Ray actor process, not the test or the driver
    assert report["called_from"] == "TaskRunner.run"
    assert report["patched"] == {
        "compute_advantage": True,
        "adjust_batch": True,
        "RayPPOTrainer.__init__": True,
        "Tracking.log": True,
    }
    assert report["registered"] == {
        "ccpo": {"arm": "gigpo", "fingerprint": load_arm("gigpo").fingerprint}
    }
    assert report["config_adv_estimator"] == "ccpo"
    assert report["trainer_init"] == {
        "accepted": True,
        "use_critic": False,
        "adv_estimator_after_init": "ccpo",
    }
    # Hydra wrote its outputs in the run folder, not in the checkout.
    assert (launch.run_dir / "hydra").is_dir()


def test_a_fingerprint_mismatch_stops_the_launch(verl_home, tmp_path):
    report_path = tmp_path / "probe.json"
    completed, _ = run_script(
        verl_home, tmp_path, "gigpo", {worker_env.PROBE: str(report_path)}, fingerprint="0" * 64
    )
    assert completed.returncode != 0
    assert "ArmMismatch" in completed.stderr and "resolves to fingerprint" in completed.stderr
    assert not report_path.exists()  # refused before any worker ran the trainer


def importer_of_the_real_trainer():
    import verl.trainer.ppo.ray_trainer as trainer_module

    return bool(getattr(trainer_module.compute_advantage, "_ccpo_patched", False))


@pytest.fixture()
def ray_cluster(verl_home):
    import ray

    arm = load_arm("gigpo")
    env_vars = {
        **worker_env.ArmSpec("gigpo", arm.fingerprint).to_environ(),
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests"), str(verl_home)]),
        "RAY_AUTH_MODE": "disabled",
    }
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=100_000_000,
        runtime_env={"worker_process_setup_hook": SETUP_HOOK, "env_vars": env_vars},
    )
    try:
        yield ray
    finally:
        ray.shutdown()


def test_a_worker_whose_fingerprint_differs_never_runs_the_trainer(ray_cluster):
    ray = ray_cluster
    healthy = ray.remote(num_cpus=0.5, max_retries=0)(importer_of_the_real_trainer)
    assert ray.get(healthy.remote(), timeout=300) is True
    wrong = healthy.options(runtime_env={"env_vars": {worker_env.ARM_FINGERPRINT: "0" * 64}})
    with pytest.raises(ray.exceptions.WorkerCrashedError):
        ray.get(wrong.remote(), timeout=300)
