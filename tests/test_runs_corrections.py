"""Correcting the record without losing it (`ccpo runs retract` / `resolve`).

Real runs.db through the real Typer app: a retracted evaluation leaves compare, the card and the
published checkpoint choice, and both say so; nothing is deleted; a conflict is settled by a value,
recorded with who and when.

Asked for in issue 23, item 7.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, render_card
from ccpo_cli.cli.app import app
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store.db import MIGRATIONS
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()


def ccpo(db: Path, *args: str):
    return runner.invoke(app, ["--db", str(db), *[str(arg) for arg in args]])


def counts(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as connection:
        return {
            table: connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in ("runs", "evaluations", "conflicts", "task_type_results", "episodes")
        }


def _entry(document: dict, run: str) -> dict:
    return next(entry for entry in document["runs"] if entry["run"] == run)


@pytest.fixture
def seed_db(tmp_path) -> Path:
    seed_card_db(tmp_path / "runs.db", arms=2)
    return tmp_path / "runs.db"


def test_the_migration_is_named_and_last():
    names = [migration.name for migration in MIGRATIONS._migrations]
    assert names[names.index("m008_retractions") :][:2] == ["m008_retractions", "m009_views"]


def test_a_retracted_evaluation_leaves_compare_and_says_so_but_nothing_is_deleted(seed_db):
    before = compare_runs(store.open_db(seed_db), ["return-hard"]).as_json()
    best = _entry(before, "return-hard")["best"]
    assert best["step"] == 115
    rows_before = counts(seed_db)

    result = ccpo(
        seed_db,
        "runs",
        "retract",
        "return-hard",
        "--step",
        "115",
        "--reason",
        "scored on the train games",
        "--by",
        "alice@lab",
    )
    assert result.exit_code == 0, result.output
    assert "retracted" in result.stdout

    after = json.loads(ccpo(seed_db, "compare", "return-hard", "--json").stdout)
    entry = _entry(after, "return-hard")
    assert best["evaluation_id"] not in entry["window"]["evaluation_ids"]
    assert entry["window"]["n"] == _entry(before, "return-hard")["window"]["n"] - 1
    assert entry["best"]["step"] != 115 and all(
        point["step"] != 115 for point in entry["evaluations"]
    )
    (said,) = after["retracted"]["evaluations"]
    assert (
        said["run"],
        said["step"],
        said["evaluation_id"],
        said["reason"],
        said["retracted_by"],
    ) == ("return-hard", 115, best["evaluation_id"], "scored on the train games", "alice@lab")
    assert counts(seed_db) == rows_before  # append-only: the evaluation is still there
    table = ccpo(seed_db, "compare", "return-hard")
    assert "retracted, left out: return-hard step 115" in table.stdout

    shown = json.loads(ccpo(seed_db, "runs", "show", "return-hard", "--json").stdout)
    marked = [row for row in shown["evaluations"] if row["retracted"]]
    assert [row["step"] for row in marked] == [115] and marked[0]["retracted"][
        "reason"
    ] == "scored on the train games"
    listed = json.loads(ccpo(seed_db, "runs", "list", "--json").stdout)["runs"]
    row = next(run for run in listed if run["name"] == "return-hard")
    assert row["n_retracted"] == 1 and row["n_evaluations"] == len(shown["evaluations"]) - 1


def test_retracting_twice_writes_nothing_and_retractions_cannot_be_edited(seed_db):
    first = ccpo(
        seed_db, "runs", "retract", "return-hard", "--step", "70", "--reason", "bad panel", "--json"
    )
    assert (
        first.exit_code == 0
        and json.loads(first.stdout)["retraction"]["already_retracted"] is False
    )
    second = ccpo(
        seed_db, "runs", "retract", "return-hard", "--step", "70", "--reason", "bad panel", "--json"
    )
    assert (
        second.exit_code == 0
        and json.loads(second.stdout)["retraction"]["already_retracted"] is True
    )
    with sqlite3.connect(seed_db) as connection:
        assert connection.execute("SELECT count(*) FROM retractions").fetchone()[0] == 1
        for statement in ("UPDATE retractions SET reason = 'x'", "DELETE FROM retractions"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                connection.execute(statement)


@pytest.mark.parametrize(
    "args, code, fragment",
    [
        (
            ["runs", "retract", "return-hard", "--step", "71", "--reason", "x"],
            3,
            "no evaluation at step 71",
        ),
        (["runs", "retract", "return-hard", "--reason", "   "], 3, "--reason"),
        (["runs", "retract", "return-hard", "--reason", "a\x1b[2Jb"], 3, "control characters"),
        (["runs", "retract", "no-such-run", "--reason", "x"], 3, "no run named"),
        (["runs", "retract", "return-hard", "--split", "heldout", "--reason", "x"], 3, "--step"),
        (["runs", "resolve", "return-hard", "--step", "70", "--keep", "50"], 3, "no open conflict"),
    ],
)
def test_bad_corrections_are_one_line_and_exit_3(seed_db, args, code, fragment):
    before = counts(seed_db)
    result = ccpo(seed_db, *args)
    assert result.exit_code == code, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.output
    assert counts(seed_db) == before


def test_a_retracted_evaluation_disappears_from_the_card_which_says_so(seed_db):
    assert build_card_context(store.open_db(seed_db), "return-hard").summary["best"]["step"] == 115
    result = ccpo(
        seed_db,
        "runs",
        "retract",
        "return-hard",
        "--step",
        "115",
        "--reason",
        "leaked panel",
        "--by",
        "bob",
    )
    assert result.exit_code == 0, result.output
    context = build_card_context(store.open_db(seed_db), "return-hard")
    assert context.summary["best"]["step"] != 115
    text = render_card(context)
    assert "the evaluation at step 115 was retracted (leaked panel; bob" in text
    assert context.summary["retracted"]["evaluations"][0]["step"] == 115
    card = ccpo(
        seed_db, "card", "--run", "return-hard", "--output", seed_db.parent / "card" / "README.md"
    )
    assert card.exit_code == 0, card.output
    written = (seed_db.parent / "card" / "README.md").read_text(encoding="utf-8")
    assert "retracted (leaked panel" in written


def test_a_retracted_run_leaves_the_comparison_and_its_card_is_refused(seed_db):
    result = ccpo(
        seed_db,
        "runs",
        "retract",
        "return-hard-fbjw",
        "--reason",
        "wrong base model",
        "--by",
        "carol",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(ccpo(seed_db, "compare", "--json").stdout)
    assert [entry["run"] for entry in document["runs"]] == ["return-hard"]
    assert all("return-hard-fbjw" not in arm["runs"] for arm in document["arms"])
    assert document["retracted"]["runs"]["return-hard-fbjw"]["reason"] == "wrong base model"
    refused = ccpo(
        seed_db, "card", "--run", "return-hard-fbjw", "--output", seed_db.parent / "c" / "README.md"
    )
    assert refused.exit_code == 3 and "was retracted" in refused.stderr
    # The other run's card no longer sets the retracted run beside it, and says why.
    text = render_card(build_card_context(store.open_db(seed_db), "return-hard"))
    assert "`return-hard-fbjw`" not in text.split("Corrections to the record")[0]
    listed = json.loads(ccpo(seed_db, "runs", "list", "--json").stdout)["runs"]
    assert (
        next(run for run in listed if run["name"] == "return-hard-fbjw")["retracted"][
            "retracted_by"
        ]
        == "carol"
    )


def test_an_evaluation_recorded_after_a_retraction_is_new_not_a_conflict(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(db, "r", arm=ExternalArm("grpo"), seed=0, total_steps=10)
    store.record_evaluation(db, "r", 5, success_rate=10.0, episodes=10)
    assert (
        ccpo(
            tmp_path / "runs.db", "runs", "retract", "r", "--step", "5", "--reason", "wrong games"
        ).exit_code
        == 0
    )
    outcome = store.record_evaluation_outcome(db, "r", 5, success_rate=60.0, episodes=10)
    assert outcome.outcome == "new"
    assert [row["success_rate"] for row in store.run_evaluations(db, "r")] == [60.0]
    # The wrong log ingested again is a duplicate of the retracted row: it does not come back.
    again = store.record_evaluation_outcome(db, "r", 5, success_rate=10.0, episodes=10)
    assert again.outcome == "duplicate" and [
        row["success_rate"] for row in store.run_evaluations(db, "r")
    ] == [60.0]


def _conflicted(tmp_path: Path) -> Path:
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(db, "r", arm=ExternalArm("grpo"), seed=0, total_steps=20)
    for step, rate in ((10, 40.0), (15, 45.0)):
        store.record_evaluation(db, "r", step, successes=int(rate * 1.28), episodes=128)
    # A re-ingest of a corrected log: step 15 again, with another result.
    outcome = store.record_evaluation_outcome(
        db, "r", 15, successes=107, episodes=128
    )  # 83.59375 %
    assert outcome.outcome == "conflict"
    return tmp_path / "runs.db"


def test_resolving_keeps_the_conflicting_value_records_who_and_when_and_compare_uses_it(tmp_path):
    path = _conflicted(tmp_path)
    before = json.loads(ccpo(path, "compare", "--json", "--window-start", "0").stdout)
    assert before["conflicts"]["r"]["steps"] == [15]
    rows_before = counts(path)
    result = ccpo(
        path,
        "runs",
        "resolve",
        "r",
        "--step",
        "15",
        "--keep",
        "83.6",
        "--reason",
        "the corrected panel",
        "--by",
        "dana@lab",
        "--json",
    )
    assert result.exit_code == 0, result.output
    resolution = json.loads(result.stdout)["resolution"]
    assert resolution["kept_value"] == 83.59375 and resolution["superseded_evaluation_ids"]
    after = json.loads(ccpo(path, "compare", "--json", "--window-start", "0").stdout)
    assert "r" not in after["conflicts"]
    assert [point["success"] for point in _entry(after, "r")["evaluations"]] == [
        pytest.approx(100 * int(40.0 * 1.28) / 128),
        83.59375,
    ]
    (settled,) = after["resolved_conflicts"]["r"]
    assert (settled["step"], settled["kept_value"], settled["resolved_by"], settled["reason"]) == (
        15,
        83.59375,
        "dana@lab",
        "the corrected panel",
    )
    assert settled["recorded_at"]
    grown = counts(path)
    assert (
        grown["evaluations"] == rows_before["evaluations"] + 1
        and grown["conflicts"] == rows_before["conflicts"]
    )
    again = ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "83.6", "--json")
    assert (
        again.exit_code == 0 and json.loads(again.stdout)["resolution"]["already_settled"] is True
    )
    assert counts(path) == grown
    shown = json.loads(ccpo(path, "runs", "show", "r", "--json").stdout)
    assert shown["conflicts"][0]["resolution"]["resolved_by"] == "dana@lab"
    assert json.loads(ccpo(path, "runs", "list", "--json").stdout)["runs"][0]["n_conflicts"] == 0


def test_keeping_the_standing_value_changes_no_number(tmp_path):
    path = _conflicted(tmp_path)
    before = _entry(json.loads(ccpo(path, "compare", "--json", "--window-start", "0").stdout), "r")
    result = ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "44.5")
    assert result.exit_code == 0, result.output
    after = _entry(json.loads(ccpo(path, "compare", "--json", "--window-start", "0").stdout), "r")
    assert after["window"] == before["window"] and after["conflicting_steps"] == []


def test_a_value_no_result_has_is_refused_naming_the_results(tmp_path):
    path = _conflicted(tmp_path)
    result = ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "50")
    assert result.exit_code == 3 and "83.59375" in result.stderr and "44.53125" in result.stderr
    assert ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "lots").exit_code == 3


def test_resolving_twice_says_already_resolved_and_claims_no_retraction(tmp_path):
    path = _conflicted(tmp_path)
    first = ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "83.6")
    assert first.exit_code == 0, first.output
    assert "retracted the result that stood" in first.output
    grown = counts(path)
    again = ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "83.6")
    assert again.exit_code == 0, again.output
    assert "already resolved keeping 83.5938" in again.stdout and "nothing changed" in again.stdout
    assert "retracted" not in again.output and "settled 1" not in again.output
    # Another value once settled: refused (exit 3), the standing settlement named, nothing written.
    other = ccpo(path, "runs", "resolve", "r", "--step", "15", "--keep", "44.5")
    assert other.exit_code == 3, other.output
    assert "already resolved keeping 83.5938" in other.output and "Traceback" not in other.output
    assert len(other.output.strip().splitlines()) == 1
    assert counts(path) == grown
