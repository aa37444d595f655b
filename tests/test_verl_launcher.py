"""`ccpo train --backend verl`: the launch built from the protocol file, the host profile and the arm.

Everything here runs without verl-agent and without a GPU; the one test that starts a process
uses a stand-in checkout whose `verl.trainer.main_ppo` only checks what it was given and writes
metrics the way the real trainer's sink would.
"""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl import worker_env
from ccpo_cli.backends.verl.follow import start
from ccpo_cli.backends.verl.launcher import LAUNCHER_KEYS, VerlLaunchRequest, build_launch
from ccpo_cli.backends.verl.protocol import hydra_value, load_protocol
from ccpo_cli.backends.verl.run_folder import prepare_run_folder, render_run_script
from ccpo_cli.cli.app import app
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.paths import configs_dir
from ccpo_cli.store import get_run, open_db, run_evaluations

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def request(
    tmp_path: Path, *, arm: str = "return-hard", arm_overrides: dict | None = None, **changes
) -> VerlLaunchRequest:
    fields = dict(
        arm=load_arm(arm, arm_overrides), model=MODEL, gpus=8, runs_root=tmp_path / "ccpo-runs"
    )
    fields.update(changes)
    return VerlLaunchRequest(**fields)


def bare(key: str) -> str:
    return key.lstrip("+")


def test_override_list_is_the_protocol_file_plus_the_arm(tmp_path):
    protocol_file = yaml.safe_load((configs_dir() / "protocol" / "alfworld.yaml").read_text())
    arm = load_arm("return-hard")
    launch = build_launch(request(tmp_path))
    overrides = {bare(key): value for key, value in launch.overrides.items()}

    # Every protocol key is launched, with the file's value unless the launcher or the arm owns it.
    arm_owned = {
        "algorithm.adv_estimator",
        "algorithm.gamma",
        "actor_rollout_ref.actor.invalid_action_penalty_coef",
    }
    for key, value in protocol_file["overrides"].items():
        assert key in overrides, key
        if key not in LAUNCHER_KEYS and key not in arm_owned:
            assert overrides[key] == value, key
    # The arm: by name, by fingerprint and flag by flag.
    assert overrides["algorithm.adv_estimator"] == "ccpo"
    assert overrides["algorithm.ccpo.arm"] == "return-hard"
    assert overrides["algorithm.ccpo.fingerprint"] == arm.fingerprint
    for flag, value in arm.flags().items():
        assert overrides[f"algorithm.ccpo.{flag}"] == value, flag
    assert overrides["algorithm.gamma"] == arm.gamma
    # Nothing else: protocol + arm + the launcher's own keys (run folder, names, resume mode).
    extra = (
        set(overrides)
        - set(protocol_file["overrides"])
        - {f"algorithm.ccpo.{flag}" for flag in arm.flags()}
    )
    assert extra <= set(LAUNCHER_KEYS) | {"algorithm.ccpo.arm", "algorithm.ccpo.fingerprint"}
    # Arm keys are new to verl's schema: Hydra needs the + prefix.
    assert (
        "+algorithm.ccpo.arm" in launch.overrides and "algorithm.ccpo.arm" not in launch.overrides
    )
    # The workers get the arm through the environment the entry module hands to Ray.
    assert launch.environment[worker_env.ARM] == "return-hard"
    assert launch.environment[worker_env.ARM_FINGERPRINT] == arm.fingerprint
    forwarded = launch.environment["CCPO_WORKER_ENV_KEYS"].split(",")
    assert {
        worker_env.ARM,
        worker_env.ARM_FINGERPRINT,
        worker_env.METRICS_JSONL,
        "VLLM_ATTENTION_BACKEND",
    } <= set(forwarded)
    assert launch.argv()[1:3] == ["-m", "ccpo_cli.backends.verl.entry"]


def test_host_profile_changes_only_its_own_keys(tmp_path):
    reference = build_launch(request(tmp_path))
    lean = build_launch(request(tmp_path, host_profile="lean", gpus=1))
    profile = load_protocol().host_profile("lean")
    for key, value in profile.overrides.items():
        assert lean.overrides[key] == value
    untouched = set(reference.overrides) - set(profile.overrides) - set(LAUNCHER_KEYS)
    for key in untouched:
        if "CCPO_" not in key:
            assert lean.overrides[key] == reference.overrides[key], key
    assert lean.environment["OMP_NUM_THREADS"] == "1"
    with pytest.raises(InvalidInput, match="unknown host profile"):
        build_launch(request(tmp_path, host_profile="laptop"))


def test_dry_run_prints_the_launch_with_protocol_values_and_arm_flags(tmp_path):
    db = tmp_path / "runs.db"
    result = runner.invoke(
        app,
        [
            "--db",
            str(db),
            "train",
            "--arm",
            "return-hard",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "8",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    for expected in (
        "algorithm.gamma=0.95",
        "env.rollout.n=8",
        "data.train_batch_size=16",
        "env.max_steps=50",
        "algorithm.adv_estimator=ccpo",
        "+algorithm.ccpo.arm=return-hard",
        "+algorithm.ccpo.gate=hard",
        "+algorithm.ccpo.target=return",
        "+algorithm.ccpo.rho=0.0",
        "+algorithm.ccpo.edge_w=1.0",
        "trainer.resume_mode=disable",
        f"actor_rollout_ref.model.path={MODEL}",
        "trainer.n_gpus_per_node=8",
        "-m ccpo_cli.backends.verl.entry",
        "export CCPO_VERL_ENTRYPOINT=verl.trainer.main_ppo",
        "export CCPO_ARM=return-hard",
    ):
        assert expected in out, expected
    assert "resume_mode=auto" not in out
    assert not db.exists()  # a dry run records nothing
    assert not (tmp_path / "ccpo-runs").exists()  # and writes no run folder: it only prints run.sh
    assert (
        out.startswith("#!/usr/bin/env bash\n") and out.count("#!/usr/bin/env bash") == 1
    )  # one document
    as_json = runner.invoke(
        app,
        [
            "--db",
            str(db),
            "train",
            "--arm",
            "return-hard",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "8",
            "--dry-run",
            "--json",
        ],
    )
    (config,) = json.loads(as_json.stdout)["runs"]
    assert config["arm"]["fingerprint"] == load_arm("return-hard").fingerprint
    assert "launched_at" not in config
    assert not (tmp_path / "ccpo-runs").exists()


def test_arm_overrides_reach_hydra_the_workers_and_the_fingerprint(tmp_path):
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "return-hard",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "4",
            "--set",
            "edge_w=0",
            "--run",
            "ablation",
            "--dry-run",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (config,) = document["runs"]
    changed = load_arm("return-hard", {"edge_w": "0"})
    assert changed.fingerprint != load_arm("return-hard").fingerprint
    assert config["arm"]["fingerprint"] == changed.fingerprint
    assert config["overrides"]["+algorithm.ccpo.edge_w"] == 0.0
    assert (
        config["worker_environment"][worker_env.ARM_SET] == "edge_w=0.0"
    )  # the flag's recorded form
    spec = worker_env.ArmSpec.from_environ(config["worker_environment"])
    assert load_arm(spec.name, spec.overrides).fingerprint == spec.fingerprint


@pytest.mark.parametrize(
    "gpus,nnodes,ok",
    [
        (1, 1, True),
        (2, 1, True),
        (4, 2, True),
        (8, 2, True),
        (16, 1, True),
        (3, 1, False),
        (6, 1, False),
        (2, 3, False),
        (32, 1, False),
    ],
)
def test_gpu_count_must_divide_the_batch_of_16(tmp_path, gpus, nnodes, ok):
    # The lean profile runs vLLM without tensor parallelism, so only the batch split matters here.
    wanted = request(tmp_path, gpus=gpus, nnodes=nnodes, host_profile="lean")
    if ok:
        assert build_launch(wanted).overrides["trainer.n_gpus_per_node"] == gpus
    else:
        with pytest.raises(InvalidInput, match="must divide evenly"):
            build_launch(wanted)


def test_gpu_check_message_via_cli(tmp_path):
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "6",
            "--dry-run",
        ],
    )
    assert result.exit_code == 3
    assert "must divide evenly over 6 GPUs" in result.stderr
    assert "Traceback" not in result.output
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "1",
            "--dry-run",
        ],
    )
    assert result.exit_code == 3 and "--host-profile lean" in result.stderr


def test_resume_needs_a_real_checkpoint_and_reads_the_tracker_file(tmp_path):
    checkpoints = tmp_path / "old" / "checkpoints"
    (checkpoints / "global_step_20").mkdir(parents=True)
    (checkpoints / "global_step_25").mkdir()  # a partial save newer than the tracker
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("20\n")
    launch = build_launch(request(tmp_path, resume=checkpoints))
    assert launch.overrides["trainer.resume_mode"] == "resume_path"
    assert launch.overrides["trainer.resume_from_path"] == str(
        (checkpoints / "global_step_20").resolve()
    )
    fresh = build_launch(request(tmp_path))
    assert fresh.overrides["trainer.resume_mode"] == "disable"
    assert "trainer.resume_from_path" not in fresh.overrides
    with pytest.raises(InvalidInput, match="not a verl checkpoint"):
        build_launch(request(tmp_path, resume=tmp_path / "old"))


def test_placeholder_parquets_have_one_row_per_game_and_step(tmp_path):
    launch = build_launch(request(tmp_path, tasks=8, gpus=8))
    prepare_run_folder(launch)
    train = pq.read_table(launch.data_dir / "train.parquet").to_pylist()
    test = pq.read_table(launch.data_dir / "test.parquet").to_pylist()
    assert len(train) == 8 and len(test) == 128  # one epoch of train rows = one training step
    assert train[3] == {
        "data_source": "text",
        "prompt": [{"role": "user", "content": ""}],
        "ability": "agent",
        "extra_info": {"split": "train", "index": 3},
    }
    assert launch.overrides["data.train_batch_size"] == 8
    assert launch.overrides["data.train_files"] == str(launch.data_dir / "train.parquet")


@pytest.mark.slow
def test_without_verl_agent_everything_but_the_launch_works(tmp_path, monkeypatch):
    monkeypatch.delenv("VERL_AGENT_HOME", raising=False)
    db = tmp_path / "runs.db"
    result = runner.invoke(
        app,
        [
            "--db",
            str(db),
            "train",
            "--arm",
            "gigpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--run",
            "g",
        ],
    )
    assert result.exit_code == 1
    assert (
        "VERL_AGENT_HOME" in result.stderr
        and "--verl-agent" in result.stderr
        and "not on PyPI" in result.stderr
    )
    assert "Traceback" not in result.output
    dry = runner.invoke(
        app,
        [
            "--db",
            str(db),
            "train",
            "--arm",
            "gigpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--run",
            "g",
            "--dry-run",
        ],
    )
    assert dry.exit_code == 0 and "exec " in dry.stdout and not (tmp_path / "ccpo-runs").exists()


FAKE_MAIN_PPO = textwrap.dedent(
    """
    # Stand-in for verl-agent's trainer entry point, reached through ccpo's entry module: checks
    # the launch and that Ray workers run the ccpo hook, then writes two steps of metrics to the
    # sink the way the hook's Tracking mirror does.
    import json, os, sys
    import ray

    def main():
        args = dict(arg.split("=", 1) for arg in sys.argv[1:])
        assert args["algorithm.adv_estimator"] == "ccpo", args
        assert args["trainer.resume_mode"] == os.environ.get("EXPECT_RESUME_MODE", "disable"), args
        assert args["+algorithm.ccpo.arm"] == os.environ["CCPO_ARM"]
        assert args["+algorithm.ccpo.fingerprint"].strip('"') == os.environ["CCPO_ARM_FINGERPRINT"]
        assert ray.is_initialized()

        @ray.remote(num_cpus=0)
        def worker_view():
            from ccpo_cli.backends.verl import setup_hook
            return os.environ.get("CCPO_ARM"), setup_hook.registered_estimators()

        arm, registered = ray.get(worker_view.remote())
        assert arm == os.environ["CCPO_ARM"], arm
        assert registered["ccpo"]["fingerprint"] == os.environ["CCPO_ARM_FINGERPRINT"], registered
        with open(os.environ["CCPO_METRICS_JSONL"], "a") as sink:
            for step, rate in ((0, 0.25), (5, 0.5)):
                sink.write(json.dumps({"step": step, "wall_time": 1.0 + step, "val/success_rate": rate,
                                       "val/pick_and_place_success_rate": rate, "episode/success_rate": None}) + "\\n")
        ray.shutdown()

    if __name__ == "__main__":  # the entry module runs it as `python -m` would
        main()
    """
)


def fake_verl_agent(root: Path) -> Path:
    (root / "verl" / "trainer").mkdir(parents=True)
    (root / "agent_system").mkdir()
    (root / "verl" / "__init__.py").write_text("")
    (root / "verl" / "trainer" / "__init__.py").write_text("")
    (root / "verl" / "trainer" / "main_ppo.py").write_text(FAKE_MAIN_PPO)
    return root


@pytest.mark.slow
def test_start_records_the_run_and_ingests_its_metrics(tmp_path, monkeypatch):
    home = fake_verl_agent(tmp_path / "verl-agent")
    monkeypatch.setenv("CCPO_VERL_PYTHON", sys.executable)
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    )
    monkeypatch.setenv("WANDB_MODE", "disabled")  # the reference profile logs to wandb
    launch = build_launch(request(tmp_path, arm="gigpo", gpus=2, verl_agent=home, run="g0"))
    db = open_db(tmp_path / "runs.db")
    code = start(launch, db, poll_seconds=0.2, log=lambda message: None)
    assert code == 0, (launch.run_dir / "train.log").read_text()
    run = get_run(db, "g0")
    assert run["arm"] == "gigpo" and run["arm_fingerprint"] == load_arm("gigpo").fingerprint
    assert run["backend"] == "verl" and run["status"] == "finished" and run["last_step"] == 5
    evaluations = run_evaluations(db, "g0")
    assert [(e["step"], e["success_rate"]) for e in evaluations] == [(0, 25.0), (5, 50.0)]
    config = json.loads((launch.run_dir / "config.json").read_text())
    assert config["launched_at"] and config["pid"] > 0
    assert int((launch.run_dir / "pid").read_text()) == config["pid"]
    # A second fresh launch into the same folder would silently continue: refused.
    with pytest.raises(InvalidInput, match="already launched"):
        start(build_launch(request(tmp_path, arm="gigpo", gpus=2, verl_agent=home, run="g0")), db)
    # An explicit resume is allowed; the earlier launch record is kept beside the new one.
    checkpoints = launch.run_dir / "checkpoints"
    (checkpoints / "global_step_5").mkdir(parents=True)
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("5")
    monkeypatch.setenv("EXPECT_RESUME_MODE", "resume_path")
    resumed = build_launch(
        request(tmp_path, arm="gigpo", gpus=2, verl_agent=home, run="g0", resume=checkpoints)
    )
    assert start(resumed, db, poll_seconds=0.2, log=lambda message: None) == 0
    assert len(list(launch.run_dir.glob("config.*.json"))) == 1
    assert len(run_evaluations(db, "g0")) == 2  # the same metrics again: nothing duplicated
    # Resuming under another arm would relabel the run: refused by the database.
    other = build_launch(
        request(tmp_path, arm="grpo", gpus=2, verl_agent=home, run="g0", resume=checkpoints)
    )
    written_before = (launch.run_dir / "config.json").read_text()
    with pytest.raises(InvalidInput, match="arm"):
        start(other, db, poll_seconds=0.2, log=lambda message: None)
    assert (launch.run_dir / "config.json").read_text() == written_before


def test_a_folder_that_is_not_verl_agent_is_named(tmp_path):
    launch = build_launch(request(tmp_path, verl_agent=tmp_path))
    with pytest.raises(CcpoError, match="is not a verl-agent checkout"):
        start(launch, open_db(tmp_path / "runs.db"))


@pytest.mark.parametrize(
    "value,text",
    [
        (True, "True"),
        (False, "False"),
        (None, "null"),
        (16, "16"),
        (0.95, "0.95"),
        (1e-6, "1e-06"),
        ("vllm", "vllm"),
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct"),
        ("hidden+ctx", '"hidden+ctx"'),
        ("", '""'),
        ("true", '"true"'),
        ("0", '"0"'),
        ("4b61", '"4b61"'),
        (["console", "wandb"], "[console,wandb]"),
        ('say "hi"', '"say \\"hi\\""'),
    ],
)
def test_hydra_values(value, text):
    assert hydra_value(value) == text


@pytest.mark.slow
def test_seeds_make_one_launch_each(tmp_path):
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--seeds",
            "0,1",
            "--run",
            "grpo",
            "--dry-run",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [(r["run"], r["seed"], r["overrides"]["env.seed"]) for r in runs] == [
        ("grpo-seed0", 0, 0),
        ("grpo-seed1", 1, 1),
    ]
    bad = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--seeds",
            "0,x",
            "--dry-run",
        ],
    )
    assert bad.exit_code == 3  # a malformed seed list is invalid input, as in `ccpo eval --seeds`


@pytest.mark.parametrize("has_gpu", [False, True])
def test_default_backend_follows_the_gpu(tmp_path, monkeypatch, has_gpu):
    import ccpo_cli.backends.device as device

    monkeypatch.setattr(device, "gpu_available", lambda: has_gpu)
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "return-hard",
            "--steps",
            "3",
            "--tasks",
            "2",
            "--dry-run",
            "--json",
        ],
    )
    if has_gpu:
        assert result.exit_code == 2 and "--backend verl needs --model" in result.stderr
        assert "--backend local" not in result.stdout
    else:
        assert result.exit_code == 0, result.output
        (run,) = json.loads(result.stdout)["runs"]
        assert run["backend"] == "local" and run["run"] == "return-hard-seed0"
        assert run["options"] == {"steps": 3, "tasks": 2}


@pytest.mark.slow
def test_options_of_the_other_backend_are_refused_not_ignored(tmp_path):
    db = ["--db", str(tmp_path / "runs.db")]
    local = runner.invoke(
        app, [*db, "train", "--arm", "grpo", "--backend", "local", "--gpus", "8", "--dry-run"]
    )
    assert local.exit_code == 2 and "--gpus only apply to --backend verl" in local.stderr
    verl = runner.invoke(
        app,
        [
            *db,
            "train",
            "--arm",
            "grpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--workers",
            "4",
            "--dry-run",
        ],
    )
    assert verl.exit_code == 2 and "--workers only apply to --backend local" in verl.stderr
    unknown = runner.invoke(
        app,
        [
            *db,
            "train",
            "--arm",
            "no-such-arm",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--dry-run",
        ],
    )
    assert unknown.exit_code == 2 and "unknown arm" in unknown.stderr


def test_run_sh_round_trips_through_the_shell_and_hydras_parser(tmp_path):
    # hydra-core is what verl's main_ppo parses its command line with: every override must come
    # back as the value the launcher meant, after shell quoting in run.sh.
    import shlex

    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType

    launch = build_launch(
        request(
            tmp_path / "a folder with spaces",
            arm="return-hard-fbjw",
            gpus=4,
            arm_overrides={"lam_fix": "0.5"},
            run="odd run 'name'",
        )
    )
    script = render_run_script(launch)
    command = script[script.index("exec ") :]
    words = shlex.split(command.replace("\\\n", " "))
    module_at = words.index("-m")
    assert words[module_at + 1] == "ccpo_cli.backends.verl.entry" and words[-1] == "$@"
    parser = OverridesParser.create()
    parsed = [parser.parse_override(word) for word in words[module_at + 2 : -1]]
    assert len(parsed) == len(launch.overrides)
    for override, (key, value) in zip(parsed, launch.overrides.items()):
        assert override.key_or_group == key.lstrip("+"), key
        assert override.value() == value, key
        expected_type = OverrideType.ADD if key.startswith("+") else OverrideType.CHANGE
        assert override.type == expected_type, key
    values = {override.key_or_group: override.value() for override in parsed}
    assert (
        values["algorithm.ccpo.lam_fix"] == "0.5" and values["algorithm.ccpo.phi"] == "hidden+ctx"
    )
    assert values["trainer.experiment_name"] == "odd run 'name'"
    assert " " in values["data.train_files"]


# ---- issue 10 fixes: commit, worker environment, wandb, LoRA, checkpoints --------------------


def verl_agent_snapshot(root: Path, commit: str, env_vars: dict[str, str] | None = None) -> Path:
    """A checkout without .git whose SOURCE.md names its commit, as a source snapshot of verl-agent does."""
    home = fake_verl_agent(root)
    (home / "SOURCE.md").write_text(
        f"# snapshot\n\nThe files of verl-agent at upstream commit `{commit}` (2026).\n"
    )
    if env_vars is not None:
        (home / "verl" / "trainer" / "constants_ppo.py").write_text(
            f"PPO_RAY_RUNTIME_ENV = {{'env_vars': {env_vars!r}}}\n"
        )
    return home


def test_the_checkout_commit_is_recorded_and_an_untested_one_is_named(tmp_path):
    tested = build_launch(
        request(tmp_path, verl_agent=verl_agent_snapshot(tmp_path / "a", "20bd331"))
    )
    document = tested.config_document()
    assert (
        document["verl_agent_commit"] == "20bd331"
        and document["verl_agent_source"]["commit_source"] == "SOURCE.md"
    )
    assert document["warnings"] == []
    older = build_launch(
        request(tmp_path, verl_agent=verl_agent_snapshot(tmp_path / "b", "4f1e2d3"))
    )
    assert older.config_document()["verl_agent_commit"] == "4f1e2d3"
    assert any("not the tested commit 20bd331" in w for w in older.warnings)
    prepare_run_folder(older)
    script = (older.run_dir / "run.sh").read_text()
    assert "# verl-agent commit: 4f1e2d3 (tested: 20bd331)" in script and "# WARNING:" in script


def test_dry_run_json_names_commit_worker_env_padding_rule_and_checkpoints(tmp_path):
    home = verl_agent_snapshot(
        tmp_path / "va", "20bd331", {"NCCL_CUMEM_ENABLE": "0", "TOKENIZERS_PARALLELISM": "true"}
    )
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "gigpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "8",
            "--dry-run",
            "--json",
            "--verl-agent",
            str(home),
        ],
    )
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    assert run["verl_agent_commit"] == "20bd331"
    env_vars = run["worker_runtime_env"]["env_vars"]
    assert env_vars["NCCL_CUMEM_ENABLE"] == "0" and env_vars["CCPO_ARM"] == "gigpo"
    assert run["worker_runtime_env"]["worker_process_setup_hook"].endswith("setup_hook.setup")
    assert run["padding_rule"]["rule"] == load_arm("gigpo").padding == "upstream"
    assert "verl-agent's own" in run["padding_rule"]["meaning"]
    assert run["checkpoints"]["save_freq"] == run["overrides"]["trainer.test_freq"] == 5
    assert run["overrides"]["trainer.save_freq"] == 5


def test_entry_merges_verl_agents_runtime_env_under_the_runs_own(tmp_path):
    from ccpo_cli.backends.verl import entry

    launch = build_launch(request(tmp_path, host_profile="lean", gpus=1))
    environ = dict(launch.environment)
    verl_env = {
        "env_vars": {"NCCL_CUMEM_ENABLE": "0", "TOKENIZERS_PARALLELISM": "true"},
        "working_dir": None,
    }
    arguments = entry.ray_init_arguments(launch.hydra_overrides(), environ, verl_env)
    env_vars = arguments["runtime_env"]["env_vars"]
    assert env_vars["NCCL_CUMEM_ENABLE"] == "0"
    assert (
        env_vars["TOKENIZERS_PARALLELISM"] == "false"
    )  # the lean profile's value wins over verl's
    assert arguments["runtime_env"]["worker_process_setup_hook"] == entry.SETUP_HOOK
    assert "working_dir" in arguments["runtime_env"]
    # A verl without constants_ppo: the older defaults.
    assert (
        entry.ray_init_arguments([], {}, None)["runtime_env"]["env_vars"]
        == entry.VERL_WORKER_DEFAULTS
    )


def test_save_every_overrides_and_is_shown(tmp_path):
    launch = build_launch(request(tmp_path, save_every=3, eval_every=10))
    assert (
        launch.overrides["trainer.save_freq"] == 3
        and launch.checkpoints["source"] == "--save-every"
    )
    assert build_launch(request(tmp_path, eval_every=10)).overrides["trainer.save_freq"] == 10
    lean = build_launch(request(tmp_path, host_profile="lean", gpus=1))
    assert lean.overrides["trainer.save_freq"] == lean.overrides["trainer.test_freq"]
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "8",
            "--dry-run",
            "--save-every",
            "0",
        ],
    )
    assert result.exit_code == 3 and "--save-every" in result.stderr


def test_only_the_newest_and_the_best_checkpoint_are_kept(tmp_path):
    from ccpo_cli.backends.verl.preflight import prune_checkpoints

    root = tmp_path / "checkpoints"
    for step in (5, 10, 15, 20, 25):
        (root / f"global_step_{step}" / "actor").mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text("20")  # step 25 is still being written
    removed = prune_checkpoints(root, best_step=10)
    assert sorted(p.name for p in removed) == ["global_step_15", "global_step_5"]
    assert sorted(p.name for p in root.glob("global_step_*")) == [
        "global_step_10",
        "global_step_20",
        "global_step_25",
    ]


@pytest.mark.slow
def test_wandb_without_credentials_is_refused_before_launch(tmp_path, monkeypatch):
    home = fake_verl_agent(tmp_path / "verl-agent")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "NETRC"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    db = tmp_path / "runs.db"
    args = [
        "--db",
        str(db),
        "train",
        "--arm",
        "gigpo",
        "--backend",
        "verl",
        "--model",
        MODEL,
        "--gpus",
        "2",
        "--run",
        "w",
        "--verl-agent",
        str(home),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 3, result.output
    assert (
        "wandb login" in result.stderr
        and "WANDB_API_KEY" in result.stderr
        and "Traceback" not in result.output
    )
    assert not (tmp_path / "ccpo-runs" / "w").exists()  # nothing written
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / ".netrc").write_text("machine api.wandb.ai\n  login user\n  password k\n")
    from ccpo_cli.backends.verl.preflight import wandb_credentials

    assert wandb_credentials({}, tmp_path / "home") is not None
    assert (
        wandb_credentials({"WANDB_MODE": "offline"}, tmp_path / "nowhere") == "WANDB_MODE=offline"
    )


def test_lora_with_a_feature_reading_arm_is_refused(tmp_path):
    from ccpo_cli.arms import features_active

    feature_arm = "global-successor"
    assert features_active(load_arm(feature_arm))
    protocol = load_protocol()
    lora = dict(protocol.overrides, **{"actor_rollout_ref.model.lora_rank": 64})
    from dataclasses import replace

    with pytest.raises(InvalidInput, match="LoRA"):
        build_launch(request(tmp_path, arm=feature_arm), protocol=replace(protocol, overrides=lora))
    assert (
        build_launch(
            request(tmp_path, arm="gigpo"), protocol=replace(protocol, overrides=lora)
        ).overrides["actor_rollout_ref.model.lora_rank"]
        == 64
    )
