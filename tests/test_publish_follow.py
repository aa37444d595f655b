"""`ccpo publish --follow` (issue 20) in the main environment: a local run pushed after the fact,
and a verl run folder that grows, merged by a stand-in with the merger's command line (the real
verl-agent merger on a checkpoint of verl's own checkpoint manager is
tests/verl_integration/test_push_follow.py, which runs in .venv-verl)."""

from __future__ import annotations

import json

import pytest
from helpers_hub import TOKEN
from test_verl_checkpoint import merger_calls, stand_in_home, step_folder, tiny_model  # noqa: F401 - fixtures
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl.preflight import prune_checkpoints
from ccpo_cli.cli.app import app
from ccpo_cli.hub_repo import KEY_PREFIX
from ccpo_cli.store import outbox

REPO = "tester/ccpo-verl-follow"
RUN = "verl-run"


def append_metrics(path, rows):
    with path.open("a", encoding="utf-8") as handle:
        for step, rate in rows:
            handle.write(
                json.dumps({"step": step, "wall_time": 1.7e9 + step, "val/success_rate": rate})
                + "\n"
            )


def follow(db_path, run_dir, hub, *extra):
    return CliRunner().invoke(
        app,
        [
            "--db",
            str(db_path),
            "publish",
            "--follow",
            RUN,
            "--repo",
            REPO,
            "--run-dir",
            str(run_dir),
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--window-start",
            "0",
            "--license",
            "apache-2.0",
            "--once",
            "--json",
            *extra,
        ],
    )


@pytest.mark.usefixtures("stand_in_home")
def test_follow_a_growing_verl_run_folder(tmp_path, hub):
    arm = load_arm("return-hard")
    checkpoint = step_folder(tmp_path, step=4)
    run_dir = checkpoint.parent.parent
    metrics = run_dir / "metrics.jsonl"
    (run_dir / "config.json").write_text(
        json.dumps(
            {
                "run": RUN,
                "backend": "verl",
                "arm": {"name": arm.name, "fingerprint": arm.fingerprint},
                "model": "Qwen/Qwen2.5-0.5B-Instruct",
                "seed": 0,
                "total_steps": 6,
                "metrics_file": str(metrics),
            }
        )
    )
    tracker = run_dir / "checkpoints" / "latest_checkpointed_iteration.txt"
    db_path = tmp_path / "runs.db"

    append_metrics(metrics, [(2, 0.25), (3, 0.25), (4, 0.5)])
    tracker.write_text("4")
    first = follow(db_path, run_dir, hub)
    assert first.exit_code == 0, first.output
    assert len(merger_calls(tmp_path)) == 1
    repo = hub.repos[REPO]
    [weights] = [c for c in hub.history(REPO) if c.oid == repo.tags["step-4"]]
    assert "model.safetensors" in weights.files and "ccpo-merge.json" in weights.files
    head = hub.history(REPO)[-1]
    assert head.message == f"ccpo: interim card for {RUN} (step 4)"
    assert json.loads(head.files["results/ccpo_summary.json"])["weights"]["commit"] == weights.oid

    again = follow(db_path, run_dir, hub)  # nothing new: nothing sent
    assert again.exit_code == 0 and len(hub.history(REPO)) == len(repo.branches["main"])
    commits_before = len(hub.commits_by_ccpo(REPO))
    assert json.loads(again.stdout)["done"] == []

    append_metrics(metrics, [(5, 0.25), (6, 0.75)])
    step_folder(tmp_path, step=6)
    tracker.write_text("6")
    second = follow(db_path, run_dir, hub)
    assert second.exit_code == 0, second.output
    assert len(hub.commits_by_ccpo(REPO)) > commits_before, second.output
    final = hub.history(REPO)[-1]
    assert final.message == f"ccpo: final card for {RUN}" and repo.tags["final"] == final.oid
    assert repo.private and repo.tags["step-6"] != repo.tags["step-4"]
    summary = json.loads(final.files["results/ccpo_summary.json"])
    assert summary["weights"] == {
        "repo_id": REPO,
        "commit": repo.tags["step-6"],
        "revision": "step-6",
        "step": 6,
    }
    ours = [c for c in hub.history(REPO) if KEY_PREFIX in c.description]
    assert len({c.description for c in ours}) == len(ours)
    db = store.open_db(db_path)
    assert store.get_run(db, RUN)["status"] == "finished"
    assert all(e.state in ("done", "skipped") for e in outbox.entries(db, RUN))


def test_a_checkpoint_waiting_for_its_upload_is_not_pruned(tmp_path):
    for step in (2, 4, 6):
        step_folder(tmp_path, step=step)
    root = tmp_path / "run" / "checkpoints"
    (root / "latest_checkpointed_iteration.txt").write_text("6")
    removed = prune_checkpoints(root, best_step=None, keep=frozenset({2}))
    assert [path.name for path in removed] == ["global_step_4"]
    assert (root / "global_step_2").is_dir() and (root / "global_step_6").is_dir()


def test_follow_needs_a_run_or_a_run_folder(tmp_path, hub):
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "publish",
            "--follow",
            "nobody",
            "--repo",
            REPO,
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--once",
        ],
    )
    assert result.exit_code == 3 and "no run named 'nobody'" in result.output
    both = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "publish",
            "--follow",
            "a",
            "--run",
            "a",
            "--repo",
            REPO,
        ],
    )
    assert both.exit_code == 2 and "not both" in both.output
