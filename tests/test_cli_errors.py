"""Errors reach the user through one formatter (cli/common.handle_errors): one line, the contract's code."""

from __future__ import annotations

from typer.testing import CliRunner

from ccpo_cli.cli.app import app


def test_a_bad_choice_is_one_error_line_from_the_one_formatter(tmp_path):
    # --backend and --format used to go through click's usage box; every error now has one format.
    runner = CliRunner()
    db = str(tmp_path / "runs.db")
    metrics = tmp_path / "m.jsonl"
    metrics.write_text("{}\n")
    for args, expected in (
        (
            ["train", "--arm", "grpo", "--backend", "tpu", "--dry-run"],
            "--backend tpu: use one of local, verl",
        ),
        (["ingest", str(metrics), "--run", "r", "--format", "yaml"], "--format yaml: use one of"),
    ):
        result = runner.invoke(app, ["--db", db, *args])
        assert result.exit_code == 2
        assert (
            result.stderr.strip().splitlines() == [result.stderr.strip()]
            and expected in result.stderr
        )
