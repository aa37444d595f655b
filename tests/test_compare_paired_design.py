"""The paired test where the design pairs: one decision (`stats.two_arm_test`) for compare, the
power section and the testbed.

Runs of two arms that share a seed and recorded the same first rollouts were paired by their
design (a matrix trains both from one start on one game draw): compare reports the paired t over
those seeds and says so; other arms get Welch's t. Before, compare always reported Welch and
threw the pairing away, while the power section of the same document used the paired test.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ccpo_cli import stats
from ccpo_cli.cli.app import app
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.identity import ExternalArm

# Seeds differ a lot from each other; within a seed, gigpo is always about 3 points above grpo.
LEVELS = {0: (40.0, 43.0), 1: (70.0, 72.5), 2: (55.0, 58.5), 3: (85.0, 88.0)}


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
    for step in (10, 15, 20):
        record_evaluation(db, name, step, episodes=200, successes=round(level * 2), temperature=0.4)


@pytest.fixture
def paired_db(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed, (grpo, gigpo) in LEVELS.items():
        _add(db, f"grpo-{seed}", "grpo", seed, grpo, f"rollouts-{seed}")
        _add(db, f"gigpo-{seed}", "gigpo", seed, gigpo, f"rollouts-{seed}")
    return tmp_path / "runs.db", db


def test_paired_runs_get_the_paired_test_and_the_document_says_so(paired_db):
    path, db = paired_db
    (row,) = compare_runs(db, window_start=10).as_json()["comparisons"]
    test = row["test"]
    assert (
        test["test"] == "paired t"
        and test["paired_seeds"] == [0, 1, 2, 3]
        and test["seeds_left_out"] == []
    )
    assert "paired t over the 4 seeds" in test["basis"]
    # The consistent 3-point shift is plain under pairing, lost in the seed spread under Welch.
    assert test["p"] < 0.01 < 0.5 < row["welch"]["p"]
    differences = [gigpo - grpo for grpo, gigpo in LEVELS.values()]
    sign = 1 if row["arm_a"] == "gigpo" else -1
    assert test["difference"] == pytest.approx(sign * sum(differences) / 4, abs=0.01)
    # The power section tests the same way: one decision.
    (pair,) = compare_runs(db, window_start=10).as_json()["power"]["pairs"]
    assert pair["test"] == test["test"] and pair["p"] == pytest.approx(test["p"])


def test_the_comparisons_table_shows_the_test_compare_chose(paired_db):
    path, _ = paired_db
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(path),
            "compare",
            "--window-start",
            "10",
            "--table",
            "comparisons",
            "--format",
            "csv",
        ],
    )
    assert result.exit_code == 0, result.stderr
    header, row = result.stdout.strip().splitlines()[:2]
    assert "test" in header.split(",") and "paired t" in row


def test_arms_without_paired_seeds_get_welch(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed, (grpo, gigpo) in LEVELS.items():
        _add(
            db, f"grpo-{seed}", "grpo", seed, grpo, f"grpo-rollouts-{seed}"
        )  # other first rollouts: not paired
        _add(db, f"gigpo-{seed}", "gigpo", seed, gigpo, f"gigpo-rollouts-{seed}")
    document = compare_runs(db, window_start=10).as_json()
    (row,) = document["comparisons"]
    assert row["test"]["test"] == "Welch t" and row["test"]["p"] == pytest.approx(row["welch"]["p"])
    assert document["power"]["pairs"][0]["test"] == "Welch t"
    json.dumps(document)  # the seeds are plain JSON


def test_one_function_decides_for_compare_power_and_testbed():
    from ccpo_cli.experiments.testbed import paired_stats
    from ccpo_cli.report.power import pair_power

    a = {seed: levels[1] for seed, levels in LEVELS.items()}
    b = {seed: levels[0] for seed, levels in LEVELS.items()}
    decided = stats.two_arm_test(a, b, paired_by_design=list(LEVELS))
    assert decided["test"] == stats.PAIRED_TEST
    assert pair_power(a, b, list(LEVELS))["p"] == pytest.approx(decided["p"])
    assert paired_stats([a[seed] - b[seed] for seed in LEVELS])["p"] == pytest.approx(decided["p"])
    assert (
        stats.two_arm_test(a, b, paired_by_design=[0])["test"] == stats.WELCH_TEST
    )  # one pair is no test
