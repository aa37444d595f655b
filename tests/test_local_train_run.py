"""The local trainer end to end on the real ALFWorld engine: a short run, determinism, resume,
batch dumps through `ccpo estimate`, and the `local` agent in `ccpo eval`.

Games are generated (and planner-validated) once per module into a temp folder: 6 training and
6 held-out games, one per task type. Episodes are capped at a few turns to keep this fast.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.local import TrainConfig, train_arm
from ccpo_cli.backends.local.trainer import latest_checkpoint, load_policy
from ccpo_cli.batch_io import load_dumped_batch
from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import get_run, open_db, run_checkpoints, run_evaluations
from ccpo_cli.store.facts import run_facts

SHORT = dict(steps=2, tasks=2, group=2, eval_every=1, eval_games=4, max_steps=6, eval_max_steps=6)


@pytest.fixture(scope="module")
def game_dirs():
    from helpers_local_train import generated_games

    return {
        "train_games_dir": str(generated_games("train", 6)),
        "eval_games_dir": str(generated_games("heldout", 6)),
    }


@pytest.fixture(scope="module")
def short_run(game_dirs, tmp_path_factory):
    """`--steps 2 --tasks 2 --group 2 --eval-every 1` for return-hard, seed 0."""
    db_path = tmp_path_factory.mktemp("db") / "runs.db"
    result = train_arm(
        load_arm("return-hard"),
        "rh-s0",
        db_path,
        TrainConfig(seed=0, workers=2, dump_batches=True, **SHORT, **game_dirs),
    )
    return db_path, result


def _metrics(run_dir):
    """The lines of the training steps (the line of step 0 is the untrained evaluation's)."""
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [line for line in lines if "rollout_sha256" in line]


@pytest.mark.slow
def test_short_run_records_evaluations_with_the_arm_fingerprint(short_run):
    db_path, result = short_run
    db = open_db(db_path)
    run = get_run(db, "rh-s0")
    assert run["arm"] == "return-hard"
    assert run["arm_fingerprint"] == load_arm("return-hard").fingerprint
    assert run["backend"] == "local" and run["seed"] == 0 and run["status"] == "finished"
    evaluations = run_evaluations(db, "rh-s0")
    assert [e["step"] for e in evaluations] == [0, 1, 2]
    for evaluation in evaluations:
        assert evaluation["episodes"] == 4
        assert evaluation["temperature"] == pytest.approx(0.4)
        assert 0.0 <= evaluation["success_rate"] <= 100.0
    assert [e["step"] for e in result.evaluations] == [0, 1, 2]
    # metrics.jsonl starts with the untrained evaluation (issue 41), and every number of every
    # line is in runs.db's metrics table at the line it was written to.
    lines = [
        json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    assert [line["step"] for line in lines] == [0, 1, 2]
    assert lines[0]["val/success_rate"] == evaluations[0]["success_rate"] / 100
    from ccpo_cli.store.metrics import metric_series

    kl = metric_series(db, "rh-s0", "actor/kl")
    assert [(p["step"], p["value"], p["source_line"]) for p in kl] == [
        (line["step"], line["actor/kl"], number)
        for number, line in enumerate(lines, 1)
        if number > 1
    ]
    assert metric_series(db, "rh-s0", "val/success_rate")[0]["step"] == 0


def test_provenance_is_recorded_before_training(short_run):
    db_path, result = short_run
    run = get_run(open_db(db_path), "rh-s0")
    config = run["config"] if isinstance(run["config"], dict) else json.loads(run["config"])
    assert config["arm"]["fingerprint"] == load_arm("return-hard").fingerprint
    assert config["train"]["seed"] == 0 and config["train"]["update"]["kl_coef"] == 0.01
    # the evaluation subset is recorded as such, with its games
    assert config["eval_panel"]["games"] == 4 and config["eval_panel"]["panel_games"] == 6
    assert "subset" in config["eval_panel"]["subset"] and len(config["eval_panel"]["game_ids"]) == 4
    versions = (
        run["package_versions"]
        if isinstance(run["package_versions"], dict)
        else json.loads(run["package_versions"])
    )
    assert versions["torch"].startswith("2.") and versions["alfworld"] == "0.4.2"
    assert run["step1_rollout_hash"] == result.step1_rollout_hash
    assert len(result.step1_rollout_hash) == 64
    assert _metrics(result.run_dir)[0]["rollout_sha256"] == result.step1_rollout_hash
    # the trainer's own evaluation protocol is a recorded fact, so cards need not say "not recorded"
    assert run_facts(open_db(db_path), run["id"])["values"] == {
        "split": "heldout",
        "temperature": 0.4,
        "seed": 0,
        "episodes": 4,
        "max_steps": 6,
    }


def test_checkpoints_are_recorded_and_load_as_the_trained_policy(short_run):
    db_path, result = short_run
    checkpoints = run_checkpoints(open_db(db_path), "rh-s0")
    assert [c["step"] for c in checkpoints] == [1, 2]
    newest = latest_checkpoint(result.run_dir)
    assert newest.name == "step-000002.pt"
    policy, saved = load_policy(newest)
    assert saved["arm_fingerprint"] == load_arm("return-hard").fingerprint and saved["step"] == 2
    # two updates moved the policy away from its uniform start
    assert policy.out.weight.abs().sum() > 0


def test_training_updates_move_the_policy(short_run):
    _, result = short_run
    metrics = _metrics(result.run_dir)
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(m["train/decisions"] > 0 for m in metrics)
    assert metrics[1]["actor/kl"] >= 0.0


def test_dumped_batch_is_the_estimate_schema_and_ccpo_estimate_reproduces_its_advantages(
    short_run, tmp_path
):
    _, result = short_run
    dump = result.run_dir / "batches" / "step-000001.npz"
    loaded, trained_with = load_dumped_batch(dump)
    batch = loaded.as_mapping()
    assert {
        "uid",
        "traj_uid",
        "anchor_obs",
        "step_index",
        "env_reward",
        "is_action_valid",
        "episode_reward",
        "response_mask",
        "phi_feats",
    } <= set(batch) and trained_with is not None
    n = len(batch["uid"])
    assert batch["response_mask"].shape == (n, 1) and batch["phi_feats"].shape == (n, 32)
    assert len(set(batch["traj_uid"].tolist())) == 4  # 2 tasks x 2 rollouts
    # rows of a trajectory are in time order
    for traj in set(batch["traj_uid"].tolist()):
        steps = batch["step_index"][batch["traj_uid"] == traj]
        assert steps.tolist() == list(range(len(steps)))
    # The dump itself is `ccpo estimate`'s input (the stored advantages are not batch keys).
    out = tmp_path / "out.json"
    outcome = CliRunner().invoke(
        app, ["estimate", "--arm", "return-hard", "--input", str(dump), "--output", str(out)]
    )
    assert outcome.exit_code == 0, outcome.output
    estimated = np.asarray(json.loads(out.read_text())["advantages"], dtype=np.float64)[:, 0]
    np.testing.assert_allclose(estimated, trained_with, rtol=1e-6, atol=1e-6)


@pytest.mark.slow
def test_step1_rollouts_are_identical_across_arms_and_differ_across_seeds(
    short_run, game_dirs, tmp_path
):
    _, rh = short_run
    one_step = dict(SHORT, steps=1, eval_every=0)
    grpo = train_arm(
        load_arm("grpo"),
        "grpo-s0",
        tmp_path / "a.db",
        TrainConfig(seed=0, workers=0, **one_step, **game_dirs),
    )
    fbjw = train_arm(
        load_arm("return-hard-fbjw"),
        "fbjw-s0",
        tmp_path / "a.db",
        TrainConfig(seed=0, workers=2, **one_step, **game_dirs),
    )
    other = train_arm(
        load_arm("grpo"),
        "grpo-s1",
        tmp_path / "a.db",
        TrainConfig(seed=1, workers=2, **one_step, **game_dirs),
    )
    assert grpo.step1_rollout_hash == rh.step1_rollout_hash == fbjw.step1_rollout_hash
    assert other.step1_rollout_hash != rh.step1_rollout_hash


@pytest.mark.slow
def test_resume_continues_exactly_where_an_uninterrupted_run_would_be(
    short_run, game_dirs, tmp_path
):
    _, uninterrupted = short_run
    db_path = tmp_path / "resume.db"
    first = train_arm(
        load_arm("return-hard"),
        "rh-resume",
        db_path,
        TrainConfig(seed=0, workers=2, **dict(SHORT, steps=1), **game_dirs),
    )
    assert first.last_step == 1
    with pytest.raises(InvalidInput, match="resume"):
        train_arm(
            load_arm("return-hard"),
            "rh-resume",
            db_path,
            TrainConfig(seed=0, workers=2, **SHORT, **game_dirs),
        )
    with pytest.raises(InvalidInput, match="belongs to run 'rh-resume'"):
        train_arm(
            load_arm("grpo"),
            "rh-resume-other",
            db_path,
            TrainConfig(seed=0, workers=2, **SHORT, **game_dirs),
            resume=True,
            run_dir=first.run_dir,
        )
    with pytest.raises(InvalidInput, match="arm: return-hard .* recorded, grpo"):
        train_arm(
            load_arm("grpo"),
            "rh-resume",
            db_path,
            TrainConfig(seed=0, workers=2, **SHORT, **game_dirs),
            resume=True,
        )
    second = train_arm(
        load_arm("return-hard"),
        "rh-resume",
        db_path,
        TrainConfig(seed=0, workers=2, **SHORT, **game_dirs),
        resume=True,
    )
    assert second.last_step == 2
    resumed_step2 = _metrics(second.run_dir)[-1]
    assert resumed_step2["step"] == 2
    assert resumed_step2["rollout_sha256"] == _metrics(uninterrupted.run_dir)[1]["rollout_sha256"]
    assert [e["step"] for e in run_evaluations(open_db(db_path), "rh-resume")] == [0, 1, 2]


def test_local_agent_plays_ccpo_eval_from_a_checkpoint(short_run, game_dirs):
    db_path, result = short_run
    outcome = CliRunner().invoke(
        app,
        [
            "--db",
            str(db_path),
            "eval",
            "--run",
            "rh-s0-eval",
            "--agent",
            "local",
            "--model",
            str(result.run_dir),
            "--games",
            game_dirs["eval_games_dir"],
            "--episodes",
            "3",
            "--temperature",
            "0.4",
            "--workers",
            "0",
            "--json",
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    document = json.loads(outcome.stdout)
    assert document["agent"] == "local"
    assert document["evaluations"][0]["episodes"] == 3


def test_bad_options_are_usage_errors(game_dirs, tmp_path):
    from ccpo_cli.errors import UsageError

    with pytest.raises(UsageError, match="--group"):
        train_arm(
            load_arm("grpo"),
            "bad",
            tmp_path / "b.db",
            TrainConfig(seed=0, **dict(SHORT, group=0), **game_dirs),
        )
    with pytest.raises(UsageError, match="takes an Arm"):
        train_arm("grpo", "bad", tmp_path / "b.db", TrainConfig(seed=0, **SHORT, **game_dirs))
    with pytest.raises(UsageError, match="takes a TrainConfig"):
        train_arm(load_arm("grpo"), "bad", tmp_path / "b.db", dict(seed=0, **SHORT, **game_dirs))
    with pytest.raises(UsageError, match="--eval-from"):
        train_arm(
            load_arm("grpo"),
            "bad",
            tmp_path / "b.db",
            TrainConfig(seed=0, eval_from=3, **SHORT, **game_dirs),
        )


@pytest.mark.slow
def test_evaluations_can_start_later_and_always_include_the_last_step(game_dirs, tmp_path):
    db_path = tmp_path / "runs.db"
    schedule = dict(SHORT, steps=5, eval_every=2, eval_from=2)
    result = train_arm(
        load_arm("grpo"), "late", db_path, TrainConfig(seed=1, workers=0, **schedule, **game_dirs)
    )
    assert [e["step"] for e in run_evaluations(open_db(db_path), "late")] == [2, 4, 5]
    assert [e["step"] for e in result.evaluations] == [2, 4, 5]


@pytest.mark.slow
def test_ccpo_train_short_run_on_the_shipped_games_records_evaluations(tmp_path):
    """The acceptance run: `ccpo train --arm return-hard --steps 2 --tasks 2 --group 2 --eval-every 1`
    (plus a 4-game evaluation subset and a short turn limit) on the shipped pool and panel."""
    db_path = tmp_path / "runs.db"
    outcome = CliRunner().invoke(
        app,
        [
            "--db",
            str(db_path),
            "train",
            "--arm",
            "return-hard",
            "--backend",
            "local",
            "--run",
            "ci",
            "--steps",
            "2",
            "--tasks",
            "2",
            "--group",
            "2",
            "--eval-every",
            "1",
            "--eval-games",
            "4",
            "--max-steps",
            "6",
            "--json",
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    (run_doc,) = json.loads(outcome.stdout)["runs"]
    assert (
        run_doc["fingerprint"] == load_arm("return-hard").fingerprint and run_doc["last_step"] == 2
    )
    db = open_db(db_path)
    run = get_run(db, "ci")
    assert run["arm_fingerprint"] == load_arm("return-hard").fingerprint
    evaluations = run_evaluations(db, "ci")
    assert [e["step"] for e in evaluations] == [0, 1, 2]
    assert all(e["episodes"] == 4 for e in evaluations)
    config = run["config"] if isinstance(run["config"], dict) else json.loads(run["config"])
    assert config["training_pool"]["games"] == 600 and config["eval_panel"]["panel_games"] == 128


def test_pruning_keeps_the_newest_checkpoints_and_the_best_evaluated_one(tmp_path):
    from ccpo_cli.backends.local.trainer import checkpoints_to_remove
    from ccpo_cli.store import best_evaluation

    found = [tmp_path / f"step-{step:06d}.pt" for step in (10, 20, 30, 40, 50)]
    evaluations = [
        {"id": 1, "step": 0, "success_rate": 5.0},
        {"id": 2, "step": 20, "success_rate": 80.0},
        {"id": 3, "step": 30, "success_rate": 80.0},
        {"id": 4, "step": 50, "success_rate": 60.0},
    ]
    best = best_evaluation(evaluations)["step"]
    assert best == 20  # the earliest of the tied best, as compare picks it
    removed = checkpoints_to_remove(list(reversed(found)), best)
    assert [path.name for path in removed] == ["step-000010.pt", "step-000030.pt"]
    # the best among the newest, or no evaluation yet: only the newest two stay
    assert [p.name for p in checkpoints_to_remove(found, 50)] == [
        "step-000010.pt",
        "step-000020.pt",
        "step-000030.pt",
    ]
    assert best_evaluation([]) is None
    assert len(checkpoints_to_remove(found, None)) == 3
