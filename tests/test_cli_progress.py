"""Issue 23, item 5: progress a person and a log can read.

In a terminal, a Rich bar that knows the real total from the start; in a log, a line every tenth
of the work or every 10 s (whichever comes first) and one at the end; `--quiet`, nothing; a header
per run when `ccpo train` trains several seeds.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from ccpo_cli.cli.app import app

runner = CliRunner()


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def log_console() -> Console:
    return Console(file=io.StringIO(), force_terminal=False, width=120)


def test_in_a_log_a_line_every_tenth_every_ten_seconds_and_at_the_end():
    from ccpo_cli.cli.progress import Progress

    clock, console = Clock(), log_console()
    with Progress("eval", "episodes", console=console, clock=clock, every_s=10.0, terminal=False, timer=False) as progress:
        progress.update(0, 40)  # before the first episode: the total only, no line yet
        for done in range(1, 41):
            clock.now += 0.1 if done != 21 else 30.0  # one slow episode
            progress.update(done, 40)
    lines = console.file.getvalue().splitlines()
    assert [line.split(" ")[1] for line in lines] == ["1/40", "5/40", "9/40", "13/40", "17/40", "21/40", "25/40",
                                                      "29/40", "33/40", "37/40", "40/40"]
    assert lines[-1].startswith("eval 40/40 episodes (100%)")


def test_a_slow_item_still_gets_a_line_every_ten_seconds():
    from ccpo_cli.cli.progress import Progress

    clock, console = Clock(), log_console()
    with Progress("eval", "episodes", console=console, clock=clock, every_s=10.0, terminal=False, timer=False) as progress:
        progress.update(0, 1000)
        clock.now = 1.0
        progress.update(1, 1000)
        clock.now = 12.0
        progress.update(2, 1000)  # far from a tenth, but 11 s since the last line
        clock.now = 13.0
        progress.update(3, 1000)
    assert [line.split(" ")[1] for line in console.file.getvalue().splitlines()] == ["1/1000", "2/1000"]


def test_quiet_writes_nothing_and_a_terminal_bar_knows_the_total_at_once():
    from ccpo_cli.cli.progress import Progress

    console = log_console()
    with Progress("eval", "episodes", console=console, quiet=True, terminal=False) as progress:
        for done in range(0, 11):
            progress.update(done, 10)
    assert console.file.getvalue() == ""
    terminal = Console(file=io.StringIO(), force_terminal=True, width=100)
    with Progress("eval", "episodes", console=terminal, terminal=True) as progress:
        progress.update(0, 128)
        assert progress._bar.tasks[0].total == 128 and progress._bar.tasks[0].completed == 0


@pytest.fixture(scope="module")
def three_games(tmp_path_factory) -> Path:
    from ccpo_cli.envs import generate_games

    folder = tmp_path_factory.mktemp("progress-games")
    generate_games(folder, "heldout", 3, seed=5)
    return folder


def test_evaluate_reports_the_total_before_the_first_episode(three_games):
    from ccpo_cli.agents.evaluate import evaluate
    from ccpo_cli.evaluation import build_agent, resolve_games

    calls = []
    games, _ = resolve_games(three_games)
    agent = build_agent("oracle", None, temperature=0.0, seed=0)
    evaluate(agent, games, seeds=(0, 1), workers=0, progress=lambda done, total: calls.append((done, total)))
    assert calls[0] == (0, 6) and calls[-1] == (6, 6) and len(calls) == 7


def test_eval_into_a_log_prints_progress_lines(tmp_path, three_games):
    result = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), "eval", "--run", "o", "--agent", "oracle",
                                 "--games", str(three_games), "--seeds", "0-1", "--workers", "0", "--json"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("eval ")]
    assert lines and lines[-1].startswith("eval 6/6 episodes (100%)"), result.stderr
    assert json.loads(result.stdout)["n_seeds"] == 2  # stdout stays one document
    quiet = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), "eval", "--run", "o2", "--agent", "oracle",
                                "--games", str(three_games), "--workers", "0", "--quiet", "--json"])
    assert quiet.exit_code == 0 and "eval " not in quiet.stderr


@pytest.mark.slow
def test_multi_seed_train_logs_a_header_per_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), "train", "--arm", "grpo", "--backend", "local",
                                 "--seeds", "0-1", "--steps", "1", "--tasks", "1", "--group", "2", "--eval-every", "1",
                                 "--eval-games", "1", "--max-steps", "2", "--workers", "0"])
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stderr.splitlines() if line.startswith("── run ")]
    assert headers == ["── run grpo-seed0: grpo, seed 0 (1 of 2) ──", "── run grpo-seed1: grpo, seed 1 (2 of 2) ──"]
    first, second = (result.stderr.index(header) for header in headers)
    assert "step    1" in result.stderr[first:second]  # the first run's lines sit under its header
