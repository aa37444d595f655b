"""Non-finite training stops as a failed run,
and damaged checkpoints, vanishing run folders, hostile YAML and a file-size limit give one
line and an exit code instead of a traceback, with bounded work.

Asked for in issue 21, cases 5, 7 and 8 (all but the Hub's).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers_hostile import REPO_ROOT, assert_child_refused, assert_refused, invoke, run_ccpo

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.local import TrainConfig, train_arm
from ccpo_cli.backends.local.ppo import UpdateConfig
from ccpo_cli.errors import CcpoError
from ccpo_cli.store import get_run, open_db, run_evaluations

TINY = [
    "--arm",
    "grpo",
    "--backend",
    "local",
    "--tasks",
    "1",
    "--group",
    "2",
    "--eval-every",
    "1",
    "--eval-games",
    "2",
    "--max-steps",
    "4",
    "--workers",
    "0",
]
SMALL = dict(tasks=1, group=2, eval_every=1, eval_games=2, max_steps=4, eval_max_steps=4, workers=0)
EX1 = REPO_ROOT / "examples" / "worked-example-1.json"


@pytest.fixture(scope="module")
def game_dirs():
    from helpers_local_train import generated_games

    return {
        "train_games_dir": str(generated_games("train", 6)),
        "eval_games_dir": str(generated_games("heldout", 6)),
    }


# -- non-finite numbers --------------------------------------------------------------------------


@pytest.mark.slow
def test_a_non_finite_loss_stops_the_run_as_failed_with_the_step_and_the_quantity(
    tmp_path, game_dirs
):
    from ccpo_cli.store.liveness import failed_runs, run_failure

    db_path = tmp_path / "runs.db"
    # An entropy coefficient beyond float32 makes the very first loss -inf.
    config = TrainConfig(
        seed=0, steps=3, update=UpdateConfig(entropy_coef=1e39), **SMALL, **game_dirs
    )
    with pytest.raises(CcpoError) as caught:
        train_arm(load_arm("grpo"), "nan-loss", db_path, config)
    assert caught.value.exit_code == 1
    assert "stopped at step 1" in str(caught.value) and "non-finite loss" in str(caught.value)
    db = open_db(db_path)
    assert get_run(db, "nan-loss")["status"] == "failed"
    failure = run_failure(db, "nan-loss")
    assert (failure.step, failure.quantity) == (1, "loss") and failure.value in (
        "-inf",
        "inf",
        "nan",
    )
    assert failed_runs(db) == {"nan-loss": failure}
    # The untrained policy's evaluation stays recorded, as that of a failed run.
    assert [e["step"] for e in run_evaluations(db, "nan-loss")] == [0]
    folder = tmp_path / "ccpo-runs" / "nan-loss"
    # metrics.jsonl holds the untrained evaluation's line only: nothing of the failed step.
    steps = [
        json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == [0] and not list(folder.glob("checkpoints/*.pt"))
    listed = json.loads(invoke("--db", db_path, "runs", "list", "--json").stdout)["runs"]
    assert listed[0]["failure"]["quantity"] == "loss" and listed[0]["failure"]["step"] == 1


@pytest.mark.slow
def test_a_non_finite_advantage_stops_the_run_before_the_update(tmp_path, game_dirs, monkeypatch):
    from ccpo_cli.backends.local import trainer
    from ccpo_cli.store.liveness import run_failure

    real = trainer.advantages_for

    def poisoned(batch, arm):
        values = real(batch, arm)
        values[3] = np.nan
        return values

    monkeypatch.setattr(trainer, "advantages_for", poisoned)
    with pytest.raises(CcpoError, match="stopped at step 1: non-finite advantage"):
        train_arm(
            load_arm("grpo"),
            "nan-adv",
            tmp_path / "runs.db",
            TrainConfig(seed=0, steps=2, **SMALL, **game_dirs),
        )
    failure = run_failure(open_db(tmp_path / "runs.db"), "nan-adv")
    assert (failure.step, failure.quantity) == (1, "advantage")


def test_estimate_refuses_a_non_finite_output(monkeypatch):
    # `ccpo estimate` imports the estimators when it runs (cli/estimate.py): patch them there.
    import ccpo_cli.estimators as estimate_module

    real = estimate_module.compute_advantages

    def overflowing(batch, arm):
        result = real(batch, arm)
        result.advantages[2, 0] = np.inf
        return result

    monkeypatch.setattr(estimate_module, "compute_advantages", overflowing)
    assert_refused(
        invoke("estimate", "--arm", "grpo", "--input", EX1),
        3,
        "non-finite output",
        "advantages, row 2",
    )


def test_estimate_with_in_range_flags_on_an_in_range_batch_is_finite():
    result = invoke(
        "estimate",
        "--arm",
        "return-hard",
        "--input",
        EX1,
        "--set",
        "ep_w=1000",
        "--set",
        "edge_w=1000",
    )
    assert result.exit_code == 0, result.output
    assert all(
        value is not None for row in json.loads(result.stdout)["advantages"] for value in row
    )


# -- damaged and vanishing files -------------------------------------------------------------------


@pytest.mark.slow
def test_a_truncated_checkpoint_before_resume_is_one_line(tmp_path):
    db = tmp_path / "runs.db"
    first = invoke("--db", db, "train", *TINY, "--run", "trunc", "--steps", "2")
    assert first.exit_code == 0, first.output
    folder = tmp_path / "ccpo-runs" / "trunc"
    newest = sorted((folder / "checkpoints").glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 3])
    result = invoke(
        "--db", db, "train", *TINY, "--run", "trunc", "--steps", "3", "--resume", folder
    )
    assert_refused(
        result,
        3,
        str(newest),
        "not a ccpo local-policy checkpoint",
        "resume from the checkpoint before it",
    )


def _train_child(db: Path, run: str, steps: int) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS="200")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ccpo_cli",
            "--quiet",
            "--db",
            str(db),
            "train",
            *TINY,
            "--eval-every",
            "0",
            "--run",
            run,
            "--steps",
            str(steps),
        ],
        cwd=db.parent,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_step(db: Path, run: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.3)
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
                row = connection.execute(
                    "SELECT last_step FROM runs WHERE name = ?", [run]
                ).fetchone()
        except sqlite3.OperationalError:  # not created or not migrated yet
            continue
        if row and row[0]:
            return
    raise AssertionError(f"run {run} recorded no step within {timeout} s")


@pytest.mark.slow
def test_a_run_folder_removed_mid_run_stops_it_in_one_line_without_recreating_it(tmp_path):
    db = tmp_path / "runs.db"
    child = _train_child(db, "vanishing", 1000)
    _wait_for_step(db, "vanishing")
    folder = tmp_path / "ccpo-runs" / "vanishing"
    folder.rename(tmp_path / "moved-away")  # atomic: the path is gone at once
    shutil.rmtree(tmp_path / "moved-away")
    stdout, stderr = child.communicate(timeout=300)
    completed = subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    assert_child_refused(completed, 1, str(folder), "was removed while run 'vanishing' trained")
    assert not folder.exists()
    from ccpo_cli.store.liveness import run_failure

    run = get_run(open_db(db), "vanishing")
    assert (
        run["status"] == "failed" and "was removed" in run_failure(open_db(db), "vanishing").message
    )


# -- hostile YAML ------------------------------------------------------------------------------------


def _alias_bomb() -> str:
    """Nine levels of nine aliases each: 342 bytes that describe 9^9 strings."""
    names = "abcdefghi"
    lines = ["a: &a [" + ",".join(['"lol"'] * 9) + "]"]
    lines += [
        f"{names[i]}: &{names[i]} [" + ",".join([f"*{names[i - 1]}"] * 9) + "]" for i in range(1, 9)
    ]
    return "\n".join(lines) + "\n"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))


@pytest.mark.slow
@pytest.mark.parametrize(
    "case, text, phrase",
    [
        ("deep", "[" * 50_000 + "]" * 50_000, "nested deeper than 64 levels"),
        (
            "deep-mapping",
            "".join(" " * depth + "k:\n" for depth in range(0, 200)),
            "nested deeper than 64 levels",
        ),
        ("bomb", _alias_bomb(), "aliases expand to more than 100000 nodes"),
        ("cycle", "a: &a [1, *a]\n", "refers to a collection containing it"),
    ],
)
def test_hostile_yaml_as_ingest_config_is_one_line_with_bounded_memory(
    tmp_path, case, text, phrase
):
    (tmp_path / "log.jsonl").write_text('{"step": 1, "val/success_rate": 0.5}\n')
    (tmp_path / f"{case}.yaml").write_text(text)
    completed = run_ccpo(
        "--db",
        tmp_path / "runs.db",
        "ingest",
        tmp_path / "log.jsonl",
        "--run",
        "r",
        "--config",
        tmp_path / f"{case}.yaml",
        cwd=tmp_path,
        preexec=_limit_memory,
        timeout=120,
    )
    assert_child_refused(completed, 3, f"{case}.yaml", phrase)
    if (tmp_path / "runs.db").exists():
        with sqlite3.connect(tmp_path / "runs.db") as connection:
            assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


def test_a_key_value_override_that_is_a_bomb_stays_text():
    from ccpo_cli.store.facts import _command_overrides

    bomb = "[" * 10_000 + "]" * 10_000
    assert _command_overrides(
        f"python -m verl.trainer.main_ppo data.files={bomb} algorithm.gamma=0.9"
    ) == {"data.files": bomb, "algorithm.gamma": 0.9}


def test_arm_and_protocol_files_are_read_with_the_same_bounds(tmp_path, monkeypatch):
    from ccpo_cli import arms, paths
    from ccpo_cli.backends.verl import protocol
    from ccpo_cli.errors import InvalidInput

    (tmp_path / "arms").mkdir()
    (tmp_path / "protocol").mkdir()
    (tmp_path / "arms" / "bomb.yaml").write_text(_alias_bomb())
    (tmp_path / "protocol" / "deep.yaml").write_text("x: " + "[" * 50_000 + "]" * 50_000)
    monkeypatch.setattr(arms, "configs_dir", lambda: tmp_path)
    monkeypatch.setattr(protocol, "configs_dir", lambda: tmp_path)
    with pytest.raises(InvalidInput, match="aliases expand"):
        arms.load_arm("bomb")
    with pytest.raises(InvalidInput, match="nested deeper"):
        protocol.load_protocol("deep")
    assert paths.configs_dir() != tmp_path  # the shipped configs were never touched


def test_bounded_yaml_reads_what_configs_hold():
    from ccpo_cli.bounded_yaml import load_yaml

    assert load_yaml("base: &b {x: 1}\nrun: {<<: *b, y: [1, 2]}\n", "t") == {
        "base": {"x": 1},
        "run": {"x": 1, "y": [1, 2]},
    }
    assert load_yaml("", "t") is None
    from ccpo_cli.backends.verl.protocol import load_protocol

    assert load_protocol("alfworld").entrypoint  # the shipped protocol reads as before


# -- a file-size limit while the engine copies its library --------------------------------------------


def _file_size_limit() -> None:
    limit = (
        8 * 1024 * 1024
    )  # below Fast Downward's library (about 34 MB), above the games and runs.db
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_file_size_limit_while_the_engine_copies_its_library_is_one_line(
    tmp_path, game_dirs, workers
):
    completed = run_ccpo(
        "--db",
        tmp_path / "runs.db",
        "eval",
        "--run",
        "ev",
        "--agent",
        "random",
        "--games",
        game_dirs["eval_games_dir"],
        "--episodes",
        "1",
        "--workers",
        workers,
        cwd=tmp_path,
        preexec=_file_size_limit,
        timeout=300,
    )
    assert_child_refused(
        completed, 1, "could not copy its planner library", "file-size limit (ulimit -f)"
    )
    trained = run_ccpo(
        "--quiet",
        "--db",
        tmp_path / "runs.db",
        "train",
        *TINY[:-1],
        workers,
        "--run",
        f"t{workers}",
        "--steps",
        "1",
        cwd=tmp_path,
        preexec=_file_size_limit,
        timeout=300,
    )
    assert_child_refused(trained, 1, "could not copy its planner library")
    assert get_run(open_db(tmp_path / "runs.db"), f"t{workers}")["status"] == "failed"
