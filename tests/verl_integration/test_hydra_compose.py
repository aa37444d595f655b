"""(a) Hydra composes verl-agent's real `ppo_trainer.yaml` with the launcher's full override list,
for every arm and every host profile; the dry-run prints exactly that list."""

from __future__ import annotations

import json
import shlex

import pytest
from typer.testing import CliRunner

from ccpo_cli.arms import list_arms, load_arm
from ccpo_cli.backends.verl.launcher import VerlLaunchRequest, build_launch
from ccpo_cli.backends.verl.protocol import load_protocol
from ccpo_cli.cli.app import app

MODEL = "Qwen/Qwen2.5-7B-Instruct"
PROFILES = sorted(load_protocol().host_profiles)


def compose(verl_home, overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(
        config_dir=str(verl_home / "verl" / "trainer" / "config"), version_base=None
    ):
        return hydra_compose(config_name="ppo_trainer", overrides=overrides)


def expected(value):
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("arm", list_arms())
def test_every_override_composes_into_the_real_config(verl_home, tmp_path, arm, profile):
    from omegaconf import OmegaConf

    launch = build_launch(
        VerlLaunchRequest(
            arm=load_arm(arm),
            model=MODEL,
            gpus=8,
            host_profile=profile,
            runs_root=tmp_path,
            verl_agent=verl_home,
        )
    )
    config = compose(
        verl_home, [item for item in launch.hydra_overrides() if not item.startswith("hydra.")]
    )
    for key, value in launch.overrides.items():
        if key.startswith("hydra."):
            continue
        composed = OmegaConf.select(config, key.lstrip("+"), throw_on_missing=True)
        if OmegaConf.is_config(composed):
            composed = OmegaConf.to_container(composed)
        assert composed == expected(value), f"{key}: composed {composed!r}, launched {value!r}"
    assert config.algorithm.adv_estimator == "ccpo" and config.algorithm.ccpo.arm == arm


def test_hydra_keys_are_valid_overrides_of_the_real_entry_point(verl_home, tmp_path):
    """`hydra.run.dir` is not part of the job config: checked against Hydra's own parser and config."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    launch = build_launch(
        VerlLaunchRequest(
            arm=load_arm("gigpo"), model=MODEL, gpus=8, runs_root=tmp_path, verl_agent=verl_home
        )
    )
    with initialize_config_dir(
        config_dir=str(verl_home / "verl" / "trainer" / "config"), version_base=None
    ):
        config = hydra_compose(
            config_name="ppo_trainer", overrides=launch.hydra_overrides(), return_hydra_config=True
        )
    assert config.hydra.run.dir == str(launch.run_dir / "hydra")


def test_the_dry_run_prints_exactly_the_composed_list(verl_home, tmp_path):
    for profile in PROFILES:
        args = [
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
            "--host-profile",
            profile,
            "--run",
            f"g-{profile}",
            "--verl-agent",
            str(verl_home),
        ]
        launch = build_launch(
            VerlLaunchRequest(
                arm=load_arm("gigpo"),
                model=MODEL,
                gpus=8,
                host_profile=profile,
                run=f"g-{profile}",
                runs_root=tmp_path / "ccpo-runs",
                verl_agent=verl_home,
            )
        )
        as_json = CliRunner().invoke(app, [*args, "--dry-run", "--json"])
        assert as_json.exit_code == 0, as_json.output
        assert json.loads(as_json.stdout)["runs"][0]["hydra_overrides"] == launch.hydra_overrides()
        as_text = CliRunner().invoke(app, [*args, "--dry-run"])
        assert as_text.exit_code == 0, as_text.output
        command = as_text.stdout[as_text.stdout.index("exec ") :]
        words = shlex.split(command.replace("\\\n", " "))
        assert words[2:4] == ["-m", "ccpo_cli.backends.verl.entry"]
        assert words[4:-1] == launch.hydra_overrides() and words[-1] == "$@"
