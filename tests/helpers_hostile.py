"""Running the CLI as a hostile user would, and checking that nothing changed behind it."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from ccpo_cli.cli.app import app

REPO_ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(app, [str(arg) for arg in args], input=input)


def assert_refused(result, code: int, *phrases: str) -> str:
    """Exit `code`, one line on stderr naming the problem, no traceback; the line."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == code, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]


def db_state(path: Path) -> tuple:
    """(integrity_check, row counts of every table, schema) of a database file."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        integrity = connection.execute("PRAGMA integrity_check").fetchone()[0]
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        counts = {
            table: connection.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            for table in tables
        }
        schema = connection.execute("SELECT group_concat(sql, ';') FROM sqlite_master").fetchone()[
            0
        ]
    return integrity, counts, schema


def run_ccpo(
    *args: str,
    cwd: Path,
    preexec=None,
    env: dict | None = None,
    stdin: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """The CLI in a child process (for limits and users that must not touch the test process)."""
    environment = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONDONTWRITEBYTECODE="1", COLUMNS="200"
    )
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "ccpo_cli", *map(str, args)],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        preexec_fn=preexec,
        input=stdin,
        timeout=timeout,
        check=False,
    )


def assert_child_refused(completed: subprocess.CompletedProcess, code: int, *phrases: str) -> str:
    assert completed.returncode == code, (completed.returncode, completed.stdout, completed.stderr)
    lines = [line for line in completed.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in completed.stderr, completed.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]
    return lines[0]
