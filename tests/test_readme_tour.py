"""Every command of the long tour (docs/tour.md) runs as written, in order, against a
database and files the test builds (the README's ten-line tour is lines of it, in its order) (the example log is the shipped one; the Hub is the loopback
fake Hub). Commands that train or evaluate get options that only make them small (SHRINK: fewer
steps, games and turns); /tmp and ~ point into the test's
folder. Nothing else is changed.

Asked for in issue 32, item 5.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
SMALL_TRAINING = [
    "--steps",
    "1",
    "--tasks",
    "1",
    "--group",
    "2",
    "--eval-every",
    "1",
    "--eval-games",
    "2",
    "--max-steps",
    "2",
    "--workers",
    "0",
]
# Prefix of a tour command -> the options that make it small enough for a test (and nothing else).
SHRINK = {
    "eval --run oracle-check": ["--episodes", "6", "--workers", "0"],
    "eval --run random-floor": ["--episodes", "2", "--max-steps", "3", "--workers", "0"],
    "train --arm return-hard --seeds 0-2": SMALL_TRAINING,
    "train --arm return-hard --run rh-live --push-to-hub": SMALL_TRAINING + ["--push-wait", "60"],
}


def _block_after(page: str, heading: str) -> list[list[str]]:
    text = (ROOT / page).read_text()
    block = text.split(heading, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    return [
        shlex.split(line, comments=True) for line in block.splitlines() if line.startswith("ccpo ")
    ]


def tour_commands() -> list[list[str]]:
    return _block_after("docs/tour.md", "# The long tour")


def readme_tour() -> list[list[str]]:
    return _block_after("README.md", "## A tour")


def _shrunk(args: list[str]) -> list[str]:
    line = " ".join(args)
    extra = [options for prefix, options in SHRINK.items() if line.startswith(prefix)]
    assert len(extra) <= 1, line
    return args + (extra[0] if extra else [])


def test_the_tour_is_what_this_test_runs():
    commands = [" ".join(args) for args in tour_commands()]
    assert len(commands) == 24 and commands[0] == "ccpo arms list"
    readme = [" ".join(args) for args in readme_tour()]
    assert len(readme) == 10
    at = [commands.index(command) for command in readme]  # ValueError: not run by this test
    assert at == sorted(at), "the README's tour keeps the long tour's order"
    for prefix in SHRINK:  # every shrink still names a command of the tour
        assert any(command.startswith(f"ccpo {prefix}") for command in commands), prefix


@pytest.mark.slow
def test_every_tour_command_runs_as_written(hub, tmp_path, monkeypatch):
    from helpers_hub import TOKEN

    home = tmp_path / "home"
    home.mkdir()
    (home / ".hf-token").write_text(TOKEN + "\n")
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "examples").symlink_to(ROOT / "examples")
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.setenv("CCPO_DB", str(tmp_path / "work" / "runs.db"))
    monkeypatch.setenv("VERL_AGENT_HOME", str(ROOT.parent / "shared" / "verl-agent"))
    outputs = {}
    for args in tour_commands():
        argv = [
            re.sub(r"^/tmp/", f"{tmp_path}/", arg).replace("~/", f"{home}/")
            for arg in _shrunk(args[1:])
        ]
        result = runner.invoke(app, argv, env={"COLUMNS": "100"})
        assert result.exit_code == 0, f"{' '.join(args)}\n{result.output}"
        outputs[" ".join(args[1:4])] = result
    assert json.loads(outputs["compare --json"].stdout)["arms"]
    assert "token: HF_TOKEN (environment)" in outputs["publish --run rh-7b"].stdout
    assert "plan: you/ccpo-alfworld-return-hard@main" in outputs["publish --run rh-7b"].stdout
    assert (tmp_path / "work" / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert list((tmp_path / "work" / "tb" / "rh-7b").glob("events.out.tfevents.*"))
    assert (
        "final card" in outputs["card --run rh-7b"].stderr
    )  # --status auto: the example run finished
