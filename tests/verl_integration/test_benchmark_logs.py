"""Benchmarks against verl-agent's own code: the metric names its environment managers log
(`success_evaluator`), the env.env_name of every example script, and a WebShop console log
written with verl's real console logger and the real resolved config of verl-agent's
run_webshop.sh, ingested by `ccpo ingest` (docs/benchmarks.md)."""

from __future__ import annotations

import json
import re

import pytest
from helpers_benchmarks import write_webshop_console
from typer.testing import CliRunner

from ccpo_cli.benchmarks import benchmark_for_env_name, detect_benchmark, load_benchmark
from ccpo_cli.cli.app import app
from ccpo_cli.store import get_run, open_db, run_evaluations
from ccpo_cli.store.facts import run_facts

ALFWORLD_GAMES = {
    "pick": "json_2.1.1/valid_seen/pick_and_place_simple-Book-None-Desk-310/trial_T2019/game.tw-pddl",
    "look": "json_2.1.1/valid_seen/look_at_obj_in_light-Pen-None-DeskLamp-308/trial_T2019/game.tw-pddl",
    "clean": "json_2.1.1/valid_seen/pick_clean_then_place_in_recep-Cloth-None-Shelf-424/trial_T2019/game.tw-pddl",
    "heat": "json_2.1.1/valid_seen/pick_heat_then_place_in_recep-Egg-None-Fridge-13/trial_T2019/game.tw-pddl",
    "cool": "json_2.1.1/valid_seen/pick_cool_then_place_in_recep-Apple-None-Microwave-19/trial_T2019/game.tw-pddl",
    "pick2": "json_2.1.1/valid_seen/pick_two_obj_and_place-Pencil-None-Drawer-302/trial_T2019/game.tw-pddl",
}


def success_metrics(manager_class, infos: list[dict]) -> dict[str, float]:
    """What the trainer's validation logs for these final infos: the manager's real
    success_evaluator, averaged and prefixed `val/` as RayPPOTrainer._validate does."""
    manager = manager_class.__new__(manager_class)  # success_evaluator reads only its arguments
    success = manager.success_evaluator(
        total_infos=[[info] for info in infos],
        total_batch_list=[[{"active_masks": True}] for _ in infos],
    )
    return {f"val/{key}": float(values.mean()) for key, values in success.items()}


def test_the_metric_names_verl_agents_managers_log_name_their_benchmark():
    from agent_system.environments.env_manager import (
        AlfWorldEnvironmentManager,
        SearchEnvironmentManager,
        WebshopEnvironmentManager,
    )

    webshop = success_metrics(
        WebshopEnvironmentManager,
        [{"won": True, "task_score": 1.0}, {"won": False, "task_score": 0.4}],
    )
    assert set(webshop) == {"val/success_rate", load_benchmark("webshop").score_metric}
    assert detect_benchmark(webshop) == "webshop"
    alfworld = success_metrics(
        AlfWorldEnvironmentManager,
        [
            {"won": index % 2 == 0, "extra.gamefile": game}
            for index, game in enumerate(ALFWORLD_GAMES.values())
        ],
    )
    declared = load_benchmark("alfworld").task_type_metrics
    assert set(alfworld) - {"val/success_rate"} == set(declared)
    assert detect_benchmark(alfworld) == "alfworld"
    search = success_metrics(
        SearchEnvironmentManager,
        [{"won": True, "data_source": "nq"}, {"won": False, "data_source": "hotpotqa"}],
    )
    assert set(search) == {"val/success_rate", "val/nq_success_rate", "val/hotpotqa_success_rate"}
    assert detect_benchmark(search) == "search"


def test_every_example_scripts_env_name_maps_to_one_benchmark(verl_home):
    scripts = sorted((verl_home / "examples").glob("*/*.sh")) + sorted(
        (verl_home / "recipe").glob("*/*.sh")
    )
    names = {
        match.group(1)
        for script in scripts
        for match in re.finditer(r"env\.env_name=(\S+)", script.read_text(errors="replace"))
    }
    assert {"alfworld/AlfredTWEnv", "Webshop", "search", "Sokoban"} <= names
    assert {
        name: benchmark_for_env_name(name) for name in names if benchmark_for_env_name(name) is None
    } == {}


def _script_overrides(script_text: str, values: dict[str, str]) -> list[str]:
    """The key=value overrides of a script's main_ppo command, its shell variables filled in."""
    command = script_text[script_text.index("verl.trainer.main_ppo") :]
    overrides = []
    for line in command.splitlines()[1:]:
        item = line.strip().rstrip("\\").strip()
        if not item or "=" not in item or item.startswith("$"):
            continue
        overrides.append(re.sub(r"\$(\w+)", lambda m: values[m.group(1)], item).replace("'", ""))
    return overrides


def test_a_webshop_log_from_verl_agents_own_code_ingests_with_its_facts(verl_home, tmp_path):
    from agent_system.environments.env_manager import WebshopEnvironmentManager
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf
    from verl.utils.logger.aggregate_logger import concat_dict_to_str

    script = (verl_home / "examples" / "gigpo_trainer" / "run_webshop.sh").read_text()
    values = {
        "train_data_size": "16",
        "val_data_size": "64",
        "group_size": "8",
        "mode": "mean_norm",
        "ENGINE": "vllm",
        "num_cpus_per_env_worker": "0.1",
        "HOME": str(tmp_path),
    }
    with initialize_config_dir(
        config_dir=str(verl_home / "verl" / "trainer" / "config"), version_base=None
    ):
        config = compose(config_name="ppo_trainer", overrides=_script_overrides(script, values))
    printed = OmegaConf.to_container(config, resolve=True)  # as main_ppo pretty-prints it
    (score_key,) = set(
        success_metrics(WebshopEnvironmentManager, [{"won": False, "task_score": 0.5}])
    ) - {"val/success_rate"}
    log, validations = write_webshop_console(
        tmp_path / "webshop.log",
        config=printed,
        format_line=concat_dict_to_str,
        score_key=score_key,
        episodes=64,
    )
    db_path = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app, ["--db", str(db_path), "ingest", str(log), "--run", "ws", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (
        report["benchmark"] == "webshop"
        and report["new"] == len(validations)
        and report["skipped"] == 0
    )
    db = open_db(db_path)
    assert get_run(db, "ws")["benchmark"] == "webshop"
    rates = {row["step"]: row["success_rate"] for row in run_evaluations(db, "ws")}
    assert rates == {
        step: pytest.approx(100 * round(won / 64, 3)) for step, (won, _) in validations.items()
    }
    facts = run_facts(db, get_run(db, "ws")["id"])["values"]
    assert {
        key: facts[key]
        for key in (
            "estimator",
            "adv_mode",
            "gamma",
            "max_steps",
            "group",
            "batch",
            "lr",
            "kl",
            "temperature",
            "episodes",
            "step_advantage_w",
        )
    } == {
        "estimator": "gigpo",
        "adv_mode": "mean_norm",
        "gamma": 0.95,
        "max_steps": 15,
        "group": 8,
        "batch": 16,
        "lr": 1e-6,
        "kl": 0.01,
        "temperature": 0.4,
        "episodes": 64,
        "step_advantage_w": 1.0,
    }
    # WebShop's config names no evaluation split (its printed `env.alfworld.eval_dataset` is
    # ALFWorld's): the split is not recorded, never the benchmark's default stated as a fact.
    assert "split" not in facts
