"""A run's folder belongs to its run, one trainer at a time, a resume is
a continuation and nothing else, and a killed trainer shows as interrupted.

The runs are `ccpo train --backend local` on the shipped games with a tiny recipe (1 task x 2
rollouts, 4-turn episodes, 2-game evaluations, in-process rollouts). One reference run is
trained per module and copied (folder and database) for each test that could change it.

Asked for in issue 21, cases 1-4 and 6.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_hostile import REPO_ROOT, assert_refused, db_state, invoke

from ccpo_cli.store import get_run, open_db, run_evaluations

TINY = [
    "--arm",
    "grpo",
    "--backend",
    "local",
    "--tasks",
    "1",
    "--group",
    "2",
    "--eval-every",
    "1",
    "--eval-games",
    "2",
    "--max-steps",
    "4",
    "--workers",
    "0",
]


def train(db: Path, *args):
    return invoke("--db", db, "train", *TINY, *args)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the sha256 of its bytes (a byte-identical check)."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def metric_steps(folder: Path) -> list[int]:
    return [
        json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A finished 2-step run `ref` (evaluations at steps 0, 1, 2)."""
    root = tmp_path_factory.mktemp("reference")
    result = train(root / "runs.db", "--run", "ref", "--steps", "2")
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def copy_of_reference(reference, tmp_path):
    """The reference database and its run folder, copied where this test may change them."""
    with (
        sqlite3.connect(reference / "runs.db") as source,
        sqlite3.connect(tmp_path / "runs.db") as target,
    ):
        source.backup(target)
    shutil.copytree(reference / "ccpo-runs", tmp_path / "ccpo-runs")
    return tmp_path


@pytest.mark.slow
def test_the_run_folder_records_whose_it_is(reference):
    identity = json.loads((reference / "ccpo-runs" / "ref" / "run.json").read_text())
    run = get_run(open_db(reference / "runs.db"), "ref")
    assert (identity["run"], identity["uid"]) == ("ref", run["uid"])
    assert Path(identity["db"]) == (reference / "runs.db").resolve()


@pytest.mark.slow
def test_resume_of_another_runs_folder_is_refused_and_leaves_it_byte_identical(copy_of_reference):
    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    before, db_before = snapshot(folder), db_state(root / "runs.db")
    result = train(root / "runs.db", "--run", "B", "--steps", "4", "--resume", folder)
    assert_refused(result, 3, str(folder), "belongs to run 'ref'", "not to run 'B'")
    assert snapshot(folder) == before
    assert db_state(root / "runs.db")[1] == db_before[1]  # no run B, nothing else changed either
    assert not (root / "ccpo-runs" / "B").exists()


@pytest.mark.slow
def test_a_mistyped_resume_path_is_an_error_and_creates_nothing(copy_of_reference):
    root = copy_of_reference
    missing = root / "ccpo-runs" / "reff"
    result = train(root / "runs.db", "--run", "ref", "--steps", "3", "--resume", missing)
    assert_refused(result, 3, "--resume", "no such run folder")
    assert not missing.exists()
    assert [e["step"] for e in run_evaluations(open_db(root / "runs.db"), "ref")] == [0, 1, 2]


@pytest.mark.slow
def test_resume_with_another_panel_or_tasks_is_refused_listing_every_difference(copy_of_reference):
    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    before, db_before = snapshot(folder), db_state(root / "runs.db")
    result = train(
        root / "runs.db",
        "--run",
        "ref",
        "--steps",
        "4",
        "--resume",
        folder,
        "--eval-games",
        "4",
        "--tasks",
        "2",
    )
    line = assert_refused(
        result, 3, "run 'ref'", "eval_games: 2 recorded, 4 now", "tasks: 1 recorded, 2 now"
    )
    assert "steps" not in line.split("measures:")[1].split(";")[0]  # more steps is no difference
    assert snapshot(folder) == before and db_state(root / "runs.db")[1] == db_before[1]


@pytest.mark.slow
def test_resume_with_fewer_steps_is_refused_instead_of_recorded_as_4_of_2(copy_of_reference):
    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    result = train(root / "runs.db", "--run", "ref", "--steps", "1", "--resume", folder)
    assert_refused(result, 3, "steps: 2 recorded, 1 now")
    run = get_run(open_db(root / "runs.db"), "ref")
    assert (run["last_step"], run["total_steps"]) == (2, 2)


@pytest.mark.slow
def test_resume_with_more_steps_and_other_workers_continues_and_records_the_change(
    copy_of_reference,
):
    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    # Without --run and --seed the folder says which run it is; left-out options are the recorded ones.
    result = invoke(
        "--db",
        root / "runs.db",
        "train",
        "--arm",
        "grpo",
        "--backend",
        "local",
        "--resume",
        folder,
        "--steps",
        "3",
        "--workers",
        "1",
    )
    assert result.exit_code == 0, result.output
    db = open_db(root / "runs.db")
    run = get_run(db, "ref")
    assert (run["last_step"], run["total_steps"], run["status"]) == (3, 3, "finished")
    assert [e["step"] for e in run_evaluations(db, "ref")] == [0, 1, 2, 3]
    assert metric_steps(folder) == [0, 1, 2, 3]  # 0: the untrained evaluation
    (resumed,) = run["config"]["resumes"]
    assert resumed["at_step"] == 2 and resumed["from_checkpoint"] is True
    assert resumed["changed"] == {"steps": {"from": 2, "to": 3}, "workers": {"from": 0, "to": 1}}
    assert json.loads((folder / "config.json").read_text())["resumes"] == run["config"]["resumes"]


@pytest.mark.slow
def test_a_second_trainer_is_refused_naming_the_owner(copy_of_reference):
    from ccpo_cli.backends.local.ownership import RunLock
    from ccpo_cli.store.liveness import ProcessOwner

    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    owner = ProcessOwner.this_process()
    with RunLock(folder, "ref", owner, log=print):
        before = snapshot(folder)
        result = train(root / "runs.db", "--run", "ref", "--steps", "3", "--resume", folder)
        assert_refused(
            result,
            3,
            "run 'ref' is being trained by",
            f"pid {os.getpid()}",
            "refusing to train it twice",
        )
        assert snapshot(folder) == before
    assert get_run(open_db(root / "runs.db"), "ref")["last_step"] == 2


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.slow
def test_a_stale_lock_of_a_dead_trainer_is_taken_over_saying_so(copy_of_reference):
    from ccpo_cli.store.liveness import ProcessOwner

    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    dead = ProcessOwner(
        pid=_dead_pid(), host=ProcessOwner.this_process().host, session="gone", started_at="then"
    )
    (folder / "trainer.lock").write_text(json.dumps(dead.as_dict()))
    result = train(root / "runs.db", "--run", "ref", "--steps", "3", "--resume", folder)
    assert result.exit_code == 0, result.output
    assert f"took over the lock of run 'ref' from pid {dead.pid}" in result.stderr
    assert get_run(open_db(root / "runs.db"), "ref")["last_step"] == 3
    assert (folder / "trainer.lock").read_text() == ""  # released at the end


@pytest.mark.slow
def test_a_lock_of_another_host_is_refused_until_its_heartbeat_stops(copy_of_reference):
    from ccpo_cli.store.liveness import ProcessOwner, start_session

    root = copy_of_reference
    folder = root / "ccpo-runs" / "ref"
    elsewhere = ProcessOwner(
        pid=4242, host="another-machine", session="s-elsewhere", started_at="then"
    )
    (folder / "trainer.lock").write_text(json.dumps(elsewhere.as_dict()))
    before = snapshot(folder)
    refused = train(root / "runs.db", "--run", "ref", "--steps", "3", "--resume", folder)
    assert_refused(refused, 3, "locked by pid 4242 on host another-machine", "delete")
    assert snapshot(folder) == before
    # runs.db shows that trainer beating last long ago: it is gone, and the lock is taken over.
    db = open_db(root / "runs.db")
    start_session(db, "ref", elsewhere)
    old = "2020-01-01T00:00:00.000000+00:00"
    db.execute("UPDATE run_liveness SET heartbeat_at = ?", [old])
    taken = train(root / "runs.db", "--run", "ref", "--steps", "3", "--resume", folder)
    assert taken.exit_code == 0, taken.output
    assert "took over the lock of run 'ref' from pid 4242 on host another-machine" in taken.stderr


def _child_train(db: Path, run: str, steps: int, *extra: str) -> subprocess.Popen:
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS="200")
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ccpo_cli",
            "--db",
            str(db),
            "train",
            *TINY,
            "--run",
            run,
            "--steps",
            str(steps),
            *extra,
        ],
        cwd=db.parent,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_two_concurrent_trainers_of_one_run_leave_one_clean_record(tmp_path):
    db = tmp_path / "runs.db"
    open_db(db)  # both start against an existing database
    first, second = _child_train(db, "cc", 3), _child_train(db, "cc", 3)
    outcomes = [(child.wait(timeout=600), *child.communicate()) for child in (first, second)]
    codes = sorted(code for code, _, _ in outcomes)
    assert codes == [0, 3], outcomes
    (loser_stderr,) = [err for code, _, err in outcomes if code == 3]
    lines = [line for line in loser_stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in loser_stderr, loser_stderr
    assert "is being trained by pid" in lines[0] or "already has checkpoints" in lines[0], lines[0]
    folder = tmp_path / "ccpo-runs" / "cc"
    assert metric_steps(folder) == [0, 1, 2, 3]  # 0: the untrained evaluation
    assert not list(folder.rglob("*.partial"))
    assert [e["step"] for e in run_evaluations(open_db(db), "cc")] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_killed_trainer_shows_as_interrupted_with_its_last_step(tmp_path):
    db = tmp_path / "runs.db"
    child = _child_train(db, "killed", 500, "--eval-every", "0")
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:  # wait until runs.db records a step
        time.sleep(0.5)
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
                row = connection.execute(
                    "SELECT last_step FROM runs WHERE name = 'killed'"
                ).fetchone()
        except sqlite3.OperationalError:  # not created or not migrated yet
            continue
        if row and row[0]:
            break
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    listed = invoke("--db", db, "runs", "list", "--json")
    assert listed.exit_code == 0, listed.output
    (run,) = json.loads(listed.stdout)["runs"]
    assert run["status"] == "interrupted" and run["recorded_status"] == "running"
    assert run["last_step"] >= 1 and f"last step {run['last_step']}" in run["interrupted_because"]
    assert f"pid {child.pid}" in run["interrupted_because"]
    shown = invoke("--db", db, "runs", "show", "killed")
    assert shown.exit_code == 0 and "interrupted" in shown.stdout
