"""`ccpo runs show` of another author's run says what that run measured (issue 29): each
benchmark's own per-type columns (ALFWorld's six, none for WebShop or Sokoban), and a split the
log did not name is "not recorded", never the benchmark's verl-agent default."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db, record_evaluation
from ccpo_cli.store.identity import run_identity
from ccpo_cli.store.records import ensure_run

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs"
ROUND3 = REAL_LOGS / "round3"
ALFWORLD_TYPES = ["pick", "look", "clean", "heat", "cool", "pick2"]

runner = CliRunner()


def invoke(db_path: Path, *args: str):
    result = runner.invoke(app, ["--db", str(db_path), *args])
    assert result.exit_code == 0, result.output
    return result


def ingest(db_path: Path, path: Path, run: str, *extra: str) -> dict:
    return json.loads(invoke(db_path, "ingest", str(path), "--run", run, "--json", *extra).stdout)


def evaluation_header(db_path: Path, run: str) -> list[str]:
    text = invoke(db_path, "runs", "show", run, "--format", "csv", "--table", "evaluations").stdout
    return next(csv.reader(io.StringIO(text)))


@pytest.mark.slow
def test_webshop_and_sokoban_runs_show_no_alfworld_task_types(tmp_path):
    db_path = tmp_path / "r.db"
    ingest(db_path, ROUND3 / "jonp07hiper_ppo_webshop_dev_h100.txt", "webshop")
    ingest(
        db_path,
        ROUND3 / "sfff_sokoban_turnppo_qwen3vl4b_20260524_113001_output.log",
        "sokoban",
        "--benchmark",
        "sokoban",
    )
    ingest(db_path, ROUND3 / "jonp07hiper_ppo_alfworld_seed5_1_5b.txt", "alfworld")
    for run in ("webshop", "sokoban"):
        header = evaluation_header(db_path, run)
        assert not set(ALFWORLD_TYPES) & set(header), (run, header)
        assert "success" in header
        table = invoke(db_path, "runs", "show", run).stdout
        assert "pick2" not in table
    header = evaluation_header(db_path, "alfworld")
    first = header.index(ALFWORLD_TYPES[0])
    assert header[first : first + len(ALFWORLD_TYPES)] == ALFWORLD_TYPES


def test_a_run_without_a_benchmark_shows_the_task_types_its_rows_hold(tmp_path):
    db = open_db(tmp_path / "r.db")
    ensure_run(db, "bare")
    record_evaluation(db, "bare", 10, success_rate=50.0, task_types={"heat": 25.0})
    header = evaluation_header(tmp_path / "r.db", "bare")
    assert "heat" in header and "pick" not in header


def test_a_split_the_log_does_not_name_is_not_recorded(tmp_path):
    """sfff's ALFWorld log prints no config: its split is not recorded (ALFWorld's verl-agent
    default is not the log's word); JonP07's prints env.alfworld.eval_dataset, so its split is."""
    db_path = tmp_path / "r.db"
    document = ingest(
        db_path, ROUND3 / "sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log", "unnamed"
    )
    assert "split" not in document["stated_facts"]
    ingest(db_path, ROUND3 / "jonp07hiper_ppo_alfworld_seed5_1_5b.txt", "printed")
    ingest(db_path, ROUND3 / "warmgigpo_webshop_sft2k_gigpo.log", "webshop")
    db = open_db(db_path)
    assert run_identity(db, "unnamed").protocol.split is None
    assert run_identity(db, "webshop").protocol.split is None
    printed = run_identity(db, "printed").protocol
    assert printed.split == "valid_seen" and printed.split_assumed is None
    shown = json.loads(invoke(db_path, "runs", "show", "unnamed", "--json").stdout)
    assert "split" not in shown["facts"] and shown["identity"]["protocol"]["split"] is None
    assert "split not recorded" in invoke(db_path, "runs", "show", "unnamed").stdout
    # A split given by its user is recorded as given.
    ingest(
        db_path,
        ROUND3 / "sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log",
        "told",
        "--split",
        "valid_unseen",
    )
    assert run_identity(db, "told").protocol.split == "valid_unseen"


def test_an_older_ingests_assumed_split_reads_as_not_recorded(tmp_path):
    """runs.db files written before this change hold verl-agent's default as an "assumed" fact."""
    db = open_db(tmp_path / "r.db")
    ensure_run(db, "old")
    run_id = next(db["runs"].rows_where("name = ?", ["old"]))["id"]
    db["run_facts"].insert(
        {
            "run_id": run_id,
            "key": "split",
            "value": json.dumps("valid_seen"),
            "source": "assumed (the log names no split): default: verl-agent validates on "
            "eval_in_distribution (valid_seen)",
            "recorded_at": "2026-01-01T00:00:00Z",
        }
    )
    assert run_identity(db, "old").protocol.split is None
    db["run_facts"].insert(
        {
            "run_id": run_id,
            "key": "split",
            "value": json.dumps("valid_unseen"),
            "source": "--split",
            "recorded_at": "2026-01-02T00:00:00Z",
        }
    )
    assert run_identity(db, "old").protocol.split == "valid_unseen"
