"""The verl path of issue 20: `ccpo publish --follow` on a verl run folder that grows, on CPU.

verl's own FSDPCheckpointManager writes a real two-rank checkpoint of a tiny Qwen2
(write_verl_checkpoint.py, as test_checkpoint_merge.py does), the run's metrics.jsonl grows in
two rounds, and the follower ingests it, merges the new `global_step_N` with verl-agent's own
merger, uploads the merged model to the loopback fake Hub (verified by sha256, tagged), and
commits the interim and then the final card. What needs a GPU (a real verl training run with
--push-to-hub) is listed in docs/publishing.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers_hub import TOKEN
from helpers_tiny_lm import save_tiny_lm

from ccpo_cli import store
from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl.checkpoint import DEFAULT_MERGED_NAME
from ccpo_cli.hub_repo import KEY_PREFIX
from ccpo_cli.store import outbox

WRITER = Path(__file__).with_name("write_verl_checkpoint.py")
REPO = "tester/ccpo-verl-tiny"
RUN = "tiny-verl-follow"
STEP = 6


def write_step(model_dir: Path, run_dir: Path, verl_home: Path, step: int) -> Path:
    step_dir = run_dir / "checkpoints" / f"global_step_{step}"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(verl_home), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [sys.executable, str(WRITER), str(model_dir), str(step_dir), "2", str(step)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return step_dir


def append_metrics(path: Path, rows: list[tuple[int, float]]) -> None:
    with path.open("a", encoding="utf-8") as handle:
        for step, rate in rows:
            handle.write(
                json.dumps({"step": step, "wall_time": 1.7e9 + step, "val/success_rate": rate})
                + "\n"
            )


def test_follow_ingests_merges_with_verls_merger_and_publishes(
    tmp_path, hub, verl_home, monkeypatch
):
    from typer.testing import CliRunner

    from ccpo_cli.cli.app import app

    arm = load_arm("return-hard")
    run_dir = tmp_path / "ccpo-runs" / RUN
    (run_dir / "checkpoints").mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    (run_dir / "config.json").write_text(
        json.dumps(
            {
                "run": RUN,
                "backend": "verl",
                "arm": {"name": arm.name, "fingerprint": arm.fingerprint},
                "model": "Qwen/Qwen2.5-0.5B-Instruct",
                "seed": 0,
                "total_steps": STEP,
                "metrics_file": str(metrics),
            }
        )
    )
    model_dir = save_tiny_lm(tmp_path / "base")
    db_path = tmp_path / "runs.db"

    def follow():
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
                "--verl-agent-home",
                str(verl_home),
                "--json",
            ],
        )

    # Round 1: three evaluations, the best (step 4) saved by verl's checkpoint manager.
    append_metrics(metrics, [(2, 0.25), (3, 0.25), (4, 0.5)])
    write_step(model_dir, run_dir, verl_home, 4)
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("4")
    first = follow()
    assert first.exit_code == 0, first.output
    merged = run_dir / "checkpoints" / "global_step_4" / DEFAULT_MERGED_NAME
    assert (merged / "model.safetensors").is_file(), "merged by verl-agent's merger"
    tagged = hub.repos[REPO].tags["step-4"]
    [weights] = [c for c in hub.history(REPO) if c.oid == tagged]
    local = hashlib.sha256((merged / "model.safetensors").read_bytes()).hexdigest()
    assert hashlib.sha256(weights.files["model.safetensors"]).hexdigest() == local
    head = hub.history(REPO)[-1]
    assert head.message.startswith(f"ccpo: interim card for {RUN}")
    assert json.loads(head.files["results/ccpo_summary.json"])["weights"]["commit"] == tagged

    # Round 2: the log reaches its last step; the final weights and card follow.
    append_metrics(metrics, [(5, 0.25), (6, 0.75)])
    write_step(model_dir, run_dir, verl_home, 6)
    (run_dir / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("6")
    second = follow()
    assert second.exit_code == 0, second.output
    repo = hub.repos[REPO]
    final = hub.history(REPO)[-1]
    assert final.message == f"ccpo: final card for {RUN}" and repo.tags["final"] == final.oid
    assert repo.tags["step-6"] != repo.tags["step-4"] and repo.private
    commits = [c for c in hub.history(REPO) if KEY_PREFIX in c.description]
    assert len({c.description for c in commits}) == len(commits)
    db = store.open_db(db_path)
    assert store.get_run(db, RUN)["status"] == "finished"
    assert all(e.state in ("done", "skipped") for e in outbox.entries(db, RUN))
