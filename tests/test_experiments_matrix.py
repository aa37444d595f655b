"""`ccpo matrix` (ccpo_cli/experiments/): seed-major paired runs within a budget, complete blocks compared, end to end on
the real engine with a tiny design (2 arms × 2 seeds × 2 steps, 4-game evaluations)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.experiments.matrix import (
    MatrixDesign,
    default_recipe,
    parse_seed_list,
    progress_line,
    run_matrix,
)
from ccpo_cli.store import get_run, list_runs, open_db, run_evaluations

runner = CliRunner()
TINY = dict(
    steps=2, eval_every=1, eval_games=4, tasks=2, group=2, max_steps=6, eval_max_steps=6, workers=0
)


def design(arms, seeds, minutes, game_dirs, *, warm_start=0, **fields):
    """A matrix of the tiny recipe; `fields` are MatrixDesign fields or recipe fields."""
    design_fields = {
        key: fields.pop(key) for key in list(fields) if key in MatrixDesign.__dataclass_fields__
    }
    return MatrixDesign(
        tuple(arms),
        tuple(seeds),
        minutes,
        recipe=default_recipe(**{**TINY, **game_dirs, **fields}),
        warm_start=warm_start,
        **design_fields,
    )


@pytest.fixture(scope="module")
def game_dirs():
    from helpers_local_train import generated_games

    return {
        "train_games_dir": str(generated_games("train", 6)),
        "eval_games_dir": str(generated_games("heldout", 6)),
    }


def test_seed_lists_parse_ranges_and_refuse_nonsense():
    assert parse_seed_list("0-3") == [0, 1, 2, 3]
    assert parse_seed_list("0-2,7") == [0, 1, 2, 7]
    for bad in ("", "3-1", "a", "0,0", "1-2,2"):
        with pytest.raises(
            InvalidInput
        ):  # a malformed value is invalid input (exit 3), as for every --seeds
            parse_seed_list(bad)


def test_the_default_design_evaluates_the_last_step_only(tmp_path):
    # Issue 24's design curve: over 20 paired seeds the positive control's (effect/sd)² per
    # CPU-minute was highest with the one evaluation at step 16 (the default was 12, 14 and 16).
    from ccpo_cli.experiments.matrix import MATRIX_WINDOW, _plan

    plan = _plan(MatrixDesign(("grpo", "gigpo"), (0, 1), 30.0), tmp_path / "runs.db")
    assert plan.window == 16 and {block.recipe.eval_from for block in plan.blocks} == {16}
    assert MATRIX_WINDOW.start(16, 10, 2) == 16 and MATRIX_WINDOW.start(20, 0, 5) == 20
    assert MATRIX_WINDOW.start(16, 0, 0) == 8 and MATRIX_WINDOW.start(16, 10, 0) == 10
    # A window start given is kept, and evaluations start there.
    given = _plan(
        MatrixDesign(("grpo", "gigpo"), (0,), 30.0, window_start=10), tmp_path / "runs.db"
    )
    assert given.window == 10 and given.blocks[0].recipe.eval_from == 10


def test_progress_line_shows_runs_time_left_and_mdd():
    power = {
        "pairs": [
            {
                "arm_a": "gigpo",
                "arm_b": "grpo",
                "mdd": 12.34,
                "test": "paired t",
                "n_pairs": 3,
                "n_a": 3,
                "n_b": 3,
                "note": None,
            }
        ]
    }
    line = progress_line(6, 20, 300.0, 1800.0, power)
    assert (
        line
        == "runs 6/20 · 5.0 min elapsed · 25.0 min left · MDD gigpo vs grpo 12.3 (paired t, 3 seeds)"
    )
    assert "needs ≥ 2 seeds" in progress_line(
        2,
        20,
        60.0,
        1800.0,
        {
            "pairs": [
                {"arm_a": "a", "arm_b": "b", "mdd": None, "test": None, "note": "needs ≥ 2 seeds"}
            ]
        },
    )


@pytest.mark.slow
def test_matrix_runs_seed_major_pairs_and_compares(game_dirs, tmp_path):
    db_path = tmp_path / "runs.db"
    lines: list[str] = []
    # window_start=1: two evaluations per run (the default window is the last step alone).
    result = run_matrix(
        db_path,
        design(
            ["grpo", "return-hard"], [0, 1], 30.0, game_dirs, prefix="m", detect=5.0, window_start=1
        ),
        progress=lines.append,
    )
    db = open_db(db_path)
    assert (
        result.seeds_compared == [0, 1]
        and result.incomplete_block is None
        and result.seeds_not_started == []
    )
    assert result.run_names == [
        "m-grpo-seed0",
        "m-return-hard-seed0",
        "m-grpo-seed1",
        "m-return-hard-seed1",
    ]
    # Seed-major: the database saw the runs in block order.
    created = sorted(list_runs(db), key=lambda run: run["id"])
    assert [run["name"] for run in created] == result.run_names
    for seed in (0, 1):
        assert (
            get_run(db, f"m-grpo-seed{seed}")["step1_rollout_hash"]
            == get_run(db, f"m-return-hard-seed{seed}")["step1_rollout_hash"]
        )
    (pair,) = result.comparison.power["pairs"]
    assert pair["test"] == "paired t" and pair["n_pairs"] == 2 and pair["detect"] == 5.0
    assert result.comparison.window_start == 1 and result.comparison.isolation["estimator_only"]
    # Evaluations start at the window: the untrained policy's is the same in every arm.
    assert sorted(row["step"] for row in run_evaluations(db, "m-grpo-seed0")) == [1, 2]
    # Each run that trains opens with a header (issue 23: a header per run in matrix logs).
    headers = [line for line in lines if line.startswith("── run ")]
    assert headers == [
        f"── run m-{arm}-seed{seed}: {arm}, seed {seed} ({k} of 2 in its block) ──"
        for seed in (0, 1)
        for k, arm in enumerate(["grpo", "return-hard"], start=1)
    ]
    assert lines.index(headers[1]) > lines.index(
        next(line for line in lines if line.startswith("runs 1/4"))
    )
    lines = [line for line in lines if line not in headers]
    assert (
        lines[0].startswith("runs 1/4")
        and lines[-1].startswith("runs 4/4")
        and "MDD grpo vs return-hard" in lines[-1]
    )
    # A restarted matrix reuses the finished runs instead of training them again.
    again = run_matrix(
        db_path,
        design(["grpo", "return-hard"], [0, 1], 30.0, game_dirs, prefix="m", window_start=1),
    )
    assert again.run_names == result.run_names and again.elapsed_s < result.elapsed_s / 2


@pytest.mark.slow
def test_budget_cut_and_interruption_leave_only_complete_blocks(game_dirs, tmp_path):
    db_path = tmp_path / "runs.db"
    # A budget smaller than one block: the first block runs, the next does not start.
    cut = run_matrix(db_path, design(["grpo", "gigpo"], [0, 1, 2], 0.001, game_dirs, prefix="c"))
    assert cut.seeds_compared == [0] and cut.seeds_not_started == [1, 2]
    assert "stopped before seed 1" in cut.stopped_reason
    assert cut.comparison.power["pairs"][0]["note"] == "needs ≥ 2 seeds"
    assert not any(
        run["name"].startswith("c-") and "seed1" in run["name"]
        for run in list_runs(open_db(db_path))
    )

    first_steps = [0]

    def interrupt_second_arm_of_seed_1(message: str) -> None:
        # Seed 0 is reused; seed 1's grpo run logs the first step 1, its gigpo run the second.
        if message.startswith("step    1/"):
            first_steps[0] += 1
            if first_steps[0] == 2:
                raise KeyboardInterrupt

    stopped = run_matrix(
        db_path,
        design(["grpo", "gigpo"], [0, 1, 2], 30.0, game_dirs, prefix="c"),
        log=interrupt_second_arm_of_seed_1,
    )
    assert stopped.incomplete_block is not None and stopped.incomplete_block["seed"] == 1
    assert stopped.seeds_compared == [0] and stopped.seeds_not_started == [2]
    assert stopped.run_names == ["c-grpo-seed0", "c-gigpo-seed0"]


def test_matrix_cli_refuses_bad_input_before_training(tmp_path):
    db = str(tmp_path / "runs.db")
    bad_seeds = runner.invoke(app, ["--db", db, "matrix", "--arms", "grpo,gigpo", "--seeds", "5-1"])
    # A malformed seed list is invalid input (exit 3) for every command (ccpo_cli/seeds.py).
    assert bad_seeds.exit_code == 3 and "--seeds" in bad_seeds.output
    one_arm = runner.invoke(app, ["--db", db, "matrix", "--arms", "grpo"])
    assert one_arm.exit_code == 2 and "--arms" in one_arm.output
    unknown = runner.invoke(
        app, ["--db", db, "matrix", "--arms", "grpo,no-such-arm", "--seeds", "0"]
    )
    assert unknown.exit_code == 2 and "no-such-arm" in unknown.output  # as `ccpo train --arm`
    assert not (tmp_path / "runs.db").exists() or not list_runs(open_db(tmp_path / "runs.db"))


@pytest.mark.slow
def test_warm_start_forks_every_arm_from_the_first_arms_run(game_dirs, tmp_path):
    import json

    import torch

    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local.checkpoints import checkpoint_path, default_run_dir
    from ccpo_cli.backends.local.trainer import TrainConfig, train_arm
    from ccpo_cli.errors import InvalidInput

    db_path = tmp_path / "runs.db"
    options = TINY | {"steps": 4}
    result = run_matrix(
        db_path,
        design(
            ["grpo", "return-hard"],
            [0],
            30.0,
            game_dirs,
            prefix="w",
            warm_start=2,
            steps=4,
            window_start=2,
        ),
    )
    db = open_db(db_path)
    warmup = get_run(db, "w-warmup-grpo-seed0")
    assert warmup["status"] == "finished" and run_evaluations(db, "w-warmup-grpo-seed0") == []
    for name in result.run_names:
        # The forks inherit the warm-up's step-1 rollouts, so the pairing check still holds.
        assert get_run(db, name)["step1_rollout_hash"] == warmup["step1_rollout_hash"] is not None
        assert sorted(row["step"] for row in run_evaluations(db, name)) == [3, 4]
    assert result.comparison.isolation["estimator_only"]
    # A card of a fork says where its policy came from instead of "trained from scratch".
    from ccpo_cli.cards.setup import local_setup_rows

    model_row = local_setup_rows(get_run(db, "w-return-hard-seed0"), {})[0]
    assert "forked at step 2 from a run of arm grpo" in str(model_row), model_row

    def rollouts(name: str) -> dict[int, str]:
        lines = (default_run_dir(db_path, name) / "metrics.jsonl").read_text().splitlines()
        rows = map(json.loads, lines)  # the step-0 line, if any, is an evaluation's
        return {row["step"]: row["rollout_sha256"] for row in rows if "rollout_sha256" in row}

    # Both forks start from one policy, so their first own step plays the same rollouts.
    assert sorted(rollouts("w-grpo-seed0")) == [3, 4]
    assert rollouts("w-grpo-seed0")[3] == rollouts("w-return-hard-seed0")[3]

    # Forking the first arm from its own warm-up is the uninterrupted run, weight for weight.
    train_arm(
        load_arm("grpo"),
        "straight",
        db_path,
        TrainConfig(seed=0, eval_from=2, **options, **game_dirs),
    )
    final = [
        torch.load(checkpoint_path(default_run_dir(db_path, name), 4), weights_only=False)["model"]
        for name in ("straight", "w-grpo-seed0")
    ]
    assert all(torch.equal(final[0][key], final[1][key]) for key in final[0])
    assert rollouts("straight")[4] == rollouts("w-grpo-seed0")[4]

    start = str(checkpoint_path(default_run_dir(db_path, "w-warmup-grpo-seed0"), 2))
    with pytest.raises(InvalidInput, match="seed 0, not 1"):
        train_arm(
            load_arm("gigpo"),
            "other-seed",
            db_path,
            TrainConfig(seed=1, start_from=start, **options, **game_dirs),
        )
    with pytest.raises(UsageError, match="--warm-start"):
        run_matrix(
            db_path,
            design(
                ["grpo", "gigpo"],
                [0],
                30.0,
                game_dirs,
                prefix="x",
                warm_start=3,
                window_start=2,
                steps=4,
            ),
        )
    with pytest.raises(UsageError, match="below --steps"):
        run_matrix(
            db_path,
            design(["grpo", "gigpo"], [0], 30.0, game_dirs, prefix="x", warm_start=4, steps=4),
        )


@pytest.mark.slow
def test_a_rerun_of_a_prefix_with_other_settings_is_refused(game_dirs, tmp_path):
    """Issue 21, item 3: a matrix rerun with the same prefix and new --steps/--eval-games reused the
    old runs ("all seeds done"). It is refused, naming the differences; other speeds are allowed."""
    db_path = tmp_path / "runs.db"
    first = run_matrix(db_path, design(["grpo", "return-hard"], [0], 30.0, game_dirs, prefix="p"))
    assert first.seeds_compared == [0]
    before = [(run["name"], run["updated_at"]) for run in list_runs(open_db(db_path))]
    for changed in (["--steps", "3"], ["--eval-games", "8"]):
        rerun = runner.invoke(
            app,
            [
                "--db",
                str(db_path),
                "matrix",
                "--arms",
                "grpo,return-hard",
                "--seeds",
                "0",
                "--prefix",
                "p",
                "--warm-start",
                "0",
                "--eval-every",
                "1",
                "--tasks",
                "2",
                "--group",
                "2",
                "--workers",
                "0",
                "--steps",
                "2",
                "--eval-games",
                "4",
                *changed,
            ],
        )
        assert rerun.exit_code == 3, rerun.output
        option = changed[0].lstrip("-").replace("-", "_")
        assert f"{option} {2 if option == 'steps' else 4} (now {changed[1]})" in rerun.output
        assert "new --prefix" in rerun.output and "Traceback" not in rerun.output
    assert [(run["name"], run["updated_at"]) for run in list_runs(open_db(db_path))] == before
    # Another number of rollout workers measures the same thing: the finished runs are reused.
    again = run_matrix(
        db_path, design(["grpo", "return-hard"], [0], 30.0, game_dirs, prefix="p", workers=1)
    )
    assert again.run_names == first.run_names and again.stopped_reason == "all seeds done"


def test_runs_created_for_a_ray_task_that_never_returned_do_not_block_a_restart(tmp_path):
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.experiments.matrix import _plan, check_rerun
    from ccpo_cli.store import ensure_run

    db_path = tmp_path / "runs.db"
    plan = _plan(
        MatrixDesign(("grpo", "gigpo"), (0,), 30.0, recipe=default_recipe(**TINY), warm_start=0),
        db_path,
    )
    db = open_db(db_path)
    for run in plan.blocks[0].runs():
        ensure_run(db, run.name)  # what the Ray driver does before it sends a block
    check_rerun(db, plan)
    ensure_run(
        db,
        plan.blocks[0].run_names[0],
        config={"train": {**plan.blocks[0].recipe.as_dict(), "steps": 9}},
    )
    with pytest.raises(InvalidInput, match=r"steps 9 \(now 2\)"):
        check_rerun(db, plan)
