"""A rollout worker killed while `ccpo train` runs ends the run within seconds with one line
naming the worker and the signal, exit 1, the run recorded as stopped (not failed) and resumable
from its last checkpoint; it used to hang forever.

Asked for in issue 42, case 7.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_hostile import REPO_ROOT

from ccpo_cli.store import get_run, open_db


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@pytest.mark.slow
def test_a_killed_rollout_worker_ends_train_with_one_line_and_a_resumable_run(tmp_path):
    db_path = tmp_path / "runs.db"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS="200")
    trainer = subprocess.Popen(
        [sys.executable, "-m", "ccpo_cli", "--db", str(db_path), "train", "--arm", "grpo",
         "--backend", "local", "--run", "w0", "--steps", "400", "--tasks", "2", "--group", "2",
         "--eval-every", "0", "--max-steps", "6", "--workers", "2",
        ],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        metrics = tmp_path / "ccpo-runs" / "w0" / "metrics.jsonl"
        deadline = time.monotonic() + 240  # a guard against a hang, not a timing assertion
        while not (metrics.exists() and metrics.stat().st_size > 0):
            assert trainer.poll() is None, trainer.communicate()
            assert time.monotonic() < deadline, "the trainer never made a step"
            time.sleep(0.2)
        workers = [pid for pid in _children(trainer.pid) if "ccpo_cli" in _command_line(pid)]
        assert workers, "no rollout worker found"
        os.kill(workers[0], signal.SIGKILL)
        _, stderr = trainer.communicate(timeout=120)  # it used to wait forever here
    finally:
        if trainer.poll() is None:
            trainer.kill()
            trainer.wait()
    assert trainer.returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in stderr, stderr
    assert "rollout worker" in errors[0] and "killed by signal 9" in errors[0], errors[0]
    assert "ccpo train --resume" in errors[0], errors[0]
    run = get_run(open_db(db_path), "w0")
    assert run["status"] == "stopped" and run["last_step"] >= 1
