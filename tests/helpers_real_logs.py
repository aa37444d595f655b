"""Reading the real logs beside this repository (the shared folder's real-logs, one round a
folder, each with its SOURCES.md) through `ccpo ingest --json`, as a user would."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from ccpo_cli.cli.app import app

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs"
ROUND3 = REAL_LOGS / "round3"
ROUND4 = REAL_LOGS / "round4"
# Colour codes Ray and Hydra print into console logs; the tests' own regexes read around them.
ANSI = re.compile(r"\x1b\[[0-9;]*m")

runner = CliRunner()


def ingest(db_path: Path, path: Path, run: str, *extra: str) -> dict:
    """`ccpo ingest PATH --run RUN --json` into db_path; its document (the exit must be 0)."""
    result = runner.invoke(
        app, ["--db", str(db_path), "ingest", str(path), "--run", run, "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
