"""runs.db: schema, connection settings, run identity, append-only evaluations."""

from __future__ import annotations

import sqlite3

import pytest

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import (
    ensure_run,
    get_run,
    list_runs,
    open_db,
    record_checkpoint,
    record_evaluation,
    record_evaluation_outcome,
    record_publication,
    run_checkpoints,
    run_conflicts,
    run_evaluations,
    run_publications,
    update_run_state,
    write_transaction,
)
from ccpo_cli.store.db import MIGRATIONS
from ccpo_cli.store.identity import ExternalArm

TABLES = {
    "runs",
    "evaluations",
    "task_type_results",
    "episodes",
    "checkpoints",
    "publications",
    "conflicts",
}


@pytest.fixture
def db(tmp_path):
    return open_db(tmp_path / "runs.db")


def count(db, table: str) -> int:
    return db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]


def test_open_db_migrates_uses_wal_and_enforces_foreign_keys(tmp_path):
    path = tmp_path / "runs.db"
    db = open_db(path)
    assert TABLES <= set(db.table_names())
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert [m.name for m in MIGRATIONS.applied(db)] == [m.name for m in MIGRATIONS._migrations]
    with pytest.raises(sqlite3.IntegrityError):
        db.execute(
            "INSERT INTO evaluations (run_id, step, split, success_rate, content_hash, recorded_at) "
            "VALUES (999, 1, 'heldout', 50, 'x', 'now')"
        )
    again = open_db(path)  # a second connection: migrations not re-run, foreign keys on again
    assert again.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert again.execute("SELECT COUNT(*) FROM _sqlite_migrations").fetchone()[0] == len(
        MIGRATIONS._migrations
    )


def test_open_db_refuses_a_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "runs.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InvalidInput, match="not a usable runs database"):
        open_db(path)
    with pytest.raises(InvalidInput, match="does not exist"):
        open_db(tmp_path / "missing-folder" / "runs.db")


def test_ensure_run_creates_updates_and_guards_identity(db):
    first = ensure_run(
        db,
        "rh-0",
        arm=ExternalArm("return-hard", "f1"),
        seed=0,
        config={"lr": 1e-6},
        package_versions={"torch": "2.13.0"},
        git_dirty=True,
    )
    assert ensure_run(db, "rh-0", status="running", total_steps=150) == first
    run = get_run(db, "rh-0")
    assert (run["arm"], run["arm_fingerprint"], run["seed"], run["status"], run["total_steps"]) == (
        "return-hard",
        "f1",
        0,
        "running",
        150,
    )
    assert run["config"] == {"lr": 1e-6} and run["package_versions"] == {"torch": "2.13.0"}
    assert run["git_dirty"] is True and run["created_at"] <= run["updated_at"]
    with pytest.raises(InvalidInput, match="arm_fingerprint 'f1'"):
        ensure_run(db, "rh-0", arm=ExternalArm("return-hard", "f2"))
    with pytest.raises(InvalidInput, match="seed"):
        ensure_run(db, "rh-0", seed=1)
    with pytest.raises(InvalidInput, match="status"):
        ensure_run(db, "rh-0", status="exploded")
    assert get_run(db, "rh-0")["arm_fingerprint"] == "f1"
    # A benchmark is never assumed: a run records one only when it is given, and keeps it.
    ensure_run(db, "shop", benchmark="webshop")
    ensure_run(db, "shop", status="running")
    assert (get_run(db, "shop")["benchmark"], get_run(db, "rh-0")["benchmark"]) == ("webshop", None)
    with pytest.raises(InvalidInput, match="benchmark"):
        ensure_run(db, "shop", benchmark="alfworld")
    # A run created without a fingerprint gets one later, once.
    ensure_run(db, "plain")
    ensure_run(db, "plain", arm=ExternalArm("gigpo", "g"))
    assert get_run(db, "plain")["arm_fingerprint"] == "g"


def test_update_run_state_moves_forward_and_fixes_the_step1_hash(db):
    ensure_run(db, "r")
    update_run_state(db, "r", status="running", last_step=10, step1_rollout_hash="abc")
    update_run_state(db, "r", last_step=5)
    run = get_run(db, "r")
    assert (run["status"], run["last_step"], run["step1_rollout_hash"]) == ("running", 10, "abc")
    update_run_state(db, "r", step1_rollout_hash="abc")
    with pytest.raises(InvalidInput, match="step-1 rollout hash"):
        update_run_state(db, "r", step1_rollout_hash="def")
    with pytest.raises(InvalidInput, match="no run named"):
        update_run_state(db, "ghost", status="running")


def test_same_evaluation_twice_is_one_row_and_a_different_one_is_a_conflict(db):
    ensure_run(db, "r")
    types = {
        "pick": {"episodes": 20, "successes": 16, "success": 80.0},
        "look_at_obj_in_light": 50.0,
    }
    first = record_evaluation(
        db, "r", 70, episodes=128, successes=100, task_types=types, eval_seed=0
    )
    second = record_evaluation(
        db, "r", 70, episodes=128, successes=100, task_types=types, eval_seed=0
    )
    assert first == second
    assert (count(db, "evaluations"), count(db, "task_type_results")) == (1, 2)
    outcome = record_evaluation_outcome(db, "r", 70, episodes=128, successes=101, eval_seed=0)
    assert outcome.outcome == "conflict" and outcome.evaluation_id == first
    assert count(db, "evaluations") == 1 and count(db, "conflicts") == 1
    # The stored row keeps its original numbers; the conflict holds the new ones.
    stored = run_evaluations(db, "r")[0]
    assert stored["successes"] == 100 and stored["success_rate"] == pytest.approx(100 / 128 * 100)
    assert stored["task_types"]["look"] == {"episodes": None, "successes": None, "success": 50.0}
    assert run_conflicts(db, "r")[0]["content"]["successes"] == 101
    # The same conflicting content again is not a second conflict; another eval seed is new.
    record_evaluation(db, "r", 70, episodes=128, successes=101, eval_seed=0)
    assert count(db, "conflicts") == 1
    assert (
        record_evaluation_outcome(db, "r", 70, episodes=128, successes=90, eval_seed=1).outcome
        == "new"
    )


def test_recorded_results_cannot_be_edited(db):
    ensure_run(db, "r")
    evaluation_id = record_evaluation(db, "r", 5, episode_rows=[{"won": True, "task_type": "pick"}])
    for statement in (
        "UPDATE evaluations SET success_rate = 0 WHERE id = ?",
        "UPDATE task_type_results SET success_rate = 0 WHERE evaluation_id = ?",
        "UPDATE episodes SET won = 0 WHERE evaluation_id = ?",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            db.execute(statement, [evaluation_id])
    assert run_evaluations(db, "r")[0]["success_rate"] == 100.0


def test_episode_rows_give_totals_turns_and_types(db):
    ensure_run(db, "r")
    rows = [
        {
            "game_id": "g1",
            "task_type": "pick_two_obj_and_place",
            "won": True,
            "turns": 10,
            "invalid_turns": 1,
        },
        {
            "game_id": "g2",
            "task_type": "pick_two_obj_and_place",
            "won": False,
            "turns": 50,
            "invalid_turns": 7,
        },
        {
            "game_id": "g3",
            "task_type": "look",
            "won": True,
            "turns": 6,
            "invalid_turns": 0,
            "seed_used": 3,
        },
    ]
    evaluation_id = record_evaluation(db, "r", 5, episode_rows=rows, temperature=0.4)
    stored = run_evaluations(db, "r")[0]
    assert (stored["episodes"], stored["successes"], stored["mean_turns"]) == (
        3,
        2,
        pytest.approx(22.0),
    )
    assert stored["task_types"]["pick2"] == {"episodes": 2, "successes": 1, "success": 50.0}
    episodes = db.execute(
        "SELECT game_id, won, extra FROM episodes WHERE evaluation_id = ? ORDER BY episode_index",
        [evaluation_id],
    ).fetchall()
    assert episodes == [("g1", 1, None), ("g2", 0, None), ("g3", 1, '{"seed_used":3}')]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"success_rate": 150.0}, "percent"),
        ({"success_rate": float("nan")}, "finite"),
        ({"episodes": 10, "successes": 11}, "11 successes out of 10"),
        ({"episodes": 10, "successes": 5, "success_rate": 60.0}, "disagrees"),
        ({}, "needs success_rate"),
        ({"success_rate": 50.0, "task_types": {"fly": 1.0}}, "not an ALFWorld task type"),
        ({"episode_rows": [{"game_id": "x"}]}, "no 'won'"),
    ],
)
def test_invalid_evaluations_are_refused_and_leave_nothing(db, kwargs, message):
    ensure_run(db, "r")
    with pytest.raises(InvalidInput, match=message):
        record_evaluation(db, "r", 5, **kwargs)
    assert count(db, "evaluations") == 0 and count(db, "task_type_results") == 0


def test_an_evaluation_is_atomic(db):
    ensure_run(db, "r")
    rows = [
        {"won": True, "episode_index": 0},
        {"won": False, "episode_index": 0},
    ]  # duplicate index
    with pytest.raises(sqlite3.IntegrityError):
        record_evaluation(db, "r", 5, episode_rows=rows, task_types={"pick": 50.0})
    assert (count(db, "evaluations"), count(db, "episodes"), count(db, "task_type_results")) == (
        0,
        0,
        0,
    )


def test_outer_write_transaction_rolls_back_everything(db):
    with pytest.raises(RuntimeError):
        with write_transaction(db):
            ensure_run(db, "r")
            record_evaluation(db, "r", 5, success_rate=50.0)
            raise RuntimeError("boom")
    assert count(db, "runs") == 0 and count(db, "evaluations") == 0


def test_checkpoints_and_publications(db):
    ensure_run(db, "r")
    checkpoint = record_checkpoint(db, "r", 115, "/ckpt/115", sha256="aa", size_bytes=10)
    assert record_checkpoint(db, "r", 115, "/ckpt/115") == checkpoint
    with pytest.raises(InvalidInput, match="sha256"):
        record_checkpoint(db, "r", 115, "/ckpt/115", sha256="bb")
    assert run_checkpoints(db, "r")[0]["sha256"] == "aa"
    record_publication(
        db,
        "r",
        "me/model",
        revision="main",
        commit_id="c1",
        card_hash="h1",
        status="interim",
        checkpoint_step=115,
    )
    record_publication(db, "r", "me/model", commit_id="c2", card_hash="h2", status="final")
    assert [row["status"] for row in run_publications(db, "r")] == ["interim", "final"]
    with pytest.raises(InvalidInput, match="interim or final"):
        record_publication(db, "r", "me/model", status="draft")


def test_list_runs_summarises(db):
    ensure_run(db, "b", arm=ExternalArm("gigpo"))
    ensure_run(db, "a", arm=ExternalArm("grpo"))
    record_evaluation(db, "a", 5, success_rate=10.0)
    record_evaluation(db, "a", 10, success_rate=20.0)
    runs = list_runs(db)
    assert [run["name"] for run in runs] == ["a", "b"]
    assert (runs[0]["n_evaluations"], runs[0]["last_eval_step"], runs[0]["last_step"]) == (
        2,
        10,
        10,
    )
    assert runs[1]["n_evaluations"] == 0
