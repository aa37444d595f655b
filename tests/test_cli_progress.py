"""Progress a person and a log can read.

In a terminal, a Rich bar that knows the real total from the start; in a log, a line every tenth
of the work or every 10 s (whichever comes first) and one at the end; `--quiet`, nothing; a header
per run when `ccpo train` trains several seeds.

Asked for in issue 23, item 5.
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
    with Progress(
        "eval", "episodes", console=console, clock=clock, every_s=10.0, terminal=False, timer=False
    ) as progress:
        progress.update(0, 40)  # before the first episode: the total only, no line yet
        for done in range(1, 41):
            clock.now += 0.1 if done != 21 else 30.0  # one slow episode
            progress.update(done, 40)
    lines = console.file.getvalue().splitlines()
    assert [line.split(" ")[1] for line in lines] == [
        "1/40",
        "5/40",
        "9/40",
        "13/40",
        "17/40",
        "21/40",
        "25/40",
        "29/40",
        "33/40",
        "37/40",
        "40/40",
    ]
    assert lines[-1].startswith("eval 40/40 episodes (100%)")


def test_a_slow_item_still_gets_a_line_every_ten_seconds():
    from ccpo_cli.cli.progress import Progress

    clock, console = Clock(), log_console()
    with Progress(
        "eval", "episodes", console=console, clock=clock, every_s=10.0, terminal=False, timer=False
    ) as progress:
        progress.update(0, 1000)
        clock.now = 1.0
        progress.update(1, 1000)
        clock.now = 12.0
        progress.update(2, 1000)  # far from a tenth, but 11 s since the last line
        clock.now = 13.0
        progress.update(3, 1000)
    assert [line.split(" ")[1] for line in console.file.getvalue().splitlines()] == [
        "1/1000",
        "2/1000",
    ]


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
    evaluate(
        agent,
        games,
        seeds=(0, 1),
        workers=0,
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls[0] == (0, 6) and calls[-1] == (6, 6) and len(calls) == 7


def test_eval_into_a_log_prints_progress_lines(tmp_path, three_games):
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "eval",
            "--run",
            "o",
            "--agent",
            "oracle",
            "--games",
            str(three_games),
            "--seeds",
            "0-1",
            "--workers",
            "0",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("eval ")]
    assert lines and lines[-1].startswith("eval 6/6 episodes (100%)"), result.stderr
    assert json.loads(result.stdout)["n_seeds"] == 2  # stdout stays one document
    quiet = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "eval",
            "--run",
            "o2",
            "--agent",
            "oracle",
            "--games",
            str(three_games),
            "--workers",
            "0",
            "--quiet",
            "--json",
        ],
    )
    assert quiet.exit_code == 0 and "eval " not in quiet.stderr


@pytest.mark.slow
def test_multi_seed_train_logs_a_header_per_run(tmp_path, monkeypatch):
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
            "0-1",
            "--steps",
            "1",
            "--tasks",
            "1",
            "--group",
            "2",
            "--eval-every",
            "1",
            "--eval-games",
            "1",
            "--max-steps",
            "2",
            "--workers",
            "0",
        ],
    )
    assert result.exit_code == 0, result.output
    headers = [line for line in result.stderr.splitlines() if line.startswith("── run ")]
    assert headers == [
        "── run grpo-seed0: grpo, seed 0 (1 of 2) ──",
        "── run grpo-seed1: grpo, seed 1 (2 of 2) ──",
    ]
    first, second = (result.stderr.index(header) for header in headers)
    assert "step    1" in result.stderr[first:second]  # the first run's lines sit under its header


# Issue 32, item 2: a training run's bar in a terminal, its step lines in a log; an evaluation
# counted by episodes and turns, with a line per set-up phase.


def _step(step: int, held_out: float | None = 62.5):
    from ccpo_cli.backends.observer import StepProgress

    return StepProgress(
        run="rh-seed0",
        step=step,
        total=200,
        seconds_per_step=2.5,
        eta="6.8 min",
        held_out=held_out,
        held_out_step=None if held_out is None else 30,
        line=f"step {step}/200",
    )


def test_a_terminal_shows_a_training_bar_with_step_pace_eta_and_held_out():
    from ccpo_cli.cli.progress import TrainBar

    terminal = Console(file=io.StringIO(), force_terminal=True, width=140)
    with TrainBar(terminal) as bar:
        bar.update(_step(36, None))
        bar.update(_step(37))
        task = bar._bar.tasks[0]
        assert (task.completed, task.total, task.description) == (37, 200, "rh-seed0")
        bar._bar.refresh()
    screen = terminal.file.getvalue()
    for part in ("rh-seed0", "step 37/200", "2.5 s/step", "ETA 6.8 min", "held-out 62.5%@30"):
        assert part in screen, (part, screen)
    assert "\x1b[" in screen  # drawn as a terminal bar (cursor control), not as log lines


def test_eval_turns_and_set_up_phases_in_a_log_and_in_a_terminal():
    from ccpo_cli.cli.progress import Progress

    clock, console = Clock(), log_console()
    with Progress(
        "eval", "episodes", console=console, clock=clock, every_s=10.0, terminal=False, timer=False
    ) as progress:
        progress.phase("starting the game engine with 4 engine workers for 128 games")
        progress.update(0, 128)
        for turn in range(1, 31):  # a batch whose games all run to the turn limit: no episode ends
            clock.now += 2.0
            progress.turn(turn, 50)
        for done in range(1, 129):
            progress.update(done, 128)
    lines = console.file.getvalue().splitlines()
    assert lines[0] == "eval set-up: starting the game engine with 4 engine workers for 128 games"
    waiting = [line for line in lines if line.startswith("eval 0/128")]
    assert [line.split(", ")[1] for line in waiting] == [
        "turn 5/50",
        "turn 10/50",
        "turn 15/50",
        "turn 20/50",
        "turn 25/50",
        "turn 30/50",
    ]
    assert lines[-1].startswith("eval 128/128 episodes (100%), ")  # the last line has no stale turn
    terminal = Console(file=io.StringIO(), force_terminal=True, width=120)
    with Progress("eval", "episodes", console=terminal, terminal=True) as progress:
        progress.phase("loading the model m for the hf agent")
        progress.update(0, 8)
        progress.turn(3, 50)
        assert progress._bar.tasks[0].fields["turn"] == "turn 3/50"
        progress._bar.refresh()
    screen = terminal.file.getvalue()
    assert "eval set-up: loading the model m for the hf agent" in screen and "turn 3/50" in screen


def test_evaluate_reports_each_turn_and_the_engine_start(three_games):
    from ccpo_cli.agents.evaluate import evaluate
    from ccpo_cli.evaluation import build_agent, resolve_games

    turns, phases = [], []
    games, _ = resolve_games(three_games)
    agent = build_agent("oracle", None, temperature=0.0, seed=0)
    results = evaluate(
        agent,
        games,
        seeds=(0,),
        workers=0,
        max_steps=30,
        on_turn=lambda t, limit: turns.append((t, limit)),
        on_phase=phases.append,
    )
    assert phases == ["starting the game engine in this process for 3 games"]
    longest = max(episode.turns for episode in results[0].episodes)
    assert turns == [
        (t, 30) for t in range(1, longest + 1)
    ]  # one batch: turn 1 to its longest episode


@pytest.mark.slow
def test_a_training_run_gives_its_steps_to_the_bar_and_its_evaluations_to_the_log(tmp_path):
    from helpers_local_train import generated_games

    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local import TrainConfig, train_arm
    from ccpo_cli.cli.progress import TrainBar

    config = TrainConfig(
        seed=0,
        workers=0,
        steps=2,
        tasks=1,
        group=2,
        eval_every=1,
        eval_games=2,
        max_steps=3,
        eval_max_steps=3,
        train_games_dir=str(generated_games("train", 6)),
        eval_games_dir=str(generated_games("heldout", 6)),
    )
    logged, steps = [], []
    terminal = Console(file=io.StringIO(), force_terminal=True, width=160)
    with TrainBar(terminal) as bar:

        def both(step):
            steps.append(step)
            bar.update(step)

        train_arm(
            load_arm("grpo"),
            "bar-run",
            tmp_path / "runs.db",
            config,
            log=logged.append,
            progress=both,
        )
    assert [(s.step, s.total, s.run) for s in steps] == [(1, 2, "bar-run"), (2, 2, "bar-run")]
    assert (
        steps[0].held_out_step == 0 and steps[1].held_out_step == 1
    )  # the last held-out before each step
    assert not any(line.startswith("step ") for line in logged)  # the bar has the steps...
    assert any(line.startswith("eval step    1") for line in logged)  # ...the log the evaluations
    assert steps[1].line.startswith("step    2/2") and "[bar-run " in steps[1].line
    assert "step 2/2" in terminal.file.getvalue()


def test_log_lines_print_above_the_training_bar_never_on_its_line(monkeypatch):
    """An 80-column terminal: the evaluation lines the trainer logs (through cli/common's
    stderr console, as `ccpo train` does) each start on a cleared line above the bar, and the
    bar's line fits the 80 columns, so no stale bar is left behind."""
    import re
    import sys

    from ccpo_cli.cli.common import stderr_console
    from ccpo_cli.cli.progress import TrainBar

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stderr", screen)
    monkeypatch.setenv("COLUMNS", "80")
    with TrainBar(Console(file=screen, force_terminal=True, width=80)) as bar:
        for step in (36, 37, 38):
            bar.update(_step(step))
            bar._bar.refresh()
            stderr_console().print(f"eval step {step}: held-out 50.0%", markup=False)
    text = screen.getvalue()
    for step in (36, 37, 38):
        before = text.split(f"eval step {step}:", 1)[0]
        assert before.endswith(("\n", "\x1b[2K")), repr(before[-120:])  # a cleared line
    drawn = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "\n")
    assert max(len(line) for line in drawn.splitlines()) <= 80
