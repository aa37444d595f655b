"""Compare on awkward data says what its numbers can bear.

Asked for in issue 11, defects 1, 2, 4, 5, 9.
"""

from __future__ import annotations

import pytest

from ccpo_cli import stats
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.identity import ExternalArm

SHARED = {
    "base_model": "Qwen/Qwen2.5-7B-Instruct",
    "benchmark": "alfworld",
    "hardware": "8xH100",
    "backend": "verl",
    "total_steps": 150,
    "data_order_seed": 0,
    "config": {"data": {"train_batch_size": 16}},
}


def add_run(
    db, name, arm, rates_by_step, *, seed=0, episodes=128, temperature=0.4, recorded=True, **fields
):
    ensure_run(
        db,
        name,
        arm=ExternalArm(arm),
        seed=seed,
        **(
            {**SHARED, **fields}
            if recorded
            else {"base_model": SHARED["base_model"], "total_steps": 150}
        ),
    )
    if recorded:
        update_run_state(db, name, step1_rollout_hash=f"h{seed}", status="running", last_step=150)
    for step, rate in rates_by_step.items():
        panel = episodes(step) if callable(episodes) else episodes
        record_evaluation(
            db, name, step, success_rate=rate, episodes=panel, temperature=temperature
        )


def climbing() -> dict[int, float]:
    """Defect 1: a run still climbing from 20 % to 69 % across steps 70-150."""
    steps = range(70, 155, 5)
    return {
        step: 20 + 49 * (step - 70) / 80 + (1.5 if index % 2 else -1.5)
        for index, step in enumerate(steps)
    }


def plateau(level: float = 80.0, steps=range(70, 120, 5)) -> dict[int, float]:
    return {
        step: level + (3 if index % 3 == 0 else -2 if index % 3 == 1 else 0.5)
        for index, step in enumerate(steps)
    }


def test_a_climbing_window_is_not_converged_and_its_bias_is_measured_on_detrended_noise(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "climb", "return-hard", climbing())
    run = compare_runs(db, ["climb"]).as_json()["runs"][0]
    assert (
        run["best"]["expected_max_bias_points"] < 5
    )  # was about 1.7 × 15 points: the climb counted as noise
    trend = run["window"]["trend"]
    assert run["window"]["converged"] is False and trend["direction"] == "rising"
    assert trend["ci_low"] > 0 and trend["change"] == pytest.approx(49, abs=2)
    best = run["best"]
    # The window sd (about 15 points) counts the climb as noise; the detrended noise is 1.5 points.
    assert run["window"]["sd"] > 14
    assert best["expected_max_bias_points"] == pytest.approx(
        best["expected_max_bias_sd"] * trend["residual_sd"]
    )
    assert best["expected_max_bias_points"] < 5 and "detrended" in best["bias_noise"]


def test_a_flat_window_is_converged_and_keeps_the_window_sd(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "flat", "return-hard", plateau())
    run = compare_runs(db, ["flat"]).as_json()["runs"][0]
    assert run["window"]["converged"] is True and run["window"]["trend"]["direction"] == "flat"
    assert run["best"]["expected_max_bias_points"] == pytest.approx(
        run["best"]["expected_max_bias_sd"] * run["window"]["sd"]
    )


def test_trend_test_matches_scipy_linregress_interval():
    steps, values = [70, 80, 90, 100, 110], [60.0, 64.0, 63.0, 70.0, 71.0]
    trend = stats.trend_test(steps, values)
    from scipy import stats as scipy_stats

    fit = scipy_stats.linregress(steps, values)
    half = scipy_stats.t.ppf(0.975, 3) * fit.stderr
    assert trend.slope == pytest.approx(fit.slope)
    assert (trend.ci_low, trend.ci_high) == pytest.approx((fit.slope - half, fit.slope + half))
    assert stats.trend_test([70, 75], [1.0, 2.0]).converged is None


def test_isolation_without_evidence_is_unverifiable_not_a_pass(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "a", "return-hard", plateau(), recorded=False)
    add_run(db, "b", "gigpo", plateau(75), recorded=False)
    isolation = compare_runs(db, None).as_json()["isolation"]
    assert isolation["verdict"] == "unverifiable" and isolation["estimator_only"] is False
    assert isolation["differences"] == []
    for key in ("hardware", "data_order_seed", "step1_rollout_hash", "config"):
        assert key in isolation["not_recorded"], isolation


def test_seeds_of_one_arm_are_replicates_not_an_isolation_failure(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed in range(3):
        add_run(db, f"rh-{seed}", "return-hard", plateau(80 + seed), seed=seed)
    isolation = compare_runs(db, None).as_json()["isolation"]
    assert not any(difference.startswith("seed") for difference in isolation["differences"]), (
        isolation
    )
    assert isolation["verdict"] == "passes" and isolation["estimator_only"] is True


def test_one_evaluation_in_the_window_is_never_a_headline(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(
        db,
        "short",
        "return-hard",
        {**{step: 30.0 + step / 5 for step in range(0, 70, 10)}, 70: 55.0},
    )
    window = compare_runs(db, ["short"]).as_json()["runs"][0]["window"]
    assert window["n"] == 1 and window["headline"] is False
    assert "at least 3" in window["headline_note"]
    arm = compare_runs(db, ["short"]).as_json()["arms"][0]
    assert arm["headline"] is False and arm["headline_note"] == window["headline_note"]
    best = compare_runs(db, ["short"]).as_json()["runs"][0]["best"]
    assert best["expected_max_bias_points"] is None and best["bias_noise"].startswith("left out")


def test_mixed_panel_sizes_are_flagged_and_the_window_uses_one_protocol(tmp_path):
    db = open_db(tmp_path / "runs.db")
    rates = plateau(72.0, steps=range(70, 150, 5))
    rates[125] = 100.0  # a 16-episode evaluation: 16/16
    add_run(
        db,
        "mixed",
        "return-hard",
        rates,
        episodes=lambda step: 16 if step in (80, 105, 125) else 128,
    )
    document = compare_runs(db, ["mixed"]).as_json()
    run = document["runs"][0]
    window = run["window"]
    kept = [rate for step, rate in rates.items() if step not in (80, 105, 125)]
    assert window["mean"] == pytest.approx(sum(kept) / len(kept))
    assert window["protocol_mixed"] and document["protocol_mixed"] and run["protocol_mixed"]
    assert (
        window["protocol"]["episodes"] == 128
        and window["n"] == 13
        and len(window["left_out_evaluation_ids"]) == 3
    )
    assert run["best"]["episodes"] == 128 and run["best"]["success"] < 100
    assert run["single_eval_interval"]["episodes"] == 128


def test_single_seed_statistics_print_needs_two_seeds_and_comparisons_carry_isolation(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", plateau(84))
    add_run(db, "gs", "global-successor", plateau(78), base_model="Qwen/Qwen2.5-1.5B-Instruct")
    document = compare_runs(db, None).as_json()
    for arm in document["arms"]:
        assert arm["iqm"]["ci_low"] is None and arm["iqm"]["ci_high"] is None
        assert arm["iqm"]["note"] == "needs ≥ 2 seeds"
    # Two base models: not compared at all (a difference between them says nothing of the estimator).
    assert document["comparisons"] == []
    assert document["not_compared"][0]["differ_in"] == ["base model"]
    assert any(d.startswith("base_model") for d in document["isolation"]["differences"])


def test_single_seed_comparisons_carry_needs_two_seeds(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", plateau(84))
    add_run(db, "gs", "global-successor", plateau(78))
    comparison = compare_runs(db, None).as_json()["comparisons"][0]
    assert (
        comparison["probability_of_improvement"] is None
        and comparison["poi_note"] == "needs ≥ 2 seeds"
    )


def test_two_seeds_per_arm_give_an_interval_and_a_probability(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed in range(2):
        add_run(db, f"rh-{seed}", "return-hard", plateau(84 + seed), seed=seed)
        add_run(db, f"gg-{seed}", "gigpo", plateau(78 - seed), seed=seed)
    document = compare_runs(db, None).as_json()
    assert all(
        arm["iqm"]["note"] is None and arm["iqm"]["ci_low"] is not None for arm in document["arms"]
    )
    assert document["comparisons"][0]["probability_of_improvement"] == 1.0
    assert document["comparisons"][0]["isolation"]["verdict"] == "passes"


def test_the_compare_table_prints_needs_two_seeds_and_the_pair_verdict(tmp_path):
    from typer.testing import CliRunner

    from ccpo_cli.cli.app import app

    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", plateau(84))
    add_run(db, "gg", "gigpo", plateau(80))
    add_run(db, "gs", "global-successor", plateau(78), base_model="Qwen/Qwen2.5-1.5B-Instruct")
    result = CliRunner().invoke(
        app, ["--db", str(tmp_path / "runs.db"), "compare"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    assert (
        "needs ≥ 2 seeds" in result.output
        and "not compared: they differ in base model" in result.output
    )
