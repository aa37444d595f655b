"""`ccpo ingest` beyond ALFWorld (issue 19): a WebShop console log with spaces in its metric
names, the benchmark detected or stated (and contradictions refused), CSV exports with a text
column or far too many columns (issue 21 item 8), symbolic links out of a run folder (item 9),
what a log printed about its own run recorded as facts, and the metric keys left unused
(issue 23)."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from helpers_benchmarks import (
    REAL_LOGS,
    WEBSHOP_SCORE,
    csv_with_text_column,
    wide_csv,
    write_webshop_console,
)
from helpers_store import acceptance_rows, write_ccpo, write_console
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import get_run, open_db, run_evaluations
from ccpo_cli.store.facts import run_facts, stated_arm_flags
from ccpo_cli.store.ingest import MAX_DROPPED_KEYS, REPORTED_KEYS, parse_metrics_file
from ccpo_cli.store.readers.csv_table import MAX_CSV_COLUMNS, cell_count

runner = CliRunner()


def ingest(db_path: Path, path: Path, *args: str, run: str = "ws"):
    return runner.invoke(
        app, ["--db", str(db_path), "ingest", str(path), "--run", run, "--json", *map(str, args)]
    )


def document(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def facts_of(db_path: Path, run: str = "ws") -> dict:
    db = open_db(db_path)
    return run_facts(db, get_run(db, run)["id"])["values"]


def counts(db_path: Path) -> tuple:
    db = open_db(db_path)
    return tuple(
        db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("runs", "evaluations", "run_facts")
    )


def nothing_recorded(db_path: Path) -> bool:
    return not db_path.exists() or counts(db_path) == (0, 0, 0)


# ---- WebShop -------------------------------------------------------------------------------


@pytest.mark.parametrize("wrap", [None, 97])
def test_a_webshop_console_log_with_spaces_in_its_metric_names_is_ingested(tmp_path, wrap):
    log, validations = write_webshop_console(tmp_path / "webshop.log", wrap=wrap)
    report = document(ingest(tmp_path / "runs.db", log))
    assert report["format"] == "console" and report["skipped"] == 0
    assert report["benchmark"] == "webshop" and report["new"] == len(validations) == 5
    db = open_db(tmp_path / "runs.db")
    assert get_run(db, "ws")["benchmark"] == "webshop"
    recorded = {row["step"]: row for row in run_evaluations(db, "ws")}
    assert sorted(recorded) == sorted(validations)
    for step, (won, _score) in validations.items():
        # verl's console prints 3 decimals: the rate recorded is the one printed.
        assert recorded[step]["success_rate"] == pytest.approx(100 * round(won / 64, 3), abs=1e-9)
        assert recorded[step]["task_types"] == {}  # WebShop has no task types
    # WebShop's score has no place in runs.db yet: it is named as unused, not dropped in silence.
    assert WEBSHOP_SCORE in report["unused_metric_keys"]


def test_a_webshop_log_that_states_its_episodes_records_64_and_one_that_does_not_records_none(
    tmp_path,
):
    stated, _ = write_webshop_console(tmp_path / "stated.log")
    document(ingest(tmp_path / "runs.db", stated, run="stated"))
    facts = facts_of(tmp_path / "runs.db", "stated")
    assert facts["episodes"] == 64
    assert (
        "split" not in facts
    )  # verl-agent's WebShop default (test goals) is not what the log said
    assert (facts["adv_mode"], facts["max_steps"], facts["estimator"]) == ("mean_norm", 15, "gigpo")
    silent, _ = write_webshop_console(tmp_path / "silent.log", state_episodes=False)
    document(ingest(tmp_path / "runs.db", silent, run="silent"))
    assert "episodes" not in facts_of(tmp_path / "runs.db", "silent")  # never a default
    assert all(
        row["episodes"] is None for row in run_evaluations(open_db(tmp_path / "runs.db"), "silent")
    )


def test_a_stated_benchmark_that_the_metric_names_contradict_is_refused(tmp_path):
    db_path = tmp_path / "runs.db"
    log, _ = write_webshop_console(tmp_path / "webshop.log")
    result = ingest(db_path, log, "--benchmark", "alfworld")
    assert result.exit_code == 3 and "webshop" in result.output and "alfworld" in result.output
    assert "Traceback" not in result.output and nothing_recorded(db_path)
    alfworld_log = write_console(acceptance_rows(3), tmp_path / "alfworld.log")
    result = ingest(db_path, alfworld_log, "--benchmark", "webshop")
    assert result.exit_code == 3 and "val/pick_and_place_success_rate" in result.output


def test_an_unknown_benchmark_name_exits_3_listing_the_known_ones(tmp_path):
    log, _ = write_webshop_console(tmp_path / "webshop.log")
    result = ingest(tmp_path / "runs.db", log, "--benchmark", "mujoco")
    assert result.exit_code == 3 and "mujoco" in result.output
    assert (
        "alfworld" in result.output
        and "webshop" in result.output
        and "Traceback" not in result.output
    )
    assert not (tmp_path / "runs.db").exists()  # refused before the database is opened


def test_a_benchmark_the_metric_names_cannot_show_is_taken_as_stated(tmp_path):
    path = tmp_path / "sokoban.jsonl"
    path.write_text('{"step": 0, "val/success_rate": 0.25}\n{"step": 5, "val/success_rate": 0.5}\n')
    report = document(ingest(tmp_path / "runs.db", path, "--benchmark", "sokoban", run="sk"))
    assert report["benchmark"] == "sokoban" and report["benchmark_evidence"] == "--benchmark"
    assert get_run(open_db(tmp_path / "runs.db"), "sk")["benchmark"] == "sokoban"
    # Without --benchmark nothing names one: not recorded, and said so.
    report = document(ingest(tmp_path / "runs.db", path, run="unnamed"))
    assert (
        report["benchmark"] is None
        and get_run(open_db(tmp_path / "runs.db"), "unnamed")["benchmark"] is None
    )
    assert any(
        "benchmark not recorded" in warning and "--benchmark" in warning
        for warning in report["warnings"]
    )
    # A run that already records its benchmark keeps it; the benchmark's split default is not recorded.
    csv = tmp_path / "val.csv"
    csv.write_text("step,val/success_rate\n0,0.25\n5,0.5\n")
    report = document(ingest(tmp_path / "runs.db", csv, run="sk"))
    assert report["benchmark"] == "sokoban" and report["benchmark_evidence"] == "run 'sk''s record"
    document(ingest(tmp_path / "runs.db", csv, "--benchmark", "alfworld", run="alf"))
    document(ingest(tmp_path / "runs.db", csv, run="alf"))
    assert "split" not in facts_of(tmp_path / "runs.db", "alf")


def test_a_webshop_log_into_a_run_recorded_as_alfworld_is_refused_and_changes_nothing(tmp_path):
    db_path = tmp_path / "runs.db"
    document(ingest(db_path, write_console(acceptance_rows(3), tmp_path / "alfworld.log"), run="r"))
    assert get_run(open_db(db_path), "r")["benchmark"] == "alfworld"
    before = counts(db_path)
    log, _ = write_webshop_console(tmp_path / "webshop.log")
    result = ingest(db_path, log, run="r")
    assert (
        result.exit_code == 3 and "benchmark" in result.output and "Traceback" not in result.output
    )
    assert counts(db_path) == before


def test_alfworld_logs_name_their_benchmark_by_their_task_type_rates(tmp_path):
    report = document(
        ingest(tmp_path / "runs.db", write_ccpo(acceptance_rows(), tmp_path / "m.jsonl"), run="a")
    )
    assert report["benchmark"] == "alfworld" and report["benchmark_evidence"].startswith(
        "the metric names"
    )
    row = run_evaluations(open_db(tmp_path / "runs.db"), "a")[-1]
    assert set(row["task_types"]) == {"pick", "look", "clean", "heat", "cool", "pick2"}


def test_search_logs_record_their_data_sources_as_task_types(tmp_path):
    path = tmp_path / "search.jsonl"
    path.write_text(
        json.dumps(
            {
                "step": 5,
                "val/success_rate": 0.4,
                "val/nq_success_rate": 0.5,
                "val/hotpotqa_success_rate": 0.25,
                "val/unkown_success_rate": 0.0,
            }
        )
        + "\n"
    )
    report = document(ingest(tmp_path / "runs.db", path, run="s"))
    assert report["benchmark"] == "search"
    (row,) = run_evaluations(open_db(tmp_path / "runs.db"), "s")
    assert {key: value["success"] for key, value in row["task_types"].items()} == {
        "nq": 50.0,
        "hotpotqa": 25.0,
    }
    assert "val/unkown_success_rate" in report["unused_metric_keys"]  # verl-agent's padding source


# ---- What the run printed -----------------------------------------------------------------


def test_the_real_console_log_records_the_flags_it_printed(tmp_path):
    db_path = tmp_path / "runs.db"
    report = document(ingest(db_path, REAL_LOGS / "jonp07_grpo_run_alfworld.txt", run="real"))
    facts = facts_of(db_path, "real")
    # The printed config: verl-agent's GRPO normalises by the group std (norm_adv_by_std_in_grpo),
    # whatever algorithm.gigpo.mode (mean_norm) says beside it.
    assert {
        key: facts[key]
        for key in (
            "estimator",
            "adv_mode",
            "gamma",
            "lr",
            "kl",
            "batch",
            "group",
            "max_steps",
            "temperature",
            "split",
            "episodes",
            "invalid_penalty",
        )
    } == {
        "estimator": "grpo",
        "adv_mode": "mean_std_norm",
        "gamma": 1.0,
        "lr": 1e-6,
        "kl": 0.01,
        "batch": 16,
        "group": 8,
        "max_steps": 50,
        "temperature": 0.4,
        "split": "valid_seen",
        "episodes": 128,
        "invalid_penalty": 0.1,
    }
    # total_epochs 150 x (16 prepared rows // 16 per batch): the total verl trained to.
    assert get_run(open_db(db_path), "real")["total_steps"] == 150
    assert get_run(open_db(db_path), "real")["status"] == "finished"
    assert report["stated_facts"]["model"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert stated_arm_flags(facts) == {
        "estimator": "grpo",
        "adv_mode": "mean_std_norm",
        "gamma": 1.0,
        "invalid_penalty": 0.1,
    }


def test_what_the_log_printed_beats_an_option_that_contradicts_it(tmp_path):
    db_path = tmp_path / "runs.db"
    log, _ = write_webshop_console(tmp_path / "webshop.log")
    report = document(ingest(db_path, log, "--episodes", "128"))
    assert facts_of(db_path)["episodes"] == 64
    assert {"key": "episodes", "recorded": 64, "given": 128} in report["fact_conflicts"]


# ---- CSV exports ----------------------------------------------------------------------------


def test_a_csv_export_with_a_text_column_is_ingested_and_the_column_named(tmp_path):
    path = csv_with_text_column(tmp_path / "telemetry.csv")
    report = document(ingest(tmp_path / "runs.db", path, run="csv"))
    assert report["format"] == "csv" and report["skipped"] == 0 and report["new"] == 16
    assert any(
        "source_log" in warning and "text column" in warning for warning in report["warnings"]
    )
    assert "source_log" not in report["unused_metric_keys"]


def test_a_text_cell_in_a_recorded_metric_column_still_skips_only_its_row(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text("step,val/success_rate,note\n0,0.25,first\n5,oops,\n10,0.5,last\n")
    report = document(ingest(tmp_path / "runs.db", path, run="c"))
    assert report["new"] == 2 and [item["line"] for item in report["skipped_lines"]] == [3]
    assert any("'note'" in warning for warning in report["warnings"])


def test_a_million_column_csv_is_refused_with_bounded_memory(tmp_path):
    path = wide_csv(tmp_path / "wide.csv", 10**6)
    size = path.stat().st_size
    tracemalloc.start()
    try:
        with pytest.raises(InvalidInput, match="more than 10,000 columns"):
            parse_metrics_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The line itself is held (as bytes and text), nothing per column: today's reader built a
    # list and a dict of a million cells (about 45 times the file).
    assert peak < 4 * size, (peak, size)
    result = ingest(tmp_path / "runs.db", path, run="wide")
    assert (
        result.exit_code == 3
        and "10,000 columns" in result.output
        and nothing_recorded(tmp_path / "runs.db")
    )


def test_a_row_wider_than_the_bound_is_skipped_and_cells_are_counted_as_csv_counts_them(tmp_path):
    path = tmp_path / "m.csv"
    path.write_text(
        "step,val/success_rate\n0,0.25\n"
        + "5,"
        + ",".join(["0.5"] * MAX_CSV_COLUMNS)
        + "\n10,0.5\n"
    )
    report = document(ingest(tmp_path / "runs.db", path, run="c"))
    assert report["new"] == 2 and report["skipped_lines"][0]["line"] == 3
    assert (
        cell_count('a,"b,c",d') == 3 and cell_count('"x ""y"", z",1') == 2 and cell_count("a") == 1
    )
    assert cell_count(",".join("x" * 50), limit=10) == 11


# ---- Symbolic links out of a run folder ------------------------------------------------------


def _outside_log(tmp_path: Path) -> Path:
    secret = tmp_path / "elsewhere" / "secret.log"
    secret.parent.mkdir()
    return write_console(acceptance_rows(3), secret)


def test_a_wandb_folder_whose_log_links_out_of_it_is_refused(tmp_path):
    folder = tmp_path / "wandb" / "run-20250101_000000-abc" / "files"
    folder.mkdir(parents=True)
    (folder / "output.log").symlink_to(_outside_log(tmp_path))
    result = ingest(tmp_path / "runs.db", folder.parent, run="w")
    assert (
        result.exit_code == 3
        and "symbolic link" in result.output
        and "Traceback" not in result.output
    )
    assert nothing_recorded(tmp_path / "runs.db")


def test_a_wandb_files_folder_that_links_out_is_refused_but_a_link_inside_is_read(tmp_path):
    run = tmp_path / "run-a"
    run.mkdir()
    (run / "files").symlink_to(_outside_log(tmp_path).parent, target_is_directory=True)
    (tmp_path / "elsewhere" / "output.log").symlink_to(tmp_path / "elsewhere" / "secret.log")
    assert ingest(tmp_path / "runs.db", run, run="w").exit_code == 3
    inside = tmp_path / "run-b"
    (inside / "files").mkdir(parents=True)
    write_console(acceptance_rows(3), inside / "logs.txt")
    (inside / "files" / "output.log").symlink_to(inside / "logs.txt")
    assert document(ingest(tmp_path / "runs.db", inside, run="w"))["new"] == 24


def test_a_tensorboard_folder_with_an_event_file_linking_out_is_refused(tmp_path):
    from test_ingest_formats import write_events

    outside = write_events(
        tmp_path / "elsewhere", {0: {"val/success_rate": 0.25}, 5: {"val/success_rate": 0.5}}
    )
    event = next(p for p in outside.iterdir() if "tfevents" in p.name)
    run = tmp_path / "tb" / "seed0"
    run.mkdir(parents=True)
    os.symlink(event, run / event.name)
    result = ingest(tmp_path / "runs.db", run, run="t")
    assert (
        result.exit_code == 3
        and "symbolic link" in result.output
        and nothing_recorded(tmp_path / "runs.db")
    )


# ---- Unused metric keys --------------------------------------------------------------------


def test_ingest_lists_the_keys_that_are_no_evaluation_field_and_keeps_them_in_metrics(tmp_path):
    path = write_console(acceptance_rows(3), tmp_path / "worker.log")
    result = runner.invoke(
        app, ["--db", str(tmp_path / "runs.db"), "ingest", str(path), "--run", "r"]
    )
    assert result.exit_code == 0, result.output
    # Issue 41, cause 7: they were said to have "no place" in runs.db; now every one is kept.
    assert "not recorded (runs.db has no place" not in result.stderr
    kept = {
        row["name"]
        for row in open_db(tmp_path / "runs.db").query("SELECT DISTINCT name FROM run_metrics")
    }
    assert {"actor/entropy", "actor/pg_loss", "timing_s/step"} <= kept
    report = document(ingest(tmp_path / "runs.db", path, run="r"))
    assert report["unused_metric_keys"] == ["actor/entropy", "actor/pg_loss", "timing_s/step"]
    assert report["unused_metric_key_count"] == 3 and report["unused_metric_keys_capped"] is False


def test_the_unused_keys_are_bounded_while_every_value_is_kept_in_metrics(tmp_path):
    path = tmp_path / "many.jsonl"
    with path.open("w") as handle:
        for step in range(0, 30, 5):
            handle.write(
                json.dumps(
                    {
                        "step": step,
                        "val/success_rate": 0.5,
                        **{f"custom/k{step}_{i:05d}": 1.0 for i in range(2500)},
                    }
                )
                + "\n"
            )
    report = document(ingest(tmp_path / "runs.db", path, run="m"))
    assert (
        report["unused_metric_key_count"] == MAX_DROPPED_KEYS
        and report["unused_metric_keys_capped"] is True
    )
    assert len(report["unused_metric_keys"]) == REPORTED_KEYS
    assert report["unused_metric_keys"] == sorted(report["unused_metric_keys"])
    assert report["metrics"]["new"] == 6 * 2501  # every key of every step, the rate included


def test_a_long_csv_names_the_tags_it_dropped(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text(
        "step,tag,value\n0,val/success_rate,0.25\n0,actor/entropy,0.6\n5,val/success_rate,0.5\n"
    )
    report = document(ingest(tmp_path / "runs.db", path, run="l"))
    assert report["new"] == 2 and report["unused_metric_keys"] == ["actor/entropy"]
