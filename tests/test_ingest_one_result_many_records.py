"""One run's results read from several files and under several evaluation seeds (issue 41):
the round-4 real logs beside this repository (shared/real-logs/round4, see its SOURCES.md).
Expected values are read from the files here with plain regexes or the csv module, never
from ccpo's readers."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from helpers_real_logs import ANSI, ROUND4, ingest, runner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db

CONSOLE_7B = ROUND4 / "ymguan_alfworld_grpo_observe_qwen25_7b_seed0_20260415_104809.log"
HISTORY_7B = ROUND4 / "ymguan_webshopdir_alfworld_observe_history_lmlyvpa6.csv"


def logged(path: Path, key: str) -> dict[int, float]:
    """{step: value} of every `step:N - ... key:value` of a console log, read with a regex."""
    text = ANSI.sub("", path.read_text(errors="replace"))
    pattern = r"step:(\d+) - [^\n]*?" + re.escape(key) + r":(-?[0-9.]+)"
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(pattern, text)}


def history_column(path: Path, column: str) -> dict[int, float]:
    with path.open(newline="") as handle:
        return {
            int(row["_step"]): float(row[column]) for row in csv.DictReader(handle) if row[column]
        }


@pytest.mark.parametrize("order", ["console first", "history first"])
def test_a_history_csv_and_the_console_of_one_run_are_one_record_per_step(tmp_path, order):
    """The history carries no per-type rates and the console does: in either order, 31
    evaluations, no conflict, the six per-type rates on every step the console has them, and
    the training rate of whichever file carries it."""
    files = [CONSOLE_7B, HISTORY_7B] if order == "console first" else [HISTORY_7B, CONSOLE_7B]
    documents = [ingest(tmp_path / "r.db", path, "lmlyvpa6") for path in files]
    assert [len(document["conflicts"]) for document in documents] == [0, 0]
    db = open_db(tmp_path / "r.db")
    validations = logged(CONSOLE_7B, "val/success_rate")
    assert len(validations) == 31
    rows = list(db["evaluations"].rows_where(order_by="step"))
    assert [row["step"] for row in rows] == sorted(validations)
    assert db["conflicts"].count == 0
    per_type = logged(CONSOLE_7B, "val/pick_and_place_success_rate")
    types = {
        row["step"]: row["n"]
        for row in db.query(
            "SELECT e.step, COUNT(*) AS n FROM task_type_results t "
            "JOIN evaluations e ON e.id = t.evaluation_id GROUP BY e.step"
        )
    }
    assert set(types) == set(per_type) and set(types.values()) == {6}
    training = history_column(HISTORY_7B, "episode/success_rate")
    by_step = {row["step"]: row["train_success_rate"] for row in rows}
    for step, rate in training.items():
        assert by_step[step] == pytest.approx(100 * rate, abs=0.05)
    if order == "history first":
        # The console completed the history's rows: its per-type rates, not new rows.
        assert documents[1]["new"] == 1 and documents[1]["completed"] == 30
        # The kept rows are the history's, at its precision (0.34375, not the console's 0.344).
        kept = {row["step"]: row["success_rate"] for row in rows}
        assert kept[5] == pytest.approx(100 * history_column(HISTORY_7B, "val/success_rate")[5])


def test_records_that_differ_on_a_value_both_carry_are_still_a_conflict(tmp_path):
    path = tmp_path / "a.log"
    path.write_text("step:5 - val/success_rate:0.500 - val/pick_and_place_success_rate:0.250\n")
    other = tmp_path / "b.log"
    other.write_text("step:5 - val/success_rate:0.500 - val/pick_and_place_success_rate:0.750\n")
    ingest(tmp_path / "r.db", path, "r", "--benchmark", "alfworld")
    document = ingest(tmp_path / "r.db", other, "r", "--benchmark", "alfworld")
    assert len(document["conflicts"]) == 1


def test_a_training_rate_only_the_second_record_carries_completes_the_first(tmp_path):
    first = tmp_path / "a.log"
    first.write_text("step:5 - val/success_rate:0.500\n")
    second = tmp_path / "b.log"
    second.write_text("step:5 - episode/success_rate:0.4375 - val/success_rate:0.5\n")
    ingest(tmp_path / "r.db", first, "r", "--benchmark", "alfworld")
    document = ingest(tmp_path / "r.db", second, "r")
    assert document["duplicates"] == 1 and document["completed"] == 1
    (row,) = open_db(tmp_path / "r.db")["evaluations"].rows
    assert row["train_success_rate"] == 43.75 and row["success_rate"] == 50.0


EVAL_SEEDS = {
    seed: ROUND4 / f"ymguan_alfworld_evalonly_grpo7b_step100_envseed{seed}.log"
    for seed in (123, 456, 789)
}


def test_three_evaluation_seeds_of_one_checkpoint_are_one_step_and_their_mean(tmp_path):
    """Each evaluation-only log played the step-100 checkpoint under its own env.seed: three
    evaluations of one step (eval_seed 123, 456, 789), no conflict, the run's training seed
    untouched (`--seed 0` is the checkpoint's training seed, accepted every time), and compare's
    window and reference level the three seeds' mean (81.3), not seed 123's 84.4."""
    documents = [
        ingest(tmp_path / "r.db", path, "grpo7b-step100", "--seed", "0")
        for path in EVAL_SEEDS.values()
    ]
    assert [document["eval_seed"] for document in documents] == [123, 456, 789]
    assert all(not document["conflicts"] and document["new"] == 1 for document in documents)
    assert all(document["resumed_from"] is None for document in documents)
    assert [document["evaluated_checkpoint"] for document in documents] == [100] * 3
    db = open_db(tmp_path / "r.db")
    rows = list(db["evaluations"].rows_where(order_by="eval_seed"))
    logged_rates = [logged(path, "val/success_rate")[100] for path in EVAL_SEEDS.values()]
    assert [(row["step"], row["eval_seed"]) for row in rows] == [
        (100, 123),
        (100, 456),
        (100, 789),
    ]
    assert [row["success_rate"] for row in rows] == pytest.approx([100 * r for r in logged_rates])
    (run,) = db["runs"].rows
    assert run["seed"] == 0 and run["kind"] == "evaluation"
    result = runner.invoke(
        app, ["--db", str(tmp_path / "r.db"), "compare", "grpo7b-step100", "--json"]
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    mean = 100 * sum(logged_rates) / 3
    assert round(mean, 1) == 81.3
    (entry,) = document["runs"]
    assert entry["window"]["n"] == 1 and entry["window"]["mean"] == pytest.approx(mean)
    assert entry["window"]["evaluation_seeds"] == [123, 456, 789]
    assert entry["best"]["success"] == pytest.approx(mean)
    (reference,) = document["references"]
    assert reference["mean"] == pytest.approx(mean) and reference["evaluation_seeds"] == [
        123,
        456,
        789,
    ]


def test_an_evaluation_only_log_without_its_seed_option_records_no_training_seed(tmp_path):
    ingest(tmp_path / "r.db", EVAL_SEEDS[123], "ev")
    (run,) = open_db(tmp_path / "r.db")["runs"].rows
    assert run["seed"] is None
