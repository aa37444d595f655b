"""`ccpo compare` and `ccpo runs`: the JSON contract, the statistics in it, the isolation check."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers_store import WINDOW_STEPS, window_rates
from typer.testing import CliRunner

from ccpo_cli import stats, store
from ccpo_cli.cli.app import app
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()
TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")
SHARED = dict(
    base_model="Qwen/Qwen2.5-7B-Instruct",
    benchmark="alfworld",
    hardware="8xH100",
    backend="verl",
    total_steps=150,
    data_order_seed=0,
)
CONFIG = {
    "data": {"train_batch_size": 16},
    "env": {"rollout": {"n": 8}},
    "algorithm": {"gamma": 0.95},
}


def add_run(
    db, name, arm, seed, rates, *, episodes=128, temperature=0.4, step1="h0", config=None, **fields
):
    ensure_run(
        db,
        name,
        arm=ExternalArm(arm, f"fp-{arm}"),
        seed=seed,
        config=config if config is not None else CONFIG,
        **{**SHARED, **fields},
    )
    update_run_state(db, name, step1_rollout_hash=step1, status="running", last_step=119)
    for step, rate in zip(range(0, 5 * len(rates), 5), rates):
        successes = round(rate / 100 * episodes)
        per_type = {
            key: {
                "episodes": 20 + i,
                "successes": round((20 + i) * rate / 100 * (1 - i / 50)),
                "success": None,
            }
            for i, key in enumerate(TYPES)
        }
        for value in per_type.values():
            value["success"] = 100 * value["successes"] / value["episodes"]
        record_evaluation(
            db,
            name,
            step,
            episodes=episodes,
            successes=successes,
            temperature=temperature,
            task_types=per_type,
        )


def plateau(level: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return [30 + step / 2 for step in range(0, 70, 5)] + list(
        np.clip(level + rng.normal(0, 4, 10), 0, 100)
    )


@pytest.fixture
def two_arms(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed in range(3):
        add_run(db, f"rh-{seed}", "return-hard", seed, plateau(84, seed), step1=f"h{seed}")
        add_run(db, f"gg-{seed}", "gigpo", seed, plateau(78, 10 + seed), step1=f"h{seed}")
    return db, tmp_path / "runs.db"


def test_compare_json_has_the_contract_keys(two_arms):
    _, path = two_arms
    result = runner.invoke(app, ["--db", str(path), "compare", "--json"])
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["window_start"] == 70
    for run in document["runs"]:
        assert {"run", "arm", "seed", "window", "best", "last_step", "total_steps"} <= set(run)
        assert {"mean", "sd", "n", "steps"} <= set(run["window"])
        assert {"step", "success", "task_types", "expected_max_bias_sd"} <= set(run["best"])
        assert set(run["best"]["task_types"]) == set(TYPES)
        assert run["last_step"] == 119 and run["total_steps"] == 150
    for arm in document["arms"]:
        assert {"arm", "n_seeds", "mean", "sd", "n"} <= set(arm)
    assert {"estimator_only", "differences"} <= set(document["isolation"])


def test_per_run_numbers_trace_to_evaluation_rows(two_arms):
    db, _ = two_arms
    document = compare_runs(db, ["rh-0"], window_start=70).as_json()
    run = document["runs"][0]
    rows = db.execute(
        "SELECT evaluations.id, step, success_rate, episodes FROM evaluations JOIN runs ON runs.id = run_id "
        "WHERE runs.name = 'rh-0' AND step >= 70 ORDER BY step"
    ).fetchall()
    rates = [row[2] for row in rows]
    assert run["window"]["evaluation_ids"] == [row[0] for row in rows]
    assert run["window"]["steps"] == WINDOW_STEPS
    assert run["window"]["mean"] == pytest.approx(np.mean(rates), abs=1e-12)
    assert run["window"]["sd"] == pytest.approx(np.std(rates, ddof=1), abs=1e-12)
    best = run["best"]
    assert (
        best["success"] == max(rates) and best["evaluation_id"] == rows[rates.index(max(rates))][0]
    )
    assert best["expected_max_bias_sd"] == pytest.approx(1.539, abs=1e-3)
    assert best["expected_max_bias_points"] == pytest.approx(
        best["expected_max_bias_sd"] * run["window"]["sd"]
    )
    assert best["task_type_episodes"] == {key: 20 + i for i, key in enumerate(TYPES)}
    interval = run["single_eval_interval"]
    low, high = stats.wilson_interval(run["window"]["mean"] / 100 * 128, 128)
    assert (interval["episodes"], interval["episodes_basis"]) == (128, "recorded")
    assert (interval["low"], interval["high"]) == (
        pytest.approx(100 * low),
        pytest.approx(100 * high),
    )
    assert run["window"]["episodes"] == 1280
    pooled_low, pooled_high = stats.wilson_interval(run["window"]["successes"], 1280)
    assert run["window"]["pooled_interval"]["low"] == pytest.approx(100 * pooled_low)
    assert run["window"]["pooled_interval"]["high"] == pytest.approx(100 * pooled_high)
    assert run["window_task_types"]["pick"]["episodes"] == 200


def test_arms_across_seeds_welch_iqm_and_improvement(two_arms):
    db, _ = two_arms
    document = compare_runs(db, None).as_json()
    arms = {arm["arm"]: arm for arm in document["arms"]}
    assert [arm["arm"] for arm in document["arms"]] == [
        "return-hard",
        "gigpo",
    ]  # by mean, best first
    rh_means = [run["window"]["mean"] for run in document["runs"] if run["arm"] == "return-hard"]
    gg_means = [run["window"]["mean"] for run in document["runs"] if run["arm"] == "gigpo"]
    rh = arms["return-hard"]
    assert (rh["n_seeds"], rh["n"], rh["sd_over"], rh["resolved"], rh["note"]) == (
        3,
        3,
        "seeds",
        True,
        None,
    )
    assert rh["mean"] == pytest.approx(np.mean(rh_means)) and rh["sd"] == pytest.approx(
        np.std(rh_means, ddof=1)
    )
    assert (
        rh["iqm"]["tasks"] == list(TYPES)
        and rh["iqm"]["ci_low"] <= rh["iqm"]["iqm"] <= rh["iqm"]["ci_high"]
    )
    comparison = document["comparisons"][0]
    reference = stats.welch_t_test(rh_means, gg_means)
    assert comparison["welch"] == reference
    assert comparison["welch"]["df"] is not None and comparison["resolved"] is True
    assert 0.5 < comparison["probability_of_improvement"] <= 1.0
    # Same seeds in both arms, same step-1 rollouts per seed: the estimator is isolated.
    assert document["isolation"]["estimator_only"] is True


def test_isolation_compares_step1_rollouts_seed_by_seed(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed in range(2):
        add_run(db, f"rh-{seed}", "return-hard", seed, plateau(84, seed), step1=f"h{seed}")
        add_run(
            db, f"gg-{seed}", "gigpo", seed, plateau(78, seed), step1="different" if seed else "h0"
        )
    isolation = compare_runs(db, None).as_json()["isolation"]
    assert isolation["differences"] == [
        'step1_rollout_hash (seed 1): "different" (gg-1) vs "h1" (rh-1)'
    ]
    add_run(db, "gg-2", "gigpo", 2, plateau(78, 2), step1="h2")
    assert any(
        d.startswith("seed: ") for d in compare_runs(db, None).as_json()["isolation"]["differences"]
    )


def test_single_seed_arms_are_unresolved_and_use_evaluation_sd(tmp_path):
    db = open_db(tmp_path / "runs.db")
    rates = [30 + step / 2 for step in range(0, 70, 5)] + window_rates()
    add_run(db, "rh", "return-hard", 0, rates)
    add_run(db, "gs", "global-successor", 0, [rate - 6 for rate in rates])
    document = compare_runs(db, ["rh", "gs"]).as_json()
    arm = next(arm for arm in document["arms"] if arm["arm"] == "return-hard")
    assert (arm["n_seeds"], arm["n"], arm["sd_over"]) == (1, 10, "evaluations")
    assert arm["note"] == "unresolved until replicated" and not arm["resolved"]
    assert document["comparisons"][0]["note"] == "unresolved until replicated"
    assert document["comparisons"][0]["welch"]["p"] is None
    assert (
        document["isolation"]["estimator_only"] is True
        and document["isolation"]["differences"] == []
    )


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"base_model": "Qwen/Qwen2.5-1.5B-Instruct"}, "base_model"),
        ({"hardware": "4xA100"}, "hardware"),
        ({"data_order_seed": 1}, "data_order_seed"),
        ({"step1": "other"}, "step1_rollout_hash"),
        ({"seed": 1}, "seed"),
        ({"temperature": 1.0}, "evaluation temperature"),
        ({"episodes": 64}, "evaluation episodes"),
        ({"config": {**CONFIG, "data": {"train_batch_size": 32}}}, "config data.train_batch_size"),
    ],
)
def test_isolation_lists_every_non_estimator_difference(tmp_path, change, expected):
    db = open_db(tmp_path / "runs.db")
    rates = plateau(80, 0)
    add_run(db, "a", "return-hard", 0, rates)
    seed = change.pop("seed", 0)
    add_run(db, "b", "gigpo", seed, rates, **change)
    isolation = compare_runs(db, None).as_json()["isolation"]
    assert isolation["estimator_only"] is False
    assert any(difference.startswith(expected) for difference in isolation["differences"]), (
        isolation
    )
    assert len(isolation["differences"]) == 1, isolation


def test_estimator_flags_in_the_config_are_not_differences(tmp_path):
    db = open_db(tmp_path / "runs.db")
    rates = plateau(80, 0)
    add_run(
        db,
        "a",
        "return-hard",
        0,
        rates,
        config={
            **CONFIG,
            "algorithm": {"gamma": 0.95, "adv_estimator": "ccpo"},
            "arm": {"gate": "hard", "target": "return"},
        },
    )
    add_run(
        db,
        "b",
        "gigpo",
        0,
        rates,
        config={
            **CONFIG,
            "algorithm": {"gamma": 0.95, "adv_estimator": "gigpo"},
            "arm": {"gate": "none"},
        },
    )
    assert compare_runs(db, None).as_json()["isolation"]["differences"] == []


def test_window_start_moves_the_window(two_arms):
    _, path = two_arms
    result = runner.invoke(
        app, ["--db", str(path), "compare", "rh-0", "--window-start", "100", "--json"]
    )
    run = json.loads(result.stdout)["runs"][0]
    assert run["window"]["steps"] == [100, 105, 110, 115] and run["window"]["n"] == 4
    assert run["best"]["expected_max_bias_sd"] == pytest.approx(stats.expected_max_of_normals(4))


def test_compare_table_plot_and_errors(two_arms, tmp_path):
    _, path = two_arms
    plot = tmp_path / "curves.png"
    result = runner.invoke(app, ["--db", str(path), "compare", "rh-0", "gg-0", "--plot", str(plot)])
    assert result.exit_code == 0, result.output
    for text in (
        "arms side by side",
        "return-hard",
        "gigpo",
        "isolation",
        "per run",
        "best single evaluation",
    ):
        assert text in result.stdout
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    import matplotlib.image

    image = matplotlib.image.imread(plot)
    assert image.shape[0] > 300 and image.shape[1] > 500
    result = runner.invoke(app, ["--db", str(path), "compare", "nope", "--json"])
    assert result.exit_code == 3 and "no run named 'nope'" in result.output
    result = runner.invoke(
        app, ["--db", str(path), "compare", "rh-0", "--plot", str(tmp_path / "no" / "x.png")]
    )
    assert result.exit_code == 3 and "does not exist" in result.output


def test_compare_on_an_empty_database(tmp_path):
    store.open_db(tmp_path / "runs.db")  # a read command never creates the file (issue 12)
    result = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), "compare", "--json"])
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert document["runs"] == [] and document["arms"] == []


def test_runs_list_and_show(two_arms):
    db, path = two_arms
    result = runner.invoke(app, ["--db", str(path), "runs", "list", "--json"])
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [run["name"] for run in runs] == sorted(
        f"{p}-{s}" for p in ("gg", "rh") for s in range(3)
    )
    assert all(run["n_evaluations"] == 24 and run["last_step"] == 119 for run in runs)
    assert runs[0]["config"] == CONFIG
    result = runner.invoke(app, ["--db", str(path), "runs", "show", "rh-1", "--json"])
    document = json.loads(result.stdout)
    assert document["run"]["arm"] == "return-hard" and document["run"]["step1_rollout_hash"] == "h1"
    assert len(document["evaluations"]) == 24 and set(
        document["evaluations"][0]["task_types"]
    ) == set(TYPES)
    table = runner.invoke(app, ["--db", str(path), "runs", "list"])
    assert table.exit_code == 0 and "rh-1" in table.stdout and "return-hard" in table.stdout
    shown = runner.invoke(app, ["--db", str(path), "runs", "show", "rh-1"])
    assert shown.exit_code == 0 and "evaluations" in shown.stdout
    missing = runner.invoke(app, ["--db", str(path), "runs", "show", "ghost"])
    assert missing.exit_code == 3 and "no run named 'ghost'" in missing.output


def test_arm_flags_come_from_the_run_or_an_arm_file_with_its_fingerprint(tmp_path):
    from ccpo_cli.arms import load_arm
    from ccpo_cli.store.identity import FLAGS_NOT_RECORDED, FLAGS_RECORDED, FLAGS_REGISTRY

    db = open_db(tmp_path / "runs.db")
    arm = load_arm("return-hard")
    override = load_arm("return-hard", {"rho": "0.59"})
    ensure_run(db, "current", arm=ExternalArm("return-hard", arm.fingerprint))
    ensure_run(db, "stale", arm=ExternalArm("return-hard", "0" * 64))
    ensure_run(db, "custom", arm=ExternalArm("my-own-arm", "1" * 64))
    ensure_run(db, "typed", arm=override)
    for name in ("current", "stale", "custom", "typed"):
        record_evaluation(db, name, 70, success_rate=80.0)
    runs = {run["run"]: run for run in compare_runs(db, None).as_json()["runs"]}
    assert (
        runs["current"]["arm_flags"] == arm.flags()
        and runs["current"]["arm_flags_source"] == FLAGS_REGISTRY
    )
    assert (
        runs["stale"]["arm_flags"] is None
        and runs["stale"]["arm_flags_source"] == FLAGS_NOT_RECORDED
    )
    assert (
        runs["custom"]["arm_flags"] is None
        and runs["custom"]["arm_flags_source"] == FLAGS_NOT_RECORDED
    )
    assert (
        runs["typed"]["arm_flags"] == override.flags() and runs["typed"]["arm_flags"]["rho"] == 0.59
    )
    assert (
        runs["typed"]["arm_overrides"] == {"rho": 0.59}
        and runs["typed"]["arm_flags_source"] == FLAGS_RECORDED
    )


def launch_config(run: str, arm: str, flags: dict, batch: int = 16) -> dict:
    """Shaped like the verl launcher's recorded config: Hydra overrides with the arm's flags
    mixed in, per-run paths and names, and the arm's worker environment."""
    overrides = {
        "data.train_batch_size": batch,
        "env.rollout.n": 8,
        "algorithm.gamma": flags["gamma"],
        "algorithm.adv_estimator": "ccpo",
        "trainer.experiment_name": run,
        "trainer.default_local_dir": f"/ckpt/{run}",
        "env.seed": 0,
    }
    overrides.update({f"+algorithm.ccpo.{flag}": value for flag, value in flags.items()})
    return {
        "run": run,
        "backend": "verl",
        "protocol": "alfworld",
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "arm": {"name": arm, "flags": flags},
        "seed": 0,
        "overrides": overrides,
        "hydra_overrides": [f"{key}={value}" for key, value in overrides.items()],
        "worker_environment": {"CCPO_ARM": arm, "CCPO_RUN": run},
        "metrics_file": f"/runs/{run}/metrics.jsonl",
    }


def test_isolation_reads_launcher_shaped_configs(tmp_path):
    from ccpo_cli.arms import load_arm

    db = open_db(tmp_path / "runs.db")
    rates = plateau(80, 0)
    flags = {name: load_arm(name).flags() for name in ("return-hard", "gigpo")}
    add_run(
        db,
        "rh",
        "return-hard",
        0,
        rates,
        config=launch_config("rh", "return-hard", flags["return-hard"]),
    )
    add_run(db, "gg", "gigpo", 0, rates, config=launch_config("gg", "gigpo", flags["gigpo"]))
    assert compare_runs(db, None).as_json()["isolation"]["differences"] == []
    add_run(
        db,
        "gg-big",
        "gigpo",
        0,
        rates,
        config=launch_config("gg-big", "gigpo", flags["gigpo"], batch=32),
    )
    differences = compare_runs(db, ["rh", "gg-big"]).as_json()["isolation"]["differences"]
    assert differences == ["config overrides.data.train_batch_size: 16 (rh) vs 32 (gg-big)"]


def test_a_matrix_run_is_compared_over_the_window_its_matrix_recorded(tmp_path):
    # The matrix compares its runs from TrainConfig.window_start (step 16 by default); compare and
    # card once averaged the same runs from 7/15 of their steps instead, another window.
    db = open_db(tmp_path / "runs.db")
    for name, recorded in (
        ("matrix-run", {"train": {"window_start": 16}}),
        ("plain-run", {"train": {}}),
    ):
        ensure_run(
            db,
            name,
            arm=ExternalArm("gigpo", "fp-gigpo"),
            seed=0,
            config=recorded,
            **{**SHARED, "total_steps": 16},
        )
        for step, rate in ((12, 40.0), (14, 50.0), (16, 60.0)):
            record_evaluation(
                db, name, step, episodes=128, successes=round(rate * 1.28), temperature=0.4
            )
    runs = {
        entry["run"]: entry["window"]
        for entry in compare_runs(db, ["matrix-run", "plain-run"]).as_json()["runs"]
    }
    assert runs["matrix-run"]["start"] == 16 and runs["matrix-run"]["steps"] == [16]
    assert "matrix" in runs["matrix-run"]["start_basis"]
    assert runs["plain-run"]["start"] == 8 and runs["plain-run"]["steps"] == [12, 14, 16]
