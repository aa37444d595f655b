"""The testbed's statistics (ccpo_cli/experiments/testbed.py) against scipy and simulation, and
`scripts/testbed_validity.py --quick` end to end (the CI mode: a tiny design, no timing)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ccpo_cli.batch_io import save_batch
from ccpo_cli.estimators import RolloutBatch
from ccpo_cli.experiments import batch_diagnostics, testbed, testbed_cost, testbed_runs

ROOT = Path(__file__).resolve().parent.parent


def test_paired_stats_are_scipys_one_sample_t_and_the_power_modules_mdd():
    from ccpo_cli.report.power import paired_mdd

    values = [3.1, -0.4, 5.0, 2.2, 1.9, 4.4, -1.0]
    result = testbed.paired_stats(values)
    reference = stats.ttest_1samp(values, 0.0)
    assert result["t"] == pytest.approx(reference.statistic) and result["p"] == pytest.approx(
        reference.pvalue
    )
    assert result["sd"] == pytest.approx(np.std(values, ddof=1))
    assert result["mdd"] == pytest.approx(paired_mdd(result["sd"], len(values)))
    assert result["effect_to_sd"] == pytest.approx(np.mean(values) / np.std(values, ddof=1))
    assert testbed.paired_stats([1.0])["p"] is None


def test_leave_one_out_t_is_t_with_n_minus_2_df_under_the_null():
    values = [0.5, -1.2, 2.0, 0.1, -0.7, 1.4]
    p_values = testbed.leave_one_out_p_values(values)
    others = np.delete(np.asarray(values), 2)
    t = values[2] / others.std(ddof=1)
    assert p_values[2] == pytest.approx(2 * stats.t.sf(abs(t), len(values) - 2))
    # Under normal null pairs the per-pair p-values are uniform: 5 % below 0.05.
    rng = np.random.default_rng(7)
    pooled = [p for _ in range(400) for p in testbed.leave_one_out_p_values(rng.normal(0, 4, 40))]
    assert abs(np.mean(np.asarray(pooled) < 0.05) - 0.05) < 0.006
    assert stats.kstest(pooled[:4000], "uniform").pvalue > 0.001
    # A shifted mean (an effect) is flagged far more often than alpha.
    shifted = [p for _ in range(200) for p in testbed.leave_one_out_p_values(rng.normal(6, 4, 40))]
    assert np.mean(np.asarray(shifted) < 0.05) > 0.2


def test_binomial_and_simulated_null_ranges():
    # Two sets tested separately: their counts add up.
    assert (
        testbed.null_count_range([20, 20], draws=4000)[1]
        > testbed.null_count_range(20, draws=4000)[1]
    )
    assert testbed.binomial_range(40) == (0, 5)
    low, high = testbed.binomial_range(100)
    assert stats.binom.cdf(low - 1, 100, 0.05) <= 0.025 if low else True
    assert stats.binom.sf(high, 100, 0.05) <= 0.025 < stats.binom.sf(high - 1, 100, 0.05)
    simulated = testbed.null_count_range(40, draws=4000)
    # Less spread than the binomial: one large difference makes the other pairs' rejections rarer.
    assert simulated[0] == 0 and 3 <= simulated[1] <= testbed.binomial_range(40)[1]


def test_aa_document_counts_false_positives_and_judges_them():
    rng = np.random.default_rng(3)
    null = {seed: float(value) for seed, value in enumerate(rng.normal(0, 5, 40))}
    document = testbed.aa_false_positive_rate(null)
    assert document["pairs"] == 40 and document["binomial_range_95"] == [0, 5]
    assert document["false_positives"] == sum(row["p"] < 0.05 for row in document["per_pair"])
    assert document["rate_interval_95"][0] <= document["rate"] <= document["rate_interval_95"][1]
    assert [row["seed"] for row in document["per_pair"]] == list(range(40))
    # Heavy tails (a few collapsed seeds) make the A/A lie, and the document says so.
    broken = dict(null) | {seed: 60.0 * (-1) ** seed for seed in range(8)}
    assert testbed.aa_false_positive_rate(broken)["within_binomial_range"] is False
    assert testbed.aa_false_positive_rate({0: 1.0})["within_binomial_range"] is None
    # Several arms' twins: each set is tested within itself, the counts pooled.
    sets = {
        "gigpo": dict(list(null.items())[:20]),
        "grpo": {seed: 3 * value for seed, value in list(null.items())[20:]},
    }
    pooled = testbed.aa_false_positive_rate(sets)
    assert pooled["pairs"] == 40 and pooled["sets"] == {"gigpo": 20, "grpo": 20}
    separate = [testbed.leave_one_out_p_values(list(found.values())) for found in sets.values()]
    assert [row["p"] for row in pooled["per_pair"]] == pytest.approx(separate[0] + separate[1])


def test_home_advantage_is_half_the_gap_between_warm_up_groups():
    found = {0: 4.0, 1: -2.0, 2: 6.0, 3: 0.0}
    warmed = {0: "a", 1: "b", 2: "a", 3: "b"}
    result = testbed.home_advantage(found, warmed, "a", "b")
    assert result["home_advantage"] == pytest.approx((5.0 - (-1.0)) / 2)
    assert result["balanced_difference"] == pytest.approx((5.0 + (-1.0)) / 2)
    assert result["p_home_advantage"] == pytest.approx(
        stats.ttest_ind([4.0, 6.0], [-2.0, 0.0], equal_var=False).pvalue
    )


def _run(
    evaluations, step_cpu, eval_cpu, start=10, seed=0, start_from="/r/w/checkpoints/step-000010.pt"
):
    return testbed_runs.RunData(
        "r", seed, 0, start, start_from, evaluations, dict(step_cpu), dict(eval_cpu)
    )


def test_design_cost_and_signal_per_cpu_minute():
    games = {f"g{index}": index % 2 == 0 for index in range(4)}  # 50 %
    better = {f"g{index}": index != 3 for index in range(4)}  # 75 %
    runs: dict[str, dict[int, testbed_runs.RunData]] = {"a": {}, "b": {}}
    warmups = {}
    for seed in range(3):
        runs["a"][seed] = _run(
            {12: better, 14: better},
            {s: 1.0 for s in range(11, 15)},
            {12: 3.0, 14: 3.0},
            seed=seed,
            start_from=f"/x/w{seed}/checkpoints/step-000010.pt",
        )
        runs["b"][seed] = _run(
            {12: games, 14: better if seed == 2 else games},
            {s: 1.0 for s in range(11, 15)},
            {12: 3.0, 14: 3.0},
            seed=seed,
            start_from=f"/x/w{seed}/checkpoints/step-000010.pt",
        )
        warmups[f"w{seed}"] = _run(
            {}, {s: 2.0 for s in range(1, 11)}, {}, start=0, seed=seed, start_from=None
        )
    data = testbed_runs.MatrixData("p", runs, warmups)
    design = testbed_cost.SubDesign(10, 4, (2, 4))
    model = testbed_cost.fit_cost_model(
        [*runs["a"].values(), *runs["b"].values(), *warmups.values()]
    )
    # warm-up 10 × 2 s, then each arm 4 steps × 1 s and 2 evaluations × 3 s.
    assert testbed_cost.block_cpu_seconds(data, ["a", "b"], 0, design, model) == pytest.approx(
        20 + 2 * (4 + 6)
    )
    point = testbed_cost.design_point(data, "a", "b", design, model)
    assert point["seeds"] == [0, 1, 2] and point["mean"] == pytest.approx((25 + 25 + 12.5) / 3)
    assert point["block_cpu_minutes"] == pytest.approx(40 / 60)
    assert point["effect_to_sd_squared_per_cpu_minute"] == pytest.approx(
        point["effect_to_sd"] ** 2 / (40 / 60)
    )
    assert point["expected_t_in_60_cpu_minutes"] == pytest.approx(
        point["effect_to_sd"] * math.sqrt(60 / (40 / 60))
    )
    # One evaluation, half the panel: cheaper blocks, the same training.
    short = testbed_cost.design_point(
        data, "a", "b", testbed_cost.SubDesign(10, 2, (2,), 2), model, {2: {"g0", "g1"}}
    )
    assert short["block_cpu_minutes"] == pytest.approx((20 + 2 * (2 + 1.5)) / 60)
    seeds, spent = testbed_cost.seeds_within_budget(data, ["a", "b"], design, model, 80 / 60)
    assert seeds == [0, 1] and spent == pytest.approx(80 / 60)


def test_batch_structure_counts_revisits_horizon_and_sparsity(tmp_path):
    # One group of two trajectories: both start in "s0" and reach "s1"; only the first goes on to "s2", and wins.
    batch = {
        "uid": np.array(["g", "g", "g", "g", "g"]),
        "traj_uid": np.array(["g/0", "g/0", "g/0", "g/1", "g/1"]),
        "anchor_obs": np.array(["s0", "s1", "s2", "s0", "s1"]),
        "step_index": np.array([0, 1, 2, 0, 1]),
        "env_reward": np.array([0.0, 0.0, 10.0, 0.0, 0.0]),
        "episode_reward": np.array([10.0, 10.0, 10.0, 0.0, 0.0]),
        "is_action_valid": np.ones(5, dtype=bool),
        "response_mask": np.ones((5, 1)),
    }
    # Written as the trainer dumps a batch: through the one batch-file writer.
    save_batch(RolloutBatch.from_mapping(batch), tmp_path / "step-000001.npz")
    found = batch_diagnostics.batch_structure([tmp_path / "step-000001.npz"])
    assert found["share_of_decisions_in_revisited_states"] == pytest.approx(4 / 5)
    assert found["share_without_first_turn"] == pytest.approx(2 / 3)
    assert found["trajectories_per_revisited_state"] == pytest.approx(2.0)
    assert found["horizon_mean_turns"] == pytest.approx(2.5) and found[
        "success_rate"
    ] == pytest.approx(0.5)
    assert (
        found["share_of_decisions_rewarded"] == pytest.approx(1 / 5)
        and found["share_of_groups_all_alike"] == 0.0
    )


@pytest.mark.slow
def test_testbed_validity_quick_runs_both_controls_and_reports(tmp_path):
    from helpers_local_train import generated_games

    command = [
        sys.executable,
        str(ROOT / "scripts" / "testbed_validity.py"),
        "--quick",
        "--json",
        "--db",
        str(tmp_path / "runs.db"),
        "--train-games-dir",
        str(generated_games("train", 6)),
        "--eval-games-dir",
        str(generated_games("heldout", 6)),
        "--plot",
        str(tmp_path / "validity.png"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["design"]["arms"] == [
        "gigpo",
        "gigpo-aa = gigpo (rollout stream 1)",
        "gigpo-flip = gigpo [step_advantage_w=-1.0]",
    ]
    assert report["design"]["warm_start_arms"] == ["gigpo"] and report["design"]["seeds"] == [
        0,
        1,
        2,
        3,
    ]
    aa = report["aa"]
    assert aa["pairs"] == 4 and aa["sets"] == {"gigpo": 4} and len(aa["per_pair"]) == 4
    assert all(0.0 <= row["p"] <= 1.0 for row in aa["per_pair"])
    assert aa["binomial_range_95"] == list(testbed.binomial_range(4))
    control = report["control"]
    assert control["all_seeds"]["n"] == 4 and control["all_seeds"]["block_cpu_minutes"] > 0
    assert (
        control["within_budget"]["seeds"] == [0, 1, 2, 3]
        and control["within_budget"]["cpu_minutes"] > 0
    )
    assert report["cost_model"]["runs_that_recorded_cpu"] == 16  # 4 warm-ups and 12 forks
    assert (tmp_path / "validity.png").stat().st_size > 0
    # Analysing again trains nothing and says the same.
    again = subprocess.run(
        [*command[:-2], "--analyze-only"], capture_output=True, text=True, cwd=tmp_path, check=False
    )
    assert again.returncode == 0 and json.loads(again.stdout)["aa"] == aa
