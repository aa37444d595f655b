"""runs.db under concurrent writers and a writer killed mid-ingest (real processes)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_store import training_series, write_ccpo

from ccpo_cli.errors import CcpoError
from ccpo_cli.store import db as store_db
from ccpo_cli.store import open_db
from ccpo_cli.store.ingest import ingest_file

REPO = Path(__file__).resolve().parents[1]


def metrics_file(path: Path, evaluations: int, offset: float) -> Path:
    rates = {step: 40.0 + offset + (step % 50) for step in range(evaluations)}
    return write_ccpo(training_series(rates, evaluations - 1), path)


def ccpo_process(db_path: Path, *args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return subprocess.Popen(
        [sys.executable, "-m", "ccpo_cli", "--db", str(db_path), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def hold_write_lock(db_path: Path) -> sqlite3.Connection:
    connection = sqlite3.connect(db_path, isolation_level=None, timeout=30)
    connection.execute("BEGIN IMMEDIATE")
    return connection


@pytest.mark.slow
def test_four_processes_ingesting_at_once_lose_nothing(tmp_path):
    db_path = tmp_path / "runs.db"
    open_db(db_path)
    files = [metrics_file(tmp_path / f"m{i}.jsonl", 1500, offset=i) for i in range(4)]
    blocker = hold_write_lock(db_path)  # all four start while the database is busy
    processes = [
        ccpo_process(db_path, "ingest", str(path), "--run", f"run-{i}")
        for i, path in enumerate(files)
    ]
    time.sleep(2.0)
    blocker.execute("COMMIT")
    blocker.close()
    for process in processes:
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, stderr
        assert "locked" not in stderr and "Traceback" not in stderr
    db = open_db(db_path)
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 4 * 1500
    assert db.execute("SELECT COUNT(*) FROM task_type_results").fetchone()[0] == 4 * 1500 * 6
    per_run = db.execute(
        "SELECT runs.name, COUNT(*) FROM evaluations JOIN runs ON runs.id = run_id "
        "GROUP BY runs.name ORDER BY 1"
    ).fetchall()
    assert per_run == [(f"run-{i}", 1500) for i in range(4)]


@pytest.mark.slow
def test_a_writer_killed_mid_ingest_leaves_a_consistent_database(tmp_path):
    db_path = tmp_path / "runs.db"
    open_db(db_path)
    path = metrics_file(tmp_path / "big.jsonl", 8000, offset=0)
    process = ccpo_process(db_path, "ingest", str(path), "--run", "big")
    probe = sqlite3.connect(db_path, isolation_level=None, timeout=0)
    deadline = time.monotonic() + 120
    killed_mid_write = False
    while time.monotonic() < deadline and process.poll() is None:
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
        except sqlite3.OperationalError as error:
            assert "locked" in str(error)
            time.sleep(0.3)  # well inside the write: some rows are already in the WAL
            process.send_signal(signal.SIGKILL)
            killed_mid_write = True
            break
        time.sleep(0.005)
    process.communicate(timeout=60)
    probe.close()
    assert killed_mid_write, "the ingest finished before it could be interrupted"
    assert process.returncode == -signal.SIGKILL
    db = open_db(db_path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert db.execute("PRAGMA foreign_key_check").fetchall() == []
    assert db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] == 0
    assert db.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 0
    report = ingest_file(db, path, "big")
    assert report.new == 8000
    assert db.execute("SELECT COUNT(*) FROM task_type_results").fetchone()[0] == 8000 * 6


def test_a_database_locked_too_long_gives_a_clear_error(tmp_path, monkeypatch):
    db_path = tmp_path / "runs.db"
    open_db(db_path)
    path = metrics_file(tmp_path / "m.jsonl", 10, offset=0)
    monkeypatch.setattr(store_db, "BUSY_TIMEOUT_MS", 50)
    monkeypatch.setattr(store_db, "LOCK_RETRY_SECONDS", 0.5)
    blocker = hold_write_lock(db_path)
    try:
        db = open_db(db_path)
        started = time.monotonic()
        with pytest.raises(CcpoError, match="locked by another writer") as raised:
            ingest_file(db, path, "r")
        assert raised.value.exit_code == 1
        assert time.monotonic() - started >= 0.5  # it retried before giving up
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert ingest_file(open_db(db_path), path, "r").new == 10
