"""A runs.db that is damaged, or in a folder that cannot be written: a damaged page (found at
opening or only by the query that reads it) is one line, exit 3, "not a usable runs database",
naming `sqlite3 .recover`; a runs.db in a read-only folder can be read; `sync push` from a
runs.db that cannot record the push is refused before anything is committed.

Asked for in issue 42, case 8 (database).
"""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess

import pytest
from helpers_hostile import assert_refused, invoke

from ccpo_cli.arms import load_arm
from ccpo_cli.store import ensure_run, open_db, record_evaluation


def _recorded(folder):
    path = folder / "runs.db"
    db = open_db(path)
    for name in ("r0", "r1"):
        ensure_run(db, name, arm=load_arm("grpo"), seed=int(name[1]), base_model="tiny",
                   backend="local", benchmark="alfworld", total_steps=400)  # fmt: skip
        for step in range(0, 400, 2):
            record_evaluation(db, name, step, success_rate=50.0, episodes=8, temperature=0.4)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()
    return path


def _damage_index(path, index):
    """Overwrite the root page of one index with garbage: the tables stay readable, a query
    through the index is not."""
    import sqlite3

    with contextlib.closing(sqlite3.connect(path)) as connection:
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        (root,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = ?", [index]
        ).fetchone()
    with open(path, "r+b") as handle:
        handle.seek((root - 1) * page_size)
        handle.write(b"\xa5" * page_size)


@pytest.mark.parametrize(
    "command", [("runs", "show", "r0"), ("compare", "r0", "r1"), ("export", "--to", "csv", "r0")]
)
def test_a_damaged_index_page_is_one_line_and_exit_3(tmp_path, command):
    path = _recorded(tmp_path)
    _damage_index(path, "evaluations_run_step")
    result = invoke("--db", path, *command, "--json")
    assert_refused(result, 3, "not a usable runs database", "sqlite3", ".recover")


def test_a_file_that_is_no_database_names_recover(tmp_path):
    path = tmp_path / "runs.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\x07" * 4096)
    result = invoke("--db", path, "runs", "list")
    assert_refused(result, 3, "not a usable runs database", ".recover")


@contextlib.contextmanager
def read_only_folder(folder):
    """A folder no process can write into: mode 555, and for root (whom modes do not stop)
    the immutable attribute as well."""
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP)
    immutable = os.geteuid() == 0
    if immutable:
        subprocess.run(["chattr", "+i", str(folder)], check=True, timeout=30)
    try:
        with pytest.raises(OSError):
            (folder / "probe").write_text("x")
        yield folder
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(folder)], check=True, timeout=30)
        folder.chmod(stat.S_IRWXU)


def test_a_runs_db_in_a_read_only_folder_can_be_read(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    path = _recorded(folder)
    for leftover in ("runs.db-wal", "runs.db-shm"):
        (folder / leftover).unlink(missing_ok=True)
    with read_only_folder(folder):
        for command in (("runs", "list"), ("runs", "show", "r0"), ("compare", "r0", "r1")):
            result = invoke("--db", path, *command, "--json")
            assert result.exit_code == 0, (command, result.output)
        assert sorted(p.name for p in folder.iterdir()) == ["runs.db"]


def test_sync_push_from_a_runs_db_that_cannot_record_it_pushes_nothing(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir()
    path = _recorded(folder)
    with read_only_folder(folder):
        # No Hub listens on port 9: a push that went ahead would fail with exit 4.
        result = invoke("--db", path, "sync", "push", "--repo", "me/runs", "--token", "hf_x",
                        "--endpoint", "http://127.0.0.1:9", "--deadline", "5")  # fmt: skip
        assert_refused(result, 1, "cannot be written", "nothing was done")
