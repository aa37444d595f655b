"""Cards and ingest say only what the data holds, and record the protocol facts a config states.

Asked for in issue 11, defects 2, 3, 4, 6, 7, 8 on cards and ingest, and the protocol facts
(Deliver 3, 4).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_cards import add_run
from helpers_store import acceptance_rows, write_console
from huggingface_hub import ModelCard
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, lint_card, render_card
from ccpo_cli.cli.app import app
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()
REPO = Path(__file__).resolve().parents[1]
HYDRA_CONFIG = """
data: {train_batch_size: 16, max_prompt_length: 2048, max_response_length: 512}
actor_rollout_ref:
  model: {path: Qwen/Qwen2.5-7B-Instruct}
  actor: {optim: {lr: 1.0e-6}, kl_loss_coef: 0.01, kl_loss_type: low_var_kl}
  rollout: {val_kwargs: {temperature: 0.4}}
algorithm: {gamma: 0.95, adv_estimator: grpo}
env: {seed: 0, max_steps: 50, history_length: 2, rollout: {n: 8}, alfworld: {eval_dataset: eval_in_distribution}}
trainer: {total_training_steps: 150, nnodes: 1, n_gpus_per_node: 8}
"""


def card(db_path: Path, run: str, *args: str):
    return runner.invoke(
        app,
        [
            "--db",
            str(db_path),
            "card",
            "--run",
            run,
            "--output",
            str(db_path.parent / f"card-{run}" / "README.md"),
            *args,
        ],
    )


def ingest(db_path: Path, log: Path, *args: str):
    return runner.invoke(
        app,
        [
            "--db",
            str(db_path),
            "ingest",
            str(log),
            "--run",
            "rh",
            "--arm",
            "return-hard",
            "--base-model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--json",
            *args,
        ],
    )


def test_card_of_runs_without_evidence_never_claims_isolation(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for name, arm, mean in (("rh", "return-hard", 83.5), ("gs", "global-successor", 77.5)):
        store.ensure_run(
            db,
            name,
            arm=ExternalArm(arm),
            seed=0,
            base_model="Qwen/Qwen2.5-7B-Instruct",
            total_steps=150,
        )
        for index, step in enumerate(range(70, 120, 5)):
            store.record_evaluation(
                db, name, step, success_rate=mean + (-1) ** index * 3, episodes=128, temperature=0.4
            )
    text = render_card(build_card_context(db, "rh"))
    assert (
        "differ only in estimator flags" not in text
        and "they differ only in the estimator" not in text
    )
    assert "cannot verify" in text and "hardware" in text


def test_a_card_for_a_three_seed_arm_uses_every_seed_whatever_other_arms_have(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for seed in range(3):
        add_run(
            db,
            f"rh-{seed}",
            "return-hard",
            mean=83.5 + seed,
            sd=6.5,
            n=10,
            best=93.75 + seed,
            seed=seed,
        )
    add_run(db, "gs-0", "global-successor", mean=77.5, sd=6.3, n=9, best=86.7, seed=0)
    context = build_card_context(db, "rh-0")
    arm = next(arm for arm in context.summary["arms"] if arm["arm"] == "return-hard")
    assert arm["n_seeds"] == 3 and sorted(arm["seeds"]) == [0, 1, 2]
    text = render_card(context)
    assert "Every arm compared here has at most one recorded seed" not in text
    assert {run["run"] for run in context.summary["runs"]} >= {"rh-0", "rh-1", "rh-2"}


def test_one_evaluation_in_the_window_refuses_the_card_and_says_why(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db,
        "rh",
        arm=ExternalArm("return-hard"),
        seed=0,
        base_model="Qwen/Qwen2.5-7B-Instruct",
        total_steps=150,
    )
    for step in range(0, 80, 5):
        store.record_evaluation(
            db, "rh", step, success_rate=30 + step / 2, episodes=128, temperature=0.4
        )
    result = card(tmp_path / "runs.db", "rh")
    assert result.exit_code == 3, result.output
    assert (
        "step >= 70" in result.output
        and "holds 2 evaluation(s)" in result.output
        and "needs 3" in result.output
    )
    assert "Traceback" not in result.output


def test_conflicting_re_recorded_steps_are_on_the_card_and_in_the_summary(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    store.record_evaluation(
        db, "rh", 80, success_rate=12.5, episodes=128, temperature=0.4
    )  # differs
    context = build_card_context(db, "rh")
    assert context.summary["conflicts"] == {"rh": {"steps": [80], "facts": {}}}
    text = render_card(context)
    assert "Conflicting records" in text and "step 80 were recorded twice" in text
    assert lint_card(text) == []


def test_total_steps_changed_on_re_ingest_is_a_conflict_and_final_stays_refused(tmp_path):
    db_path = tmp_path / "runs.db"
    log = write_console(acceptance_rows(3), tmp_path / "worker.log")  # stopped at step 119
    assert ingest(db_path, log, "--total-steps", "150").exit_code == 0
    result = ingest(db_path, log, "--total-steps", "119")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["fact_conflicts"] == [{"key": "total_steps", "recorded": 150, "given": 119}]
    db = store.open_db(db_path)
    assert store.get_run(db, "rh")["total_steps"] == 150
    final = card(db_path, "rh", "--status", "final")
    assert final.exit_code == 3 and "step 119 of 150" in final.output and "119, 150" in final.output
    interim = build_card_context(db, "rh")
    assert interim.summary["conflicts"]["rh"]["facts"] == {"total_steps": [150, 119]}


def test_an_interim_card_for_a_finished_run_is_refused_with_a_pointer_to_final(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "done", "return-hard", mean=85.0, sd=4.0, n=10, best=92.0, last_step=150)
    result = card(tmp_path / "runs.db", "done")
    assert result.exit_code == 3 and "--status final" in result.output
    text = render_card(build_card_context(db, "done", status="final"))
    assert (
        "INTERIM" not in text
        and "once the run completes" not in text
        and "step 150 of 150" not in text
    )


def test_the_main_jobs_demo_card_is_rendered_final():
    # The main job trains all its steps, so its card is final (an interim one is refused).
    script = (REPO / "scripts" / "main_job.sh").read_text()
    card_lines = [line for line in script.splitlines() if " card " in line]
    assert card_lines and all("--status final" in line for line in card_lines)


def test_a_stopped_run_is_stopped_early_not_running_and_its_card_says_so(tmp_path):
    db_path = tmp_path / "runs.db"
    log = write_console(acceptance_rows(3), tmp_path / "worker.log")
    assert ingest(db_path, log, "--total-steps", "150").exit_code == 0
    db = store.open_db(db_path)
    assert store.get_run(db, "rh")["status"] == "running"
    assert compare_runs(db, ["rh"]).as_json()["runs"][0]["run_state"] == "running"
    assert ingest(db_path, log, "--ended").exit_code == 0
    assert store.get_run(db, "rh")["status"] == "stopped"
    assert compare_runs(db, ["rh"]).as_json()["runs"][0]["run_state"] == "stopped-early"
    text = render_card(build_card_context(db, "rh"))
    assert "STOPPED EARLY: step 119 of 150" in text and "once the run completes" not in text


def test_a_run_that_reached_its_total_is_finished(tmp_path):
    db_path = tmp_path / "runs.db"
    log = write_console(acceptance_rows(3), tmp_path / "worker.log")
    assert ingest(db_path, log, "--total-steps", "119").exit_code == 0
    assert store.get_run(store.open_db(db_path), "rh")["status"] == "finished"


def test_protocol_facts_from_a_hydra_config_and_the_options(tmp_path):
    from ccpo_cli.store.facts import facts_from_config, read_config_file, run_facts

    config = tmp_path / "config.yaml"
    config.write_text(HYDRA_CONFIG)
    facts = facts_from_config(read_config_file(config))
    assert facts == {
        "split": "valid_seen",
        "temperature": 0.4,
        "seed": 0,
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "estimator": "grpo",
        "batch": 16,
        "group": 8,
        "max_steps": 50,
        "gamma": 0.95,
        "lr": 1e-6,
        "kl": 0.01,
        "total_steps": 150,
        "hardware": "1 node(s) x 8 GPUs",
        "algorithm": {"adv_estimator": "grpo", "gamma": 0.95},
    }
    db_path = tmp_path / "runs.db"
    log = write_console(acceptance_rows(3), tmp_path / "worker.log")
    result = ingest(
        db_path, log, "--config", str(config), "--episodes", "128", "--temperature", "0.6"
    )
    assert result.exit_code == 0, result.output
    db = store.open_db(db_path)
    run = store.get_run(db, "rh")
    recorded = run_facts(db, run["id"])["values"]
    assert (
        recorded["temperature"] == 0.6
        and recorded["episodes"] == 128
        and recorded["split"] == "valid_seen"
    )
    assert run["total_steps"] == 150 and run["seed"] == 0
    window = compare_runs(db, ["rh"]).as_json()["runs"][0]["window"]
    assert window["protocol"] == {"split": "valid_seen", "temperature": 0.6, "episodes": 128}
    # A second arm ingested with the same config: what is recorded agrees, what is not is named.
    other = runner.invoke(
        app,
        [
            "--db",
            str(db_path),
            "ingest",
            str(log),
            "--run",
            "gg",
            "--arm",
            "gigpo",
            "--base-model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--config",
            str(config),
            "--episodes",
            "128",
            "--temperature",
            "0.6",
        ],
    )
    assert other.exit_code == 0, other.output
    isolation = compare_runs(db, ["rh", "gg"]).as_json()["isolation"]
    assert isolation["differences"] == [] and isolation["verdict"] == "unverifiable"
    assert (
        "hardware" not in isolation["not_recorded"]
        and "data_order_seed" in isolation["not_recorded"]
    )
    context = build_card_context(db, "rh")
    text = render_card(context)
    assert ModelCard(text).data.eval_results[0].dataset_split == "valid_seen"
    setup = {row["name"]: row["value"] for row in context.template_vars["setup"]}
    assert (
        setup["batch"] == "16 tasks x 8 rollouts = 128 episodes/step"
        and setup["learning rate"] == "1e-6"
    )
    assert (
        "valid_seen" in setup["eval"]
        and "128 episodes" in setup["eval"]
        and "temperature 0.6" in setup["eval"]
    )


def test_a_launch_command_fills_what_it_can_and_a_verl_log_that_names_no_split_records_none(
    tmp_path,
):
    from ccpo_cli.store.facts import facts_from_config, read_config_file, run_facts

    command = tmp_path / "launch.sh"
    command.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  algorithm.adv_estimator=gigpo data.train_batch_size=16 \\\n"
        "  env.rollout.n=8 actor_rollout_ref.actor.optim.lr=1e-6 +env.seed=2 trainer.n_gpus_per_node=4\n"
    )
    assert facts_from_config(read_config_file(command)) == {
        "estimator": "gigpo",
        "batch": 16,
        "group": 8,
        "lr": 1e-6,
        "seed": 2,
        "hardware": "1 node(s) x 4 GPUs",
        "algorithm": {"adv_estimator": "gigpo"},
    }
    db_path = tmp_path / "runs.db"
    log = write_console(acceptance_rows(3), tmp_path / "worker.log")
    assert ingest(db_path, log).exit_code == 0
    db = store.open_db(db_path)
    assert (
        run_facts(db, store.get_run(db, "rh")["id"])["values"] == {}
    )  # verl-agent's default is not the log's word
    result = ingest(db_path, log, "--split", "valid_unseen")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["fact_conflicts"] == []
    assert run_facts(db, store.get_run(db, "rh")["id"])["values"] == {"split": "valid_unseen"}


def test_a_config_file_that_is_neither_exits_3_and_records_nothing(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("just some words\n")
    log = write_console(acceptance_rows(3), tmp_path / "worker.log")
    result = ingest(tmp_path / "runs.db", log, "--config", str(bad))
    assert (
        result.exit_code == 3 and "notes.txt" in result.output and "Traceback" not in result.output
    )
    assert not (tmp_path / "runs.db").exists()


@pytest.mark.parametrize("split", ["valid_seen"])
def test_the_card_says_which_protocol_when_panels_are_mixed(tmp_path, split):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    store.record_evaluation(db, "rh", 72, success_rate=100.0, episodes=16, temperature=0.4)
    context = build_card_context(db, "rh")
    text = render_card(context)
    assert (
        "more than one protocol" in text and "leaves out 1 evaluation of another protocol" in text
    )
    assert context.summary["window"]["protocol"]["episodes"] == 128
