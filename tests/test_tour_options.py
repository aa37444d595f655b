"""The options the tour needs. `--status auto` for card and publish, a default
window too short for a window mean names the --window-start to pass, publish --dry-run prints
its plan and where the token would come from, ingest takes --backend, --hardware and
--input-format, and --format json means what it means everywhere.

Asked for in issue 32, item 5.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db
from ccpo_cli.store.facts import run_facts
from ccpo_cli.store.queries import get_run

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "verl-agent-alfworld-7b.jsonl"
runner = CliRunner()


def invoke(db: Path, *args: str):
    return runner.invoke(app, ["--db", str(db), *args], env={"COLUMNS": "120"})


def _ingest(db: Path, path: Path, run: str, *extra: str):
    result = invoke(
        db,
        "ingest",
        str(path),
        "--run",
        run,
        "--arm",
        "return-hard",
        "--base-model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--total-steps",
        "150",
        *extra,
    )
    assert result.exit_code == 0, result.output
    return result


@pytest.fixture(scope="module")
def example_db(tmp_path_factory) -> Path:
    tmp_path = tmp_path_factory.mktemp("tour")
    db = tmp_path / "runs.db"
    _ingest(db, EXAMPLE, "rh-7b", "--backend", "verl", "--hardware", "8xH100")
    lines = EXAMPLE.read_text().splitlines()
    (tmp_path / "first-80.jsonl").write_text(
        "\n".join(lines[:80]) + "\n"
    )  # the run at step 80 of 150
    _ingest(db, tmp_path / "first-80.jsonl", "rh-80", "--backend", "verl")
    return db


def test_ingest_records_backend_and_hardware_and_reads_input_format(example_db, tmp_path):
    db = open_db(example_db)
    run = get_run(db, "rh-7b")
    assert run["backend"] == "verl" and run_facts(db, run["id"])["values"]["hardware"] == "8xH100"
    as_json = invoke(
        example_db,
        "ingest",
        str(EXAMPLE),
        "--run",
        "rh-7b",
        "--format",
        "json",
        "--input-format",
        "verl-file",
    )
    assert as_json.exit_code == 0, as_json.output
    report = json.loads(as_json.stdout)
    assert report["format"] == "verl-file" and report["new"] == 0 and report["duplicates"] == 15
    v1 = invoke(
        example_db, "ingest", str(EXAMPLE), "--run", "rh-7b", "--format", "verl-file", "--json"
    )
    assert (
        v1.exit_code == 0 and json.loads(v1.stdout)["format"] == "verl-file"
    )  # the v1 contract's meaning stays
    wrong = invoke(example_db, "ingest", str(EXAMPLE), "--run", "rh-7b", "--input-format", "yaml")
    assert wrong.exit_code == 2 and "--input-format yaml: use one of" in wrong.stderr
    both = invoke(
        example_db,
        "ingest",
        str(EXAMPLE),
        "--run",
        "rh-7b",
        "--format",
        "ccpo",
        "--input-format",
        "csv",
    )
    assert both.exit_code == 2 and "give the file's format once" in both.stderr
    backend = invoke(example_db, "ingest", str(EXAMPLE), "--run", "rh-7b", "--backend", "tpu")
    assert backend.exit_code == 2 and "--backend tpu: use one of local, verl" in backend.stderr


@pytest.mark.slow
def test_card_status_auto_follows_the_run(example_db, tmp_path):
    final = invoke(
        example_db,
        "card",
        "--run",
        "rh-7b",
        "--status",
        "auto",
        "--output",
        str(tmp_path / "a/README.md"),
        "--json",
    )
    assert final.exit_code == 0, final.output
    assert (
        json.loads(final.stdout)["status"] == "final"
        and "final card (--status auto: the run is finished" in final.stderr
    )
    interim = invoke(
        example_db,
        "card",
        "--run",
        "rh-80",
        "--status",
        "auto",
        "--window-start",
        "40",
        "--output",
        str(tmp_path / "b/README.md"),
        "--json",
    )
    assert interim.exit_code == 0, interim.output
    assert json.loads(interim.stdout)["status"] == "interim"


@pytest.mark.slow
def test_a_default_window_too_short_names_the_start_to_pass(example_db, tmp_path):
    refused = invoke(
        example_db,
        "card",
        "--run",
        "rh-80",
        "--status",
        "interim",
        "--output",
        str(tmp_path / "c/README.md"),
    )
    assert refused.exit_code == 3
    assert (
        "holds 2 evaluation(s), a window mean needs 3; pass --window-start 60 for the last 3 evaluations"
        in refused.stderr
    )
    advised = invoke(
        example_db,
        "card",
        "--run",
        "rh-80",
        "--status",
        "interim",
        "--window-start",
        "60",
        "--output",
        str(tmp_path / "c/README.md"),
    )
    assert advised.exit_code == 0, advised.output


@pytest.mark.slow
def test_publish_dry_run_prints_the_plan_and_the_tokens_source(
    example_db, tmp_path, monkeypatch, no_sockets
):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.chdir(tmp_path)
    dry = invoke(
        example_db, "publish", "--run", "rh-7b", "--repo", "you/rh", "--status", "auto", "--dry-run"
    )
    assert dry.exit_code == 0, dry.output
    out = dry.stdout
    assert "plan: you/rh@main (private if created)" in out and "final card of rh-7b" in out
    assert "commit 1 (card, tag final): 3 file(s)" in out and "    README.md" in out
    assert "token: none found" in out and "exit 4" in out
    token_file = tmp_path / "token"
    token_file.write_text("hf_secret_value\n")
    with_file = invoke(
        example_db,
        "publish",
        "--run",
        "rh-7b",
        "--repo",
        "you/rh",
        "--status",
        "final",
        "--dry-run",
        "--token-file",
        str(token_file),
    )
    assert (
        f"token: --token-file {token_file}" in with_file.stdout
        and "hf_secret_value" not in with_file.output
    )
