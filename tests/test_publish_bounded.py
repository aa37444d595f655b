"""Memory and time stay bounded on every hostile answer the publishing cases of issue 42 meet
(acceptance): `ccpo publish --follow` in a child process under a 500 MB address-space limit
(`ulimit -v`), against the loopback fake Hub answering endlessly, trickling, silently or with
a repository that turned public, ends within its deadline with one line and its exit code,
never a MemoryError or a traceback. (The token sources are tests/test_publish_token_bounds.py.)"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

import pytest
from helpers_hostile import REPO_ROOT
from helpers_publishing import follow_args, local_runs

MEMORY_LIMIT = 500 * 1024 * 1024
DEADLINE_S = 8
# The command's deadline plus start-up and the last call's own bound; a hang is the failure.
WALL_LIMIT_S = 90


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def bounded_follow(db_path, endpoint, cwd):
    args = follow_args(db_path, endpoint)
    args[args.index("--deadline") + 1] = str(DEADLINE_S)
    args[args.index("--timeout") + 1] = "2"
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "ccpo_cli", *args],
        cwd=cwd,
        env=dict(
            os.environ,
            PYTHONPATH=str(REPO_ROOT),
            HF_HOME=str(cwd / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
        ),
        capture_output=True,
        text=True,
        preexec_fn=_limited,
        timeout=WALL_LIMIT_S,
        check=False,
    )
    return completed, time.monotonic() - started


HOSTILE = {
    "endless commit list": dict(
        kind="endless", method="GET", path="/commits/", seconds=60, times=50
    ),
    "trickling repository info": dict(
        kind="trickle", method="GET", path="/api/models/", seconds=60, interval=0.5, times=50
    ),
    "silent commits": dict(kind="silent", method="POST", path="/commit/", seconds=60, times=50),
    "huge error answers": dict(
        kind="raw",
        method="POST",
        path="/commit/",
        status=500,
        raw=b"x" * (64 * 1024 * 1024),
        times=50,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(HOSTILE))
def test_a_hostile_hub_ends_a_follow_within_its_deadline_and_memory(tmp_path, hub, fault):
    db_path = local_runs(tmp_path)
    options = dict(HOSTILE[fault])
    hub.inject(options.pop("kind"), **options)
    completed, took = bounded_follow(db_path, hub.endpoint, tmp_path)
    assert "Traceback" not in completed.stderr and "MemoryError" not in completed.stderr, (
        completed.stderr
    )
    assert completed.returncode in (0, 4), (completed.returncode, completed.stderr)
    print(f"{fault}: exit {completed.returncode} after {took:.1f} s")


def test_a_repository_turned_public_ends_a_follow_with_exit_3_under_the_limit(tmp_path, hub):
    db_path = local_runs(tmp_path)
    hub.create_public = True
    completed, _ = bounded_follow(db_path, hub.endpoint, tmp_path)
    assert completed.returncode == 3, completed.stderr
    assert "public" in completed.stderr and "Traceback" not in completed.stderr
