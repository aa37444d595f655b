"""One vocabulary, and dry runs that write nothing.

One seed syntax everywhere; `--repo` for the Hub id (with `--repo-id`); `--no-private` beside
`--private/--public`; the global options after the command too; no type placeholder for a flag;
an example in every command's help; a dry run writes nothing and prints one document.

Asked for in issue 23, items 3 and 6.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import typer
from helpers_cards import seed_card_db
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cli.app import app
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()
MODEL = "Qwen/Qwen2.5-7B-Instruct"


def tree(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def leaf_commands():
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for sub_name, leaf in (getattr(command, "commands", None) or {None: command}).items():
            yield (name if sub_name is None else f"{name} {sub_name}").split(" "), leaf


def test_train_takes_the_matrix_seed_syntax_and_a_dry_run_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--seeds",
            "0-2",
            "--steps",
            "3",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)  # one document, not one per seed
    assert [run["seed"] for run in document["runs"]] == [0, 1, 2] and document["dry_run"] is True
    assert [run["run"] for run in document["runs"]] == ["grpo-seed0", "grpo-seed1", "grpo-seed2"]
    assert tree(tmp_path) == []  # no runs.db, no run folder, nothing


def test_a_verl_dry_run_of_several_seeds_is_one_script_and_writes_nothing(tmp_path):
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "gigpo",
            "--backend",
            "verl",
            "--model",
            MODEL,
            "--gpus",
            "2",
            "--seeds",
            "0-1",
            "--run",
            "g",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.output
    script = result.stdout
    assert script.startswith("#!/usr/bin/env bash\n") and script.count("#!/usr/bin/env bash") == 1
    assert (
        script.count("exec ") == 2 and "# ── run g-seed0" in script and "# ── run g-seed1" in script
    )
    assert tree(tmp_path) == []


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--arm", "grpo", "--backend", "local", "--dry-run"],
        ["eval", "--run", "x", "--agent", "oracle"],
        ["matrix", "--arms", "grpo,gigpo"],
    ],
)
@pytest.mark.parametrize("seeds", ["5-1", "0,0", "1-", "a", "-3"])
def test_every_seeds_option_refuses_the_same_lists_with_exit_3(tmp_path, command, seeds):
    result = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), *command, "--seeds", seeds])
    assert result.exit_code == 3, result.output
    assert (
        "--seeds" in result.stderr
        and "0-2,5" in result.stderr
        or "runs backwards" in result.stderr
        or "at most once" in result.stderr
    )
    assert not (tmp_path / "runs.db").exists()


def test_card_takes_repo_and_keeps_repo_id(tmp_path):
    seed_card_db(tmp_path / "runs.db", arms=1)
    for flag in ("--repo", "--repo-id"):
        out = tmp_path / flag.strip("-") / "README.md"
        result = runner.invoke(
            app,
            [
                "--db",
                str(tmp_path / "runs.db"),
                "card",
                "--run",
                "return-hard",
                flag,
                "me/return-hard-alfworld",
                "--output",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        assert "me/return-hard-alfworld" in out.read_text(encoding="utf-8")


@pytest.mark.parametrize("visibility", ["--no-private", "--public", "--private"])
def test_publish_takes_repo_id_and_the_hf_clis_no_private(tmp_path, monkeypatch, visibility):
    monkeypatch.chdir(tmp_path)
    seed_card_db(tmp_path / "runs.db", arms=1)
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "publish",
            "--run",
            "return-hard",
            "--repo-id",
            "me/rh",
            visibility,
            "--dry-run",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["repo_id"] == "me/rh" and plan["private"] is (visibility == "--private")


def test_global_options_work_after_the_command(tmp_path):
    db = store.open_db(tmp_path / "elsewhere.db")
    store.ensure_run(db, "only-here", arm=ExternalArm("grpo"))
    before = runner.invoke(app, ["--db", str(tmp_path / "elsewhere.db"), "runs", "list", "--json"])
    after = runner.invoke(app, ["runs", "list", "--json", "--db", str(tmp_path / "elsewhere.db")])
    assert after.exit_code == 0, after.output
    assert json.loads(after.stdout) == json.loads(before.stdout)
    assert [run["name"] for run in json.loads(after.stdout)["runs"]] == ["only-here"]
    # The later one wins: before the command, then after it.
    both = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "nothing.db"),
            "runs",
            "list",
            "--db",
            str(tmp_path / "elsewhere.db"),
        ],
    )
    assert both.exit_code == 0 and "only-here" in both.stdout
    loud = runner.invoke(
        app,
        ["runs", "retract", "only-here", "--reason", "x", "--db", str(tmp_path / "elsewhere.db")],
    )
    quiet = runner.invoke(
        app,
        [
            "runs",
            "retract",
            "only-here",
            "--step",
            "0",
            "--reason",
            "x",
            "--quiet",
            "--db",
            str(tmp_path / "elsewhere.db"),
        ],
    )
    assert loud.exit_code == 0 and loud.stderr.strip()
    assert (
        quiet.exit_code == 3 and "no evaluation" in quiet.stderr
    )  # errors still show under --quiet
    relisted = runner.invoke(
        app, ["runs", "list", "--quiet", "--db", str(tmp_path / "elsewhere.db")]
    )
    assert relisted.exit_code == 0 and relisted.stderr == ""


@pytest.mark.parametrize(
    "path, leaf",
    list(leaf_commands()),
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
def test_every_help_has_an_example_and_no_flag_placeholder(path, leaf):
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout
    assert "Example: ccpo " + " ".join(path) in result.stdout
    assert (
        "--db" in result.stdout and "--quiet" in result.stdout
    )  # the global options, after the command


def test_the_root_help_shows_no_flag_placeholder():
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "<bool>" not in result.stdout


def test_default_db_still_comes_from_the_environment(tmp_path):
    db = store.open_db(tmp_path / "env.db")
    store.ensure_run(db, "from-env", arm=ExternalArm("grpo"))
    result = runner.invoke(
        app, ["runs", "list", "--json"], env={"CCPO_DB": str(tmp_path / "env.db")}
    )
    assert result.exit_code == 0 and [run["name"] for run in json.loads(result.stdout)["runs"]] == [
        "from-env"
    ]
    assert os.environ.get("CCPO_DB") != str(tmp_path / "env.db")
