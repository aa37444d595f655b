"""`ccpo matrix`: seed-major paired runs within a budget, complete blocks compared, end to end on
the real engine with a tiny design (2 arms × 2 seeds × 2 steps, 4-game evaluations)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ccpo_cli.backends.local.matrix import parse_seed_list, progress_line, run_matrix
from ccpo_cli.cli.app import app
from ccpo_cli.errors import UsageError
from ccpo_cli.store import get_run, list_runs, open_db, run_evaluations

runner = CliRunner()
TINY = dict(steps=2, eval_every=1, eval_games=4, tasks=2, group=2, max_steps=6, eval_max_steps=6, workers=0)


@pytest.fixture(scope="module")
def game_dirs():
    from helpers_local_train import generated_games

    return {"train_games_dir": str(generated_games("train", 6)), "eval_games_dir": str(generated_games("heldout", 6))}


def test_seed_lists_parse_ranges_and_refuse_nonsense():
    assert parse_seed_list("0-3") == [0, 1, 2, 3]
    assert parse_seed_list("0-2,7") == [0, 1, 2, 7]
    for bad in ("", "3-1", "a", "0,0", "1-2,2"):
        with pytest.raises(UsageError):
            parse_seed_list(bad)


def test_progress_line_shows_runs_time_left_and_mdd():
    power = {"pairs": [{"arm_a": "gigpo", "arm_b": "grpo", "mdd": 12.34, "test": "paired t", "n_pairs": 3,
                        "n_a": 3, "n_b": 3, "note": None}]}
    line = progress_line(6, 20, 300.0, 1800.0, power)
    assert line == "runs 6/20 · 5.0 min elapsed · 25.0 min left · MDD gigpo vs grpo 12.3 (paired t, 3 seeds)"
    assert "needs ≥ 2 seeds" in progress_line(2, 20, 60.0, 1800.0, {"pairs": [
        {"arm_a": "a", "arm_b": "b", "mdd": None, "test": None, "note": "needs ≥ 2 seeds"}]})


@pytest.mark.slow
def test_matrix_runs_seed_major_pairs_and_compares(game_dirs, tmp_path):
    db_path = tmp_path / "runs.db"
    lines: list[str] = []
    result = run_matrix(db_path, ["grpo", "return-hard"], [0, 1], 30.0, prefix="m", detect=5.0,
                        progress=lines.append, **TINY, **game_dirs)
    db = open_db(db_path)
    assert result.seeds_compared == [0, 1] and result.incomplete_block is None and result.seeds_not_started == []
    assert result.run_names == ["m-grpo-seed0", "m-return-hard-seed0", "m-grpo-seed1", "m-return-hard-seed1"]
    # Seed-major: the database saw the runs in block order.
    created = sorted(list_runs(db), key=lambda run: run["id"])
    assert [run["name"] for run in created] == result.run_names
    for seed in (0, 1):
        assert get_run(db, f"m-grpo-seed{seed}")["step1_rollout_hash"] == get_run(db, f"m-return-hard-seed{seed}")["step1_rollout_hash"]
    (pair,) = result.comparison["power"]["pairs"]
    assert pair["test"] == "paired t" and pair["n_pairs"] == 2 and pair["detect"] == 5.0
    assert result.comparison["window_start"] == 1 and result.comparison["isolation"]["estimator_only"]
    # Evaluations start at the window: the untrained policy's is the same in every arm.
    assert sorted(row["step"] for row in run_evaluations(db, "m-grpo-seed0")) == [1, 2]
    assert lines[0].startswith("runs 1/4") and lines[-1].startswith("runs 4/4") and "MDD grpo vs return-hard" in lines[-1]
    # A restarted matrix reuses the finished runs instead of training them again.
    again = run_matrix(db_path, ["grpo", "return-hard"], [0, 1], 30.0, prefix="m", **TINY, **game_dirs)
    assert again.run_names == result.run_names and again.elapsed_s < result.elapsed_s / 2


@pytest.mark.slow
def test_budget_cut_and_interruption_leave_only_complete_blocks(game_dirs, tmp_path):
    db_path = tmp_path / "runs.db"
    # A budget smaller than one block: the first block runs, the next does not start.
    cut = run_matrix(db_path, ["grpo", "gigpo"], [0, 1, 2], 0.001, prefix="c", **TINY, **game_dirs)
    assert cut.seeds_compared == [0] and cut.seeds_not_started == [1, 2]
    assert "stopped before seed 1" in cut.stopped_reason
    assert cut.comparison["power"]["pairs"][0]["note"] == "needs ≥ 2 seeds"
    assert not any(run["name"].startswith("c-") and "seed1" in run["name"] for run in list_runs(open_db(db_path)))

    first_steps = [0]

    def interrupt_second_arm_of_seed_1(message: str) -> None:
        # Seed 0 is reused; seed 1's grpo run logs the first step 1, its gigpo run the second.
        if message.startswith("step    1 "):
            first_steps[0] += 1
            if first_steps[0] == 2:
                raise KeyboardInterrupt

    stopped = run_matrix(db_path, ["grpo", "gigpo"], [0, 1, 2], 30.0, prefix="c",
                         log=interrupt_second_arm_of_seed_1, **TINY, **game_dirs)
    assert stopped.incomplete_block is not None and stopped.incomplete_block["seed"] == 1
    assert stopped.seeds_compared == [0] and stopped.seeds_not_started == [2]
    assert stopped.run_names == ["c-grpo-seed0", "c-gigpo-seed0"]


def test_matrix_cli_refuses_bad_input_before_training(tmp_path):
    db = str(tmp_path / "runs.db")
    bad_seeds = runner.invoke(app, ["--db", db, "matrix", "--arms", "grpo,gigpo", "--seeds", "5-1"])
    assert bad_seeds.exit_code == 2 and "--seeds" in bad_seeds.output
    one_arm = runner.invoke(app, ["--db", db, "matrix", "--arms", "grpo"])
    assert one_arm.exit_code == 2 and "--arms" in one_arm.output
    unknown = runner.invoke(app, ["--db", db, "matrix", "--arms", "grpo,no-such-arm", "--seeds", "0"])
    assert unknown.exit_code == 2 and "no-such-arm" in unknown.output  # as `ccpo train --arm`
    assert not (tmp_path / "runs.db").exists() or not list_runs(open_db(tmp_path / "runs.db"))
