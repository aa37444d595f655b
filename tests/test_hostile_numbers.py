"""Every numeric entry and every config file is checked before anything is written.

Seeds and steps past what runs.db holds (SQLite's 64-bit integer) used to end in a traceback
from deep inside a write; a ccpo definition file given as a run's `--config` was recorded as
facts of nothing. Each is now one line and the contract's exit code, and no run is written.

Asked for in issue 30.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cli.app import app
from ccpo_cli.paths import configs_dir
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()
HUGE = str(2**64)
PAST_INT64 = str(2**63)


def _runs(db: Path) -> list[str]:
    if not db.exists():
        return []
    with sqlite3.connect(db) as connection:
        return [row[0] for row in connection.execute("SELECT name FROM runs ORDER BY name")]


@pytest.fixture
def db(tmp_path) -> Path:
    database = store.open_db(tmp_path / "runs.db")
    store.ensure_run(database, "r", arm=ExternalArm("grpo"), seed=0, total_steps=4)
    store.record_evaluation(database, "r", 2, successes=5, episodes=10)
    (tmp_path / "log.jsonl").write_text('{"step": 1, "val/success_rate": 0.5}\n')
    (tmp_path / "steps.yaml").write_text(f"trainer:\n  total_training_steps: {HUGE}\n")
    (tmp_path / "seed.yaml").write_text(f"env:\n  seed: {PAST_INT64}\n")
    return tmp_path / "runs.db"


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, code, words",
    [
        (
            ["train", "--arm", "grpo", "--seeds", HUGE, "--steps", "2", "--dry-run"],
            3,
            "a seed is at most 4294967295",
        ),
        (
            ["train", "--arm", "grpo", "--seed", PAST_INT64, "--steps", "2", "--dry-run"],
            2,
            "--seed",
        ),
        (
            ["train", "--arm", "grpo", "--seed", str(2**40), "--steps", "2", "--dry-run"],
            3,
            "a seed is a whole number",
        ),
        (["train", "--arm", "grpo", "--steps", HUGE, "--dry-run"], 2, "--steps"),
        (
            ["matrix", "--arms", "grpo,gigpo", "--seeds", f"0-1,{PAST_INT64}", "--dry-run"],
            3,
            "a seed is at most",
        ),
        (["matrix", "--arms", "grpo,gigpo", "--steps", HUGE, "--dry-run"], 2, "--steps"),
        (["eval", "--run", "r", "--agent", "random", "--step", HUGE, "--seeds", "0"], 2, "--step"),
        (["eval", "--run", "r", "--agent", "random", "--seeds", HUGE], 3, "a seed is at most"),
        (["ingest", "{dir}/log.jsonl", "--run", "new", "--seed", PAST_INT64], 2, "--seed"),
        (["ingest", "{dir}/log.jsonl", "--run", "new", "--total-steps", HUGE], 2, "--total-steps"),
        (
            ["ingest", "{dir}/log.jsonl", "--run", "new", "--config", "{dir}/steps.yaml"],
            3,
            "total_steps",
        ),
        (
            ["ingest", "{dir}/log.jsonl", "--run", "new", "--config", "{dir}/seed.yaml"],
            3,
            "the config's seed",
        ),
        (["runs", "retract", "r", "--step", HUGE, "--reason", "x"], 2, "--step"),
        (["runs", "resolve", "r", "--step", f"-{HUGE}", "--keep", "5"], 2, "--step"),
    ],
)
def test_a_number_past_what_runs_db_holds_is_one_line_never_a_traceback(db, args, code, words):
    before = _runs(db)
    result = runner.invoke(app, ["--db", str(db), *[arg.format(dir=db.parent) for arg in args]])
    assert result.exit_code == code, result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), result.exception
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.output
    assert _runs(db) == before


@pytest.mark.parametrize(
    "definition, kind, hint",
    [
        ("benchmarks/webshop.yaml", "benchmark definition", "--benchmark webshop"),
        ("arms/grpo.yaml", "arm definition", "--arm grpo"),
        ("designs/control.yaml", "design", "ccpo matrix --design control"),
        ("protocol/alfworld.yaml", "launch protocol", "resolved Hydra config"),
    ],
)
def test_a_ccpo_definition_given_as_a_run_config_is_refused_naming_what_it_is(
    db, definition, kind, hint
):
    path = configs_dir() / definition
    result = runner.invoke(
        app,
        [
            "--db",
            str(db),
            "ingest",
            str(db.parent / "log.jsonl"),
            "--run",
            "new",
            "--config",
            str(path),
        ],
    )
    assert result.exit_code == 3, result.output
    (line,) = result.output.strip().splitlines()
    assert f"this is a ccpo {kind}" in line and hint in line and path.name in line
    assert _runs(db) == ["r"]
