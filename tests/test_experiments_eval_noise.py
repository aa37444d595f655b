"""The evaluation-noise share of a matrix's paired variance (ccpo_cli/experiments/eval_noise.py):
the formula and both intervals against issue 40's block-5 figures, and the re-evaluation of a
tiny matrix's real checkpoints under other evaluation seeds."""

from __future__ import annotations

import math
import statistics

import pytest
from test_experiments_matrix import design, game_dirs  # noqa: F401  (the module's fixture)

from ccpo_cli.errors import InvalidInput
from ccpo_cli.experiments.eval_noise import measure, noise_share, reevaluate, sample_checkpoints
from ccpo_cli.experiments.matrix import run_matrix, run_name
from ccpo_cli.store import open_db


def test_the_share_and_its_intervals_reproduce_block_5():
    # Block 5 (issue 40): 10 checkpoints x 4 evaluations, sd 2.2 per evaluation; paired sd 6.6
    # over 22 pairs: 22 % of the paired variance, sd CI 1.8-2.9, share CI 14-39 %.
    spread = math.sqrt(3 * 2.2**2 / 4)  # +-a around each mean: pooled variance 4a²/3 = 2.2²
    evaluations = {f"c{k}": [40 + k - spread, 40 + k + spread] * 2 for k in range(10)}
    found = noise_share(evaluations, paired_sd=6.6, pairs=22)
    assert found["df"] == 30 and found["evaluation_sd"] == pytest.approx(2.2)
    assert found["share"] == pytest.approx(2 * 2.2**2 / 6.6**2)
    assert round(found["share"] * 100) == 22
    low_sd, high_sd = found["evaluation_sd_ci"]
    assert (round(low_sd, 1), round(high_sd, 1)) == (1.8, 2.9)
    low, high = found["share_ci_evaluation_only"]
    assert round(low * 100) == 14 and 0.38 < high < 0.40
    # Letting the paired sd vary too widens it on both sides.
    wide_low, wide_high = found["share_ci"]
    assert wide_low < low and wide_high > high
    assert found["training_share"] == pytest.approx(1 - found["share"])
    # A window of two evaluations halves the evaluation part of each arm's window mean.
    assert noise_share(evaluations, 6.6, 22, window_evaluations=2)["share"] == pytest.approx(
        found["share"] / 2
    )
    with pytest.raises(InvalidInput):
        noise_share({"c": [1.0]}, 6.6, 22)


def test_a_tiny_matrix_is_reevaluated_under_other_seeds(game_dirs, tmp_path):  # noqa: F811
    db_path = tmp_path / "runs.db"
    result = run_matrix(db_path, design(["grpo", "gigpo"], [0, 1, 2], 30.0, game_dirs, prefix="n"))
    assert result.seeds_compared == [0, 1, 2]
    db = open_db(db_path)
    pairs = [(run_name("n", "gigpo", s), run_name("n", "grpo", s)) for s in (0, 1, 2)]
    differences = [3.0, -1.0, 5.0]
    found = measure(db, pairs, differences, step=2, count=3, eval_seeds=[1, 2, 3])
    assert list(found["per_checkpoint"]) == ["n-gigpo-seed0", "n-grpo-seed0", "n-gigpo-seed1"]
    assert all(len(values) == 3 for values in found["per_checkpoint"].values())
    # By hand: pooled within-checkpoint variance, twice over the paired variance.
    within = sum(
        sum((v - statistics.fmean(values)) ** 2 for v in values)
        for values in found["per_checkpoint"].values()
    )
    assert found["df"] == 6
    assert found["share"] == pytest.approx(2 * within / 6 / statistics.variance(differences))
    # An evaluation seed is a fixed draw: the same checkpoint and seed, the same result.
    checkpoint = sample_checkpoints(db, pairs, 2, 1)[0]
    assert reevaluate(checkpoint, [2]) == [found["per_checkpoint"]["n-gigpo-seed0"][1]]
    # The evaluation protocol is the run's own: its panel, turn limit and temperature.
    assert checkpoint.eval_games == 4 and checkpoint.turn_limit == 6
    with pytest.raises(InvalidInput, match="no checkpoint at step 7"):
        sample_checkpoints(db, pairs, 7, 1)
