"""runs.db knows whose it is, and a failed
write exits 1 with one line and leaves the database as it was.

Asked for in issue 12, case 4 and the write failures of case 7.
"""

from __future__ import annotations

import os
import resource
import signal
import sqlite3
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_hostile import (
    assert_child_refused,
    assert_refused,
    db_state,
    invoke,
    run_ccpo,
)
from helpers_store import training_series, write_ccpo

from ccpo_cli import store
from ccpo_cli.store import db as db_module

READ_COMMANDS = [
    ("runs", "list"),
    ("runs", "show", "return-hard"),
    ("compare",),
    ("card", "--run", "return-hard"),
    ("publish", "--run", "return-hard", "--repo", "me/x", "--dry-run"),
]


@pytest.fixture
def seeded(tmp_path):
    path = tmp_path / "runs.db"
    seed_card_db(path, arms=1)
    return path


def metrics_file(tmp_path: Path) -> Path:
    return write_ccpo(training_series({10: 50.0, 20: 60.0}, 20), tmp_path / "metrics.jsonl")


def test_a_new_database_is_stamped(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    assert db.execute("PRAGMA application_id").fetchone()[0] == db_module.APPLICATION_ID
    assert db.execute("PRAGMA user_version").fetchone()[0] == len(db_module._known_migrations())


@pytest.mark.parametrize("command", READ_COMMANDS)
def test_a_read_command_never_creates_a_missing_database(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    assert_refused(
        invoke("--db", tmp_path / "typo.db", *command), 3, "typo.db", "no such runs database"
    )
    assert not (tmp_path / "typo.db").exists()


@pytest.mark.parametrize("command", READ_COMMANDS[:2] + [("ingest", "METRICS", "--run", "w")])
def test_a_foreign_sqlite_file_is_left_alone(tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)
    other = tmp_path / "other-app.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        connection.execute("INSERT INTO notes (body) VALUES ('mine')")
    before = db_state(other)
    command = [str(metrics_file(tmp_path)) if part == "METRICS" else part for part in command]
    assert_refused(invoke("--db", other, *command), 3, "other-app.db", "not a ccpo runs database")
    assert db_state(other) == before


def test_another_applications_id_is_refused(tmp_path):
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("PRAGMA application_id = 1234")
    assert_refused(invoke("--db", other, "runs", "list"), 3, "another application")


def test_a_newer_schema_is_refused_for_reads_and_writes(seeded, tmp_path):
    with sqlite3.connect(seeded) as connection:
        connection.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
            "VALUES ('ccpo', 'm999_from_the_future', '2030-01-01')"
        )
    before = db_state(seeded)
    assert_refused(invoke("--db", seeded, "runs", "list"), 3, "newer ccpo", "m999_from_the_future")
    result = invoke("--db", seeded, "ingest", metrics_file(tmp_path), "--run", "w")
    assert_refused(result, 3, "newer ccpo")
    assert db_state(seeded) == before


def test_a_higher_user_version_is_refused(seeded):
    with sqlite3.connect(seeded) as connection:
        connection.execute("PRAGMA user_version = 99")
    assert_refused(invoke("--db", seeded, "runs", "list"), 3, "newer ccpo", "schema version 99")


def test_renamed_columns_give_a_message_not_a_traceback(seeded):
    with sqlite3.connect(seeded) as connection:
        # Legacy rename: SQLite otherwise refuses a rename that breaks a view (m009_views).
        connection.execute("PRAGMA legacy_alter_table = ON")
        connection.execute("ALTER TABLE runs RENAME COLUMN arm TO arm_name")
    before = db_state(seeded)
    assert_refused(invoke("--db", seeded, "runs", "list"), 3, "table runs lacks column(s) arm")
    assert_refused(invoke("--db", seeded, "card", "--run", "return-hard"), 3, "lacks column")
    assert db_state(seeded) == before


def test_a_database_from_before_the_stamp_is_adopted_and_stamped_on_write(seeded, tmp_path):
    with sqlite3.connect(seeded) as connection:
        connection.execute("PRAGMA application_id = 0")
        connection.execute("PRAGMA user_version = 0")
    listed = invoke("--db", seeded, "runs", "list")
    assert listed.exit_code == 0 and "return-hard" in listed.stdout
    with sqlite3.connect(seeded) as connection:
        assert (
            connection.execute("PRAGMA application_id").fetchone()[0] == 0
        )  # a read writes nothing
    assert invoke("--db", seeded, "ingest", metrics_file(tmp_path), "--run", "w").exit_code == 0
    with sqlite3.connect(seeded) as connection:
        assert connection.execute("PRAGMA application_id").fetchone()[0] == db_module.APPLICATION_ID
        assert connection.execute("PRAGMA user_version").fetchone()[0] == len(
            db_module._known_migrations()
        )


def test_a_write_through_a_read_command_stamps_an_old_database(seeded):
    with sqlite3.connect(seeded) as connection:
        connection.execute("PRAGMA application_id = 0")
    db = store.open_db(seeded, must_exist=True)
    assert db.execute("PRAGMA application_id").fetchone()[0] == 0
    store.record_publication(
        db,
        "return-hard",
        "me/x",
        revision="main",
        commit_id="c0ffee",
        card_hash="h",
        status="interim",
        checkpoint_step=None,
        url=None,
    )
    assert db.execute("PRAGMA application_id").fetchone()[0] == db_module.APPLICATION_ID


# --- write failures: exit 1, one line, nothing changed --------------------------------------


def test_a_write_lock_held_beyond_the_wait(seeded, tmp_path, monkeypatch):
    monkeypatch.setattr(db_module, "LOCK_RETRY_SECONDS", 0.3)
    monkeypatch.setattr(db_module, "BUSY_TIMEOUT_MS", 100)
    metrics = metrics_file(tmp_path)
    before = db_state(seeded)
    holder = sqlite3.connect(seeded, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = invoke("--db", seeded, "ingest", metrics, "--run", "w")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_refused(result, 1, "locked")
    assert db_state(seeded) == before


def test_a_full_disk_while_ingesting(seeded, tmp_path):
    metrics = metrics_file(tmp_path)
    before = db_state(seeded)
    limit = 4096  # bytes a file may grow to: the WAL cannot take its first frame

    def small_files():
        signal.signal(
            signal.SIGXFSZ, signal.SIG_IGN
        )  # EFBIG instead of a kill, as a full disk gives ENOSPC
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    completed = run_ccpo(
        "--db", seeded, "ingest", metrics, "--run", "w", cwd=tmp_path, preexec=small_files
    )
    assert_child_refused(completed, 1, str(seeded))
    assert db_state(seeded) == before


def test_a_full_disk_while_writing_a_card(seeded, tmp_path):
    limit = 40_000  # room for runs.db's 32 KiB WAL index, not for the ~48 KB learning curve PNG

    def small_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    readme = tmp_path / "card" / "README.md"
    completed = run_ccpo(
        "--db",
        seeded,
        "card",
        "--run",
        "return-hard",
        "--output",
        readme,
        cwd=tmp_path,
        preexec=small_files,
    )
    assert_child_refused(completed, 1, "learning_curve.png", "cannot write")
    assert [p for p in (tmp_path / "card").rglob("*") if p.is_file()] == []


@pytest.fixture
def read_only(monkeypatch):
    """Make runs.db read-only to ccpo: chmod for an ordinary user; root ignores file modes, so
    there ccpo's connections are opened read-only, which SQLite reports the same way."""
    real_connect = sqlite3.connect

    def make(path: Path) -> None:
        os.chmod(path, 0o444)
        if os.geteuid() == 0:

            def read_only_connect(database, *args, **kwargs):
                if str(database) == str(path):
                    return real_connect(f"file:{database}?mode=ro", *args, uri=True, **kwargs)
                return real_connect(database, *args, **kwargs)

            monkeypatch.setattr(db_module.sqlite3, "connect", read_only_connect)

    yield make
    monkeypatch.setattr(db_module.sqlite3, "connect", real_connect)


def test_a_read_only_database(seeded, tmp_path, read_only):
    metrics = metrics_file(tmp_path)
    before = db_state(seeded)
    read_only(seeded)
    assert_refused(
        invoke("--db", seeded, "ingest", metrics, "--run", "w"), 1, str(seeded), "readonly"
    )
    card = invoke(
        "--db", seeded, "card", "--run", "return-hard", "--output", tmp_path / "card" / "README.md"
    )
    assert card.exit_code == 0, card.output  # reading needs no write
    assert db_state(seeded) == before
