"""What a person reads in an 80-column terminal (COLUMNS=80): `runs list` fits it by default
(--wide for the rest, --sort, --limit), `runs diff` shows A and B side by side with the fields
one side never recorded folded into a line, and `runs show` keeps a retraction on its
evaluation's row. (`ccpo train`'s bar: tests/test_cli_progress.py.)

Asked for in issue 43, Deliver 5.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db
from ccpo_cli.store.retractions import retract

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    """The seed card's three runs (a long verl config each) and the README's example log."""
    path = tmp_path_factory.mktemp("terminal80") / "runs.db"
    seed_card_db(path)
    result = runner.invoke(
        app,
        [
            "--db",
            str(path),
            "ingest",
            str(ROOT / "examples" / "verl-agent-alfworld-7b.jsonl"),
            "--run",
            "rh-7b",
            "--arm",
            "return-hard",
            "--base-model",
            "Qwen/Qwen2.5-7B-Instruct",
            "--total-steps",
            "150",
        ],
    )
    assert result.exit_code == 0, result.output
    retract(open_db(path), "return-hard", step=40, reason="evaluated on the training games")
    return path


def at_80(db: Path, *args: str, code: int = 0) -> str:
    result = runner.invoke(app, ["--db", str(db), *args], env={"COLUMNS": "80"})
    assert result.exit_code == code, result.output
    return result.stdout if code == 0 else result.output


def lines_of(output: str) -> list[str]:
    return [line.rstrip() for line in output.splitlines()]


def test_runs_list_fits_80_columns_in_one_part_and_wide_has_the_rest(db_path):
    narrow = at_80(db_path, "runs", "list")
    assert max(len(line) for line in lines_of(narrow)) <= 80
    assert not re.search(r"\(\d+/\d+\)", narrow)  # one table, not parts
    header = next(line for line in lines_of(narrow) if line.lstrip().startswith("run "))
    assert header.split() == ["run", "arm", "seed", "status", "step", "window"]
    wide = at_80(db_path, "runs", "list", "--wide")
    assert "(1/" in wide and "base model" in wide and "updated" in wide
    csv_header = at_80(db_path, "runs", "list", "--format", "csv").splitlines()[0]
    assert "base_model" in csv_header  # every column outside the terminal


def test_runs_list_sorts_and_limits(db_path):
    runs = json.loads(at_80(db_path, "runs", "list", "--json"))["runs"]
    best = max(runs, key=lambda run: run["window_success"] or -1)
    document = json.loads(
        at_80(db_path, "runs", "list", "--sort", "window", "--limit", "1", "--json")
    )
    assert [run["name"] for run in document["runs"]] == [best["name"]]
    by_name = json.loads(at_80(db_path, "runs", "list", "--sort", "run", "--json"))["runs"]
    assert [run["name"] for run in by_name] == sorted(run["name"] for run in runs)
    assert "--sort" in at_80(db_path, "runs", "list", "--sort", "colour", code=2)


def test_runs_diff_shows_both_runs_side_by_side_and_folds_what_one_never_recorded(db_path):
    output = at_80(db_path, "runs", "diff", "return-hard", "rh-7b")
    assert max(len(line) for line in lines_of(output)) <= 80
    assert not re.search(r"\(\d+/\d+\)", output)  # A and B in one table
    header = next(line for line in lines_of(output) if line.lstrip().startswith("field"))
    assert header.split() == ["field", "return-hard", "rh-7b"]
    document = json.loads(at_80(db_path, "runs", "diff", "return-hard", "rh-7b", "--json"))
    missing = [d["field"] for d in document["differences"] if d["second"] == "not recorded"]
    assert len(missing) >= 5  # the verl config the log did not carry
    folded = " ".join(output.split("not recorded for rh-7b:", 1)[1].split())
    assert folded.split(", ") == missing  # every one of them, in one line
    assert "not recorded" not in output.split("not recorded for", 1)[0].split("field", 1)[1]


def test_runs_show_keeps_the_retraction_on_its_evaluations_row(db_path):
    output = at_80(db_path, "runs", "show", "return-hard")
    evaluations = output.split("evaluations (success %", 1)[1]
    first_part = re.split(r"\n\S.*\(2/\d+\)", evaluations)[0]
    [row] = [line for line in lines_of(first_part) if line.split()[:1] == ["40"]]
    assert "evaluated" in row  # the marker, on the row's own line of the first part
