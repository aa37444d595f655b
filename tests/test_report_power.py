"""`ccpo compare`'s power section: numbers against statsmodels, pairing, and the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from statsmodels.stats.power import TTestIndPower, TTestPower
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cli.app import app
from ccpo_cli.report import power
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()


@pytest.mark.parametrize(
    "difference,sd,n", [(5.0, 7.0, 10), (3.0, 2.0, 4), (12.0, 11.4, 3), (1.0, 6.0, 40)]
)
def test_paired_power_and_mdd_match_statsmodels(difference, sd, n):
    reference = TTestPower()
    assert power.paired_power(difference, sd, n) == pytest.approx(
        reference.power(difference / sd, n, 0.05, alternative="two-sided"), rel=1e-9
    )
    assert power.paired_mdd(sd, n) == pytest.approx(
        reference.solve_power(None, n, 0.05, 0.8, alternative="two-sided") * sd, rel=1e-5
    )


@pytest.mark.parametrize("difference,sd,n", [(5.0, 7.0, 10), (20.0, 7.0, 3), (2.0, 3.0, 25)])
def test_welch_power_with_equal_spread_matches_statsmodels_two_sample(difference, sd, n):
    # With equal sds and equal n, Welch's df is 2n - 2 and its standard error the pooled one.
    reference = TTestIndPower()
    assert power.welch_power(difference, sd, n, sd, n) == pytest.approx(
        reference.power(difference / sd, n, 0.05, ratio=1.0, alternative="two-sided"), rel=1e-9
    )
    assert power.welch_mdd(sd, n, sd, n) == pytest.approx(
        reference.solve_power(None, n, 0.05, 0.8, ratio=1.0, alternative="two-sided") * sd, rel=1e-5
    )


@pytest.mark.parametrize("difference,sd", [(5.0, 7.0), (5.0, 3.0), (10.0, 11.4), (2.0, 1.0)])
def test_seeds_needed_is_the_ceiling_of_statsmodels_solution(difference, sd):
    paired = TTestPower().solve_power(difference / sd, None, 0.05, 0.8, alternative="two-sided")
    assert power.paired_seeds_needed(difference, sd) == max(2, math.ceil(paired))
    two_sample = TTestIndPower().solve_power(
        difference / sd, None, 0.05, 0.8, ratio=1.0, alternative="two-sided"
    )
    assert power.welch_seeds_needed(difference, sd, sd) == max(2, math.ceil(two_sample))


def test_welch_power_with_unequal_spread_matches_simulation():
    rng = np.random.default_rng(3)
    a = rng.normal(5.0, 9.0, size=(20000, 4))
    b = rng.normal(0.0, 3.0, size=(20000, 6))
    from scipy import stats

    rejected = stats.ttest_ind(a, b, axis=1, equal_var=False).pvalue < 0.05
    assert power.welch_power(5.0, 9.0, 4, 3.0, 6) == pytest.approx(rejected.mean(), abs=0.015)


def test_pairing_uses_differences_and_welch_otherwise():
    a = {0: 80.0, 1: 70.0, 2: 90.0, 3: 60.0}
    b = {0: 77.0, 1: 66.0, 2: 88.0, 3: 55.0}
    paired = power.pair_power(a, b, paired_seeds=[0, 1, 2, 3], detect=5)
    differences = [3.0, 4.0, 2.0, 5.0]
    assert paired["test"] == power.PAIRED and paired["n_pairs"] == 4
    assert paired["sd"] == pytest.approx(np.std(differences, ddof=1))
    assert paired["mdd"] == pytest.approx(power.paired_mdd(np.std(differences, ddof=1), 4))
    welch = power.pair_power(a, b, paired_seeds=[], detect=5)
    assert welch["test"] == power.WELCH
    # Seed luck (60 to 90 points) is shared within a seed: pairing removes it.
    assert paired["mdd"] < 5 < welch["mdd"]
    assert paired["seeds_needed"] < welch["seeds_needed"]


def test_too_few_seeds_say_so_instead_of_a_number():
    result = power.pair_power({0: 80.0}, {0: 70.0, 1: 71.0}, paired_seeds=[0], detect=5)
    assert result["mdd"] is None and result["seeds_needed"] is None
    assert result["note"] == "needs ≥ 2 seeds"


def _add(db, name, arm, seed, level, step1):
    ensure_run(
        db,
        name,
        arm=ExternalArm(arm, f"fp-{arm}"),
        seed=seed,
        base_model="m",
        backend="local",
        total_steps=20,
        hardware="cpu",
        data_order_seed=seed,
    )
    update_run_state(db, name, step1_rollout_hash=step1, status="finished", last_step=20)
    for step, rate in ((10, level - 2), (20, level + 2)):
        record_evaluation(
            db, name, step, episodes=64, successes=round(rate * 0.64), temperature=0.4
        )


def test_compare_reports_paired_power_when_rollouts_match(tmp_path):
    db = open_db(tmp_path / "runs.db")
    levels = {0: (60, 55), 1: (80, 74), 2: (70, 66)}
    for seed, (a, b) in levels.items():
        _add(db, f"a-{seed}", "grpo", seed, a, f"h{seed}")
        _add(db, f"b-{seed}", "gigpo", seed, b, f"h{seed}" if seed != 2 else "other")
    document = compare_runs(db, window_start=10, detect=5).as_json()
    (pair,) = document["power"]["pairs"]
    # Seed 2's rollouts differ: it is left out of the pairs, which stay paired on seeds 0 and 1.
    assert pair["test"] == "paired t" and pair["n_pairs"] == 2 and pair["seeds_left_out"] == [2]
    assert document["power"]["detect"] == 5
    unpaired = compare_runs(db, ["a-0", "a-1", "a-2", "b-2"], window_start=10).as_json()
    assert unpaired["power"]["pairs"][0]["note"] == "needs ≥ 2 seeds"


def test_compare_cli_prints_power_and_refuses_a_bad_detect(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed in range(3):
        _add(db, f"a-{seed}", "grpo", seed, 60 + 10 * seed, f"h{seed}")
        _add(db, f"b-{seed}", "gigpo", seed, 57 + 10 * seed + seed, f"h{seed}")
    result = runner.invoke(
        app, ["--db", str(tmp_path / "runs.db"), "compare", "--window-start", "10", "--detect", "5"]
    )
    assert result.exit_code == 0, result.output
    assert "minimum detectable difference" in result.stdout and "paired t" in result.stdout
    as_json = runner.invoke(
        app, ["--db", str(tmp_path / "runs.db"), "compare", "--window-start", "10", "--json"]
    )
    pair = json.loads(as_json.stdout)["power"]["pairs"][0]
    assert pair["test"] == "paired t" and pair["mdd"] > 0 and pair["seeds_needed"] is None
    bad = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), "compare", "--detect", "0"])
    assert bad.exit_code == 2 and "--detect" in bad.output


def test_plot_draws_arm_means_with_t_intervals_and_paired_differences(tmp_path):
    from scipy import stats as scipy_stats

    from ccpo_cli.report.plot import paired_differences, pointwise, seed_curves

    db = open_db(tmp_path / "runs.db")
    for seed in range(3):
        _add(db, f"a-{seed}", "grpo", seed, 60 + 10 * seed, f"h{seed}")
        _add(db, f"b-{seed}", "gigpo", seed, 50 + 10 * seed + seed, f"h{seed}")
    comparison = compare_runs(db, window_start=10)
    document = comparison.as_json()
    curves = seed_curves(comparison)
    points = {point["step"]: point for point in pointwise(curves["grpo"])}
    grpo = np.array(
        [
            [run["evaluations"][i]["success"] for i in range(2)]
            for run in document["runs"]
            if run["arm"] == "grpo"
        ]
    )
    assert sorted(points) == [10, 20] and not any(point["missing"] for point in points.values())
    for index, step in enumerate((10, 20)):
        column = grpo[:, index]
        half = scipy_stats.t.ppf(0.975, 2) * column.std(ddof=1) / np.sqrt(3)
        assert points[step]["mean"] == pytest.approx(column.mean())
        assert (points[step]["low"], points[step]["high"]) == pytest.approx(
            (column.mean() - half, column.mean() + half)
        )
    differences = paired_differences(curves["grpo"], curves["gigpo"])
    assert sorted(differences) == [0, 1, 2]
    assert differences[2][20] == pytest.approx(curves["grpo"][2][20] - curves["gigpo"][2][20])
    plot = tmp_path / "arms.png"
    result = runner.invoke(
        app,
        ["--db", str(tmp_path / "runs.db"), "compare", "--window-start", "10", "--plot", str(plot)],
    )
    assert result.exit_code == 0, result.output
    import matplotlib.image

    # The two-panel figure (7.5 in tall at 120 dpi before the tight crop; one panel is 4.8 in,
    # 576 px): the paired panel is drawn.
    height, width = matplotlib.image.imread(plot).shape[:2]
    assert height > 700 and width > 700


def test_the_plot_keeps_steps_that_only_some_seeds_evaluated(tmp_path):
    """The tour's plot used to keep only the steps every seed evaluated (one dot, no difference panel)."""
    from ccpo_cli.report.plot import pointwise, seed_curves

    db = open_db(tmp_path / "runs.db")
    for seed, steps in ((0, (0, 10, 20, 30, 40)), (1, (0, 10, 20)), (2, (5, 15))):
        name = f"rh-{seed}"
        store.ensure_run(db, name, arm=ExternalArm("return-hard", "fp"), seed=seed, total_steps=40)
        for step in steps:
            store.record_evaluation(db, name, step, success_rate=20.0 + step + seed, episodes=64)
    curves = seed_curves(compare_runs(db, None))
    points = {point["step"]: point for point in pointwise(curves["return-hard"])}
    assert sorted(points) == [0, 5, 10, 15, 20, 30, 40]
    assert points[0]["n"] == 2 and points[0]["missing"] and points[0]["low"] is not None
    assert points[40]["n"] == 1 and points[40]["low"] is None  # one seed: no interval is drawn


def test_welch_mdd_is_finite_where_scipy_lower_tail_is_nan():
    # scipy's nct.cdf gives NaN far in the lower tail at fractional df (here Welch df 1.97);
    # the far tail is taken as an upper tail of the mirrored distribution instead.
    mdd = power.welch_mdd(0.4419417382415922, 2, 0.3866990209613932, 2)
    assert math.isfinite(mdd) and mdd > 0
    assert power.welch_power(mdd, 0.4419417382415922, 2, 0.3866990209613932, 2) == pytest.approx(
        0.8, abs=1e-6
    )
