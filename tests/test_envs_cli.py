"""`ccpo games generate|check` through the real Typer app."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ccpo_cli.cli.app import app


def test_generate_then_check(tmp_path):
    runner = CliRunner()
    out = tmp_path / "games"
    result = runner.invoke(
        app,
        [
            "games",
            "generate",
            "--out",
            str(out),
            "--split",
            "heldout",
            "--n",
            "6",
            "--seed",
            "5",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["n"] == 6
    assert set(document["task_types"].values()) == {1}
    result = runner.invoke(app, ["games", "check", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["won"] == 6 and report["failures"] == []


def test_check_failures_and_bad_input_exit_3(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["games", "check", str(tmp_path / "missing")])
    assert result.exit_code == 3 and "not a folder" in result.output
    result = runner.invoke(app, ["games", "check", str(tmp_path)])
    assert result.exit_code == 3 and "no ALFWorld games" in result.output
    out = tmp_path / "one"
    assert runner.invoke(app, ["games", "generate", "--out", str(out), "--n", "1"]).exit_code == 0
    game_file = next(out.rglob("game.tw-pddl"))
    document = json.loads(game_file.read_text())
    document["walkthrough"] = ["look"]
    game_file.write_text(json.dumps(document))
    result = runner.invoke(app, ["games", "check", str(out)])
    assert result.exit_code == 3 and "FAILED" in result.output
    result = runner.invoke(app, ["games", "generate", "--out", str(out), "--n", "0"])
    assert result.exit_code == 2
