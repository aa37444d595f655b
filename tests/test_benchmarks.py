"""Benchmarks as data (configs/benchmarks/*.yaml, ccpo_cli/benchmarks.py): what each declares,
how a log's metric names name its benchmark, and the published rows a card may show."""

from __future__ import annotations

import pytest

from ccpo_cli.arms import FLAG_NAMES, load_arm
from ccpo_cli.benchmarks import (
    all_benchmarks,
    benchmark_for_env_name,
    detect_benchmark,
    list_benchmarks,
    load_benchmark,
)
from ccpo_cli.cards.baselines import load_baseline_data, published_comparison
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.facts import facts_from_config, flatten, stated_arm_flags
from ccpo_cli.task_types import TASK_TYPES, VERL_METRIC_NAMES, short_key

# verl-agent's environments (agent_system/environments/env_manager.py make_envs) and the
# env.env_name its example scripts pass.
VERL_AGENT_ENV_NAMES = {
    "alfworld/AlfredTWEnv": "alfworld",
    "Webshop": "webshop",
    "search": "search",
    "Sokoban": "sokoban",
    "gym_cards/EZPoints-v0": "ezpoints",
    "gym_cards/Points24-v0": "points24",
    "gym_cards/NumberLine-v0": "numberline",
    "gym_cards/Blackjack-v0": "blackjack",
    "appworld": "appworld",
}


def test_every_benchmark_declares_its_names_metrics_prompt_and_baselines():
    assert set(list_benchmarks()) == set(VERL_AGENT_ENV_NAMES.values())
    for benchmark in all_benchmarks():
        assert benchmark.display_name and len(benchmark.description) > 80, benchmark.name
        assert (
            benchmark.success_metric == "val/success_rate"
            and benchmark.train_success_metric == "episode/success_rate"
        )
        assert benchmark.prompt_source.startswith("verl-agent agent_system/environments/prompts/")
        assert len(benchmark.prompt_description) > 100, benchmark.name
        for row in benchmark.published_baselines:
            assert (
                row.benchmark == benchmark.name
                and 0 <= row.success <= 100
                and row.protocol in benchmark.protocols
            )
    assert load_benchmark("webshop").score_metric == "val/webshop_task_score (not success_rate)"
    assert load_benchmark("webshop").task_types == () and load_benchmark("sokoban").task_types == ()
    assert [task.key for task in load_benchmark("search").task_types][:2] == ["nq", "triviaqa"]


def test_alfworlds_task_types_come_from_its_benchmark_file_and_keep_their_names():
    alfworld = load_benchmark("alfworld")
    assert (
        list(TASK_TYPES)
        == [task.key for task in alfworld.task_types]
        == ["pick", "look", "clean", "heat", "cool", "pick2"]
    )
    assert (
        TASK_TYPES["pick"] == "pick_and_place_simple"
        and VERL_METRIC_NAMES["pick"] == "pick_and_place"
    )
    assert alfworld.task_type("pick2").metric == "val/pick_two_obj_and_place_success_rate"
    assert short_key("valid_seen/pick_two_obj_and_place-Apple-None-Fridge-1/trial_T1") == "pick2"
    assert short_key("pick_and_place_simple-Book-None-Desk-3") == "pick"
    assert short_key("PICK_HEAT_THEN_PLACE_IN_RECEP") == "heat"
    with pytest.raises(KeyError):
        short_key("stack_two_blocks")


def test_an_unknown_benchmark_is_refused_naming_the_known_ones():
    with pytest.raises(InvalidInput) as error:
        load_benchmark("mujoco")
    assert (
        "mujoco" in str(error.value)
        and "alfworld" in str(error.value)
        and "webshop" in str(error.value)
    )
    with pytest.raises(InvalidInput):
        load_benchmark("../arms/grpo")  # a name, never a path


def test_metric_names_name_the_benchmark_only_when_they_are_its_own():
    assert detect_benchmark(["val/success_rate", "val/pick_and_place_success_rate"]) == "alfworld"
    assert detect_benchmark(["episode/pick_two_obj_and_place_success_rate"]) == "alfworld"
    assert (
        detect_benchmark(["val/success_rate", "val/webshop_task_score (not success_rate)"])
        == "webshop"
    )
    assert detect_benchmark(["episode/webshop_task_score (not success_rate)"]) == "webshop"
    assert (
        detect_benchmark(["val/success_rate", "val/nq_success_rate", "val/hotpotqa_success_rate"])
        == "search"
    )
    # val/success_rate alone is every benchmark's: it names none.
    assert detect_benchmark(["val/success_rate", "episode/success_rate", "actor/entropy"]) is None
    with pytest.raises(InvalidInput, match="2 benchmarks"):
        detect_benchmark(
            ["val/pick_and_place_success_rate", "val/webshop_task_score (not success_rate)"]
        )


@pytest.mark.parametrize(("env_name", "benchmark"), sorted(VERL_AGENT_ENV_NAMES.items()))
def test_verl_agent_env_names_map_to_one_benchmark(env_name, benchmark):
    assert benchmark_for_env_name(env_name) == benchmark
    assert benchmark_for_env_name(env_name.upper()) == benchmark


def test_an_env_name_no_benchmark_claims_names_none():
    assert benchmark_for_env_name("mujoco/HalfCheetah") is None
    assert benchmark_for_env_name(None) is None and benchmark_for_env_name("") is None


def test_a_webshop_run_is_compared_with_webshop_numbers_only():
    data = load_baseline_data()
    webshop = published_comparison(
        "Qwen/Qwen2.5-1.5B-Instruct", "gigpo-table1", data, benchmark="webshop"
    )
    assert webshop["rows"] and {row["benchmark"] for row in webshop["rows"]} == {"webshop"}
    alfworld_rows = {
        (row.method, row.backbone.split("/")[-1], f"{row.success:g}", row.source)
        for row in load_benchmark("alfworld").published_baselines
    }
    assert (
        not {
            (row["method"], row["backbone"], row["success"], row["source"])
            for row in webshop["rows"]
        }
        & alfworld_rows
    )
    assert "GiGPO w/ std 65 (GiGPO paper, Table 1)" in webshop["comparable"]
    assert {row["score"] for row in webshop["rows"] if row["method"] == "GRPO"} == {"75.8", "79.3"}
    alfworld = published_comparison(
        "Qwen/Qwen2.5-1.5B-Instruct", "hgpo-table1", data, benchmark="alfworld"
    )
    assert {row["benchmark"] for row in alfworld["rows"]} == {"alfworld"}
    assert [row["success"] for row in alfworld["rows"]] == [
        "72.8",
        "90.16",
        "92.77",
        "78.64",
        "95.44",
    ]
    # A run whose benchmark is not recorded is set beside no benchmark's numbers.
    assert (
        published_comparison("Qwen/Qwen2.5-1.5B-Instruct", "hgpo-table1", data, benchmark=None)[
            "rows"
        ]
        == []
    )
    assert (
        published_comparison("Qwen/Qwen2.5-1.5B-Instruct", None, data, benchmark="appworld")["rows"]
        == []
    )


def test_stated_flags_of_verl_agents_own_estimators():
    grpo = facts_from_config(
        {
            "algorithm.adv_estimator": "grpo",
            "algorithm.norm_adv_by_std_in_grpo": False,
            "algorithm.gigpo.mode": "mean_std_norm",
            "algorithm.gamma": 1.0,
            "actor_rollout_ref.actor.use_invalid_action_penalty": False,
            "actor_rollout_ref.actor.invalid_action_penalty_coef": 0.1,
        }
    )
    # GRPO's normalisation is norm_adv_by_std_in_grpo; the GiGPO mode printed beside it is not its.
    assert stated_arm_flags(grpo) == {
        "estimator": "grpo",
        "adv_mode": "mean_norm",
        "gamma": 1.0,
        "invalid_penalty": 0.0,
    }
    gigpo = facts_from_config(
        {
            "algorithm.adv_estimator": "gigpo",
            "algorithm.gigpo.mode": "mean_norm",
            "algorithm.gigpo.step_advantage_w": 1.0,
            "algorithm.gamma": 0.95,
        }
    )
    assert stated_arm_flags(gigpo) == {
        "estimator": "gigpo",
        "adv_mode": "mean_norm",
        "gamma": 0.95,
        "step_advantage_w": 1.0,
    }
    assert stated_arm_flags({"lr": 1e-6, "batch": 16}) == {}


def test_stated_flags_of_a_ccpo_launch_are_the_arms_recorded_flags():
    arm = load_arm("return-hard", {"rho": "0.59", "lam_fix": "0.5"})
    flat = {
        "algorithm.adv_estimator": "ccpo",
        "algorithm.ccpo.arm": arm.name,
        "algorithm.ccpo.fingerprint": arm.fingerprint,
        "algorithm.gamma": arm.gamma,
        "actor_rollout_ref.actor.invalid_action_penalty_coef": arm.invalid_penalty,
        # Hydra reads the launcher's recorded values back as YAML: "0.5" arrives as a number, "" as "".
        **{f"algorithm.ccpo.{flag}": value for flag, value in arm.flags().items()},
    }
    flat["algorithm.ccpo.lam_fix"] = 0.5
    facts = facts_from_config(flat)
    assert facts["estimator"] == "ccpo" and set(facts["arm_flags"]) == set(FLAG_NAMES)
    assert stated_arm_flags(facts) == arm.flags()
    grpo_arm = load_arm("grpo")
    grpo_facts = facts_from_config(
        {**flatten({"algorithm": {"adv_estimator": "ccpo", "ccpo": grpo_arm.flags()}})}
    )
    assert grpo_facts["estimator"] == "grpo"  # the arm's estimator, not the launcher's selector
    assert stated_arm_flags(grpo_facts) == grpo_arm.flags()


def test_a_stated_value_outside_its_flags_range_is_kept_as_stated():
    assert stated_arm_flags({"adv_mode": "token_norm", "gamma": 0.9}) == {
        "adv_mode": "token_norm",
        "gamma": 0.9,
    }
