"""Other authors' logs read whole (issue 29): the round-3 real logs beside this repository
(shared/real-logs/round3, see its SOURCES.md) and minimal synthetic cases of each format rule.
Values are read back from the files here with plain regexes, never from ccpo's readers."""

from __future__ import annotations

import re
from pathlib import Path

from helpers_real_logs import ANSI, ROUND3, ingest, runner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db, run_evaluations
from ccpo_cli.store.identity import all_identities


def run_row(db_path: Path, run: str) -> dict:
    return next(open_db(db_path)["runs"].rows_where("name = ?", [run]))


def logged_validations(path: Path, key: str = "val/success_rate") -> dict[int, float]:
    """{step: value} of every `step:N - ... key:value` in the file, read with a regex."""
    found = {}
    text = ANSI.sub("", path.read_text(errors="replace")).replace("\r", "\n")
    for match in re.finditer(r"step:(\d+) - [^\n]*?" + re.escape(key) + r":([0-9.]+)", text):
        found[int(match.group(1))] = float(match.group(2))
    return found


def test_a_config_interleaved_with_ray_output_is_read_around_it(tmp_path):
    """WarmGiGPO: gym warnings and worker lines inside the pprinted config. The config is read,
    its model and seed become the run's, and the lines left out are named."""
    document = ingest(tmp_path / "r.db", ROUND3 / "warmgigpo_webshop_sft2k_gigpo.log", "sft2k")
    assert document["skipped"] == 0
    assert document["stated_facts"]["model"].endswith(
        "qwen25_1p5b_webshop_lora_verl_2k/merged_model"
    )
    assert (
        document["stated_facts"]["estimator"] == "gigpo" and document["stated_facts"]["seed"] == 0
    )
    assert len(document["config_left_out_lines"]) == 12
    text = ANSI.sub("", (ROUND3 / "warmgigpo_webshop_sft2k_gigpo.log").read_text()).splitlines()
    assert all("{'" not in text[number - 1] for number in document["config_left_out_lines"])
    assert any(
        "read around 12 line(s) of other output" in warning for warning in document["warnings"]
    )
    row = run_row(tmp_path / "r.db", "sft2k")
    assert row["base_model"] == document["stated_facts"]["model"] and row["seed"] == 0


def test_a_pprinted_config_skips_a_same_actor_line_inside_it(tmp_path):
    path = tmp_path / "c.log"
    path.write_text(
        "(TaskRunner pid=1) {'algorithm': {'adv_estimator': 'grpo'},\n"
        "(TaskRunner pid=1) WARNING:2026 Setting TOKENIZERS_PARALLELISM=false\n"
        "(TaskRunner pid=1)  'env': {'seed': 7},\n"
        "(TaskRunner pid=1)  'trainer': {'total_training_steps': 4}}\n"
        "(TaskRunner pid=1) step:1 - val/success_rate:0.500\n"
    )
    document = ingest(tmp_path / "r.db", path, "r", "--benchmark", "alfworld")
    assert document["stated_facts"]["seed"] == 7 and document["config_left_out_lines"] == [2]
    assert run_row(tmp_path / "r.db", "r")["total_steps"] == 4


def test_sft2k_and_sft500_are_two_units_and_the_eval_only_log_is_a_reference(tmp_path):
    db_path = tmp_path / "r.db"
    ingest(db_path, ROUND3 / "warmgigpo_webshop_sft2k_gigpo.log", "sft2k")
    ingest(db_path, ROUND3 / "warmgigpo_webshop_sft500_gigpo.log", "sft500")
    document = ingest(db_path, ROUND3 / "warmgigpo_webshop_sft2k_eval64.log", "eval64")
    assert document["kind"] == "evaluation"
    row = run_row(db_path, "eval64")
    assert (
        row["kind"] == "evaluation" and row["status"] == "finished" and row["total_steps"] is None
    )
    identities = all_identities(open_db(db_path))
    assert identities["eval64"].is_reference
    assert identities["sft2k"].unit != identities["sft500"].unit
    assert identities["sft2k"].base_model != identities["sft500"].base_model


def test_printed_seeds_make_jonp07_seed5_and_seed6_seeds_of_one_unit(tmp_path):
    db_path = tmp_path / "r.db"
    for seed in (5, 6):
        ingest(db_path, ROUND3 / f"jonp07hiper_ppo_alfworld_seed{seed}_1_5b.txt", f"hgae-s{seed}")
    identities = all_identities(open_db(db_path))
    assert (identities["hgae-s5"].seed, identities["hgae-s6"].seed) == (5, 6)
    assert identities["hgae-s5"].unit == identities["hgae-s6"].unit
    assert identities["hgae-s5"].arm is not None and identities["hgae-s5"].arm.fingerprint


def test_complete_4096_character_records_of_a_plain_stdout_file_are_kept(tmp_path):
    path = ROUND3 / "jonp07hiper_ppo_alfworld_seed6_1_5b.txt"
    document = ingest(tmp_path / "r.db", path, "s6")
    assert document["skipped"] == 0 and document["steps"] == 151
    logged = logged_validations(path)
    recorded = {
        row["step"]: row["success_rate"]
        for row in run_evaluations(open_db(tmp_path / "r.db"), "s6")
    }
    assert recorded == {step: round(100 * value, 6) for step, value in logged.items()}


def test_a_record_glued_to_the_next_actor_line_is_split_off(tmp_path):
    path = tmp_path / "g.log"
    path.write_text(
        "(TaskRunner pid=1) step:0 - val/success_rate:0.250 - timing_s/total:1.5"
        "(TaskRunner pid=1) Training Progress:   0%|   | 0/4\n"
        "(TaskRunner pid=1) step:1 - val/success_rate:0.375\rTraining Progress:  25%|  | 1/4\n"
        "(TaskRunner pid=1) step:2 - val/success_rate:0.500\n"
    )
    document = ingest(tmp_path / "r.db", path, "r", "--benchmark", "alfworld")
    assert document["skipped"] == 0 and document["steps"] == 3
    rates = {
        row["step"]: row["success_rate"] for row in run_evaluations(open_db(tmp_path / "r.db"), "r")
    }
    assert rates == {0: 25.0, 1: 37.5, 2: 50.0}


def test_the_lmgame_record_glued_to_a_progress_bar_is_read(tmp_path):
    document = ingest(tmp_path / "r.db", ROUND3 / "mignonjia_lmgame_train_sokoban_half_b.log", "lm")
    assert document["steps"] == 2 and document["last_step"] == 1 and document["skipped"] == 0
    assert any(
        "val/SimpleSokoban/success" in warning and "--metric" in warning
        for warning in document["warnings"]
    )


def test_a_finished_wandb_output_log_keeps_its_unterminated_last_record(tmp_path):
    path = ROUND3 / "sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log"
    assert not path.read_bytes().endswith(b"\n")
    document = ingest(tmp_path / "r.db", path, "g")
    assert document["last_step"] == 146 and document["incomplete_tail_line"] is None
    assert document["first_step"] == 16 and document["resumed_from"] == 15


def test_a_line_still_being_written_stays_for_the_next_ingest(tmp_path):
    path = tmp_path / "w.log"
    path.write_text(
        "step:1 - val/success_rate:0.250 - perf/throughput:10.0\nstep:2 - val/success_rate:0.5"
    )
    document = ingest(tmp_path / "r.db", path, "r", "--benchmark", "alfworld")
    assert document["last_step"] == 1 and document["incomplete_tail_line"] == 2


def test_a_wandb_summary_is_placed_at_the_step_its_validation_was_measured(tmp_path):
    """The Sokoban summary's _step is 28; its val/success_rate is step 25's (0.203 on the console)."""
    db_path = tmp_path / "r.db"
    ingest(
        db_path,
        ROUND3 / "sfff_sokoban_gigpo_qwen3vl4b_20260523_020711_output.log",
        "s",
        "--benchmark",
        "sokoban",
    )
    document = ingest(
        db_path, ROUND3 / "sfff_sokoban_gigpo_qwen3vl4b_20260523_020711_wandb-summary.json", "s"
    )
    assert document["format"] == "wandb" and document["duplicates"] == 1 and document["new"] == 0
    steps = [row["step"] for row in run_evaluations(open_db(db_path), "s")]
    assert steps == [5, 10, 15, 20, 25]


def test_a_summary_alone_records_no_evaluation_at_its_last_step(tmp_path):
    document = ingest(
        tmp_path / "r.db",
        ROUND3 / "sfff_webshop_small_gigpo_qwen3_4b_merged_wandb-summary.json",
        "w",
    )
    assert (
        document["format"] == "wandb"
        and document["evaluations_found"] == 0
        and document["last_step"] == 198
    )
    assert any("without the step it was measured at" in warning for warning in document["warnings"])


def test_a_console_value_and_its_full_precision_summary_are_one_result(tmp_path):
    db_path = tmp_path / "r.db"
    ingest(db_path, ROUND3 / "sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log", "g")
    document = ingest(
        db_path, ROUND3 / "sfff_alfworld_grpo_qwen25_15b_20260524_112823_wandb-summary.json", "g"
    )
    assert document["conflicts"] == [] and document["duplicates"] == 1


def test_a_different_value_at_the_same_precision_is_still_a_conflict(tmp_path):
    db_path = tmp_path / "r.db"
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    first.write_text("step:5 - val/success_rate:0.477\n")
    second.write_text("step:5 - val/success_rate:0.4705625\n")
    ingest(db_path, first, "r", "--benchmark", "alfworld")
    assert len(ingest(db_path, second, "r")["conflicts"]) == 1


def test_launch_script_variables_are_refused_as_facts_and_named(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo \\\n  data.train_batch_size=$train_data_size \\\n"
        "  env.seed=3 \\\n  actor_rollout_ref.rollout.val_kwargs.temperature=${val_temp}\n"
    )
    log = tmp_path / "m.log"
    log.write_text("step:5 - val/success_rate:0.500\n")
    document = ingest(
        tmp_path / "r.db", log, "r", "--benchmark", "alfworld", "--config", str(script)
    )
    warning = next(warning for warning in document["warnings"] if "never expanded" in warning)
    assert "data.train_batch_size=$train_data_size" in warning and "$val_temp" in warning
    facts = all_identities(open_db(tmp_path / "r.db"))["r"].facts
    assert "batch" not in facts and "temperature" not in facts and facts["seed"] == 3
    shown = runner.invoke(app, ["--db", str(tmp_path / "r.db"), "runs", "show", "r"])
    assert "Traceback" not in shown.output


def test_a_renamed_success_metric_is_offered_by_name_and_read_with_metric(tmp_path):
    path = ROUND3 / "my1ab_test_alf_grpo.log"
    document = ingest(tmp_path / "r.db", path, "a")
    assert document["evaluations_found"] == 0
    assert any(
        "val/val/success_rate" in warning and "--metric" in warning
        for warning in document["warnings"]
    )
    document = ingest(
        tmp_path / "m.db", path, "a", "--metric", "val/val/success_rate=val/success_rate"
    )
    logged = logged_validations(path, "val/val/success_rate")
    assert sorted(logged) == [5, 8]
    recorded = {
        row["step"]: row["success_rate"] for row in run_evaluations(open_db(tmp_path / "m.db"), "a")
    }
    assert recorded == {step: round(100 * value, 6) for step, value in logged.items()}


def test_a_metric_mapping_to_an_unknown_name_is_a_usage_error(tmp_path):
    log = tmp_path / "m.log"
    log.write_text("step:5 - val/x:0.500\n")
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "r.db"),
            "ingest",
            str(log),
            "--run",
            "r",
            "--metric",
            "val/x=val/nothing",
        ],
    )
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_a_launch_that_died_before_step_0_records_its_run(tmp_path):
    document = ingest(tmp_path / "r.db", ROUND3 / "jonp07hiper_webshop_hgae.txt", "dead", "--ended")
    assert document["steps"] == 0 and document["stated_facts"]["estimator"] == "hgae"
    assert any("stopped before its first step" in warning for warning in document["warnings"])
    row = run_row(tmp_path / "r.db", "dead")
    assert row["status"] == "stopped" and row["benchmark"] == "webshop"


def test_ended_is_not_undone_by_a_plain_reingest(tmp_path):
    path = tmp_path / "m.log"
    path.write_text(
        "(TaskRunner pid=1) {'trainer': {'total_training_steps': 150}}\nstep:5 - val/success_rate:0.500\n"
    )
    ingest(tmp_path / "r.db", path, "r", "--benchmark", "alfworld", "--ended")
    assert run_row(tmp_path / "r.db", "r")["status"] == "stopped"
    ingest(tmp_path / "r.db", path, "r")
    assert run_row(tmp_path / "r.db", "r")["status"] == "stopped"


def test_a_resumed_log_records_where_it_resumed(tmp_path):
    path = ROUND3 / "sfff_sokoban_ppo_qwen3vl4b_20260524_004557_output.log"
    document = ingest(tmp_path / "r.db", path, "p", "--benchmark", "sokoban")
    assert document["resumed_from"] == 60 and document["first_step"] == 61
    assert all_identities(open_db(tmp_path / "r.db"))["p"].facts["resumed_from"] == 60


def test_a_split_the_log_does_not_name_is_not_recorded(tmp_path):
    db_path = tmp_path / "r.db"
    ingest(db_path, ROUND3 / "sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log", "unnamed")
    ingest(db_path, ROUND3 / "jonp07hiper_ppo_alfworld_seed5_1_5b.txt", "printed")
    identities = all_identities(open_db(db_path))
    assert (
        identities["unnamed"].protocol.split is None
        and identities["unnamed"].protocol.split_assumed is None
    )
    assert (
        identities["printed"].protocol.split == "valid_seen"
        and identities["printed"].protocol.split_assumed is None
    )
