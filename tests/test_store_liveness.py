"""store/liveness.py and the run-folder lock, without training: when a recorded `running` run is
shown as `interrupted`, how failures are recorded and read, and the lock's rules."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys

import pytest

from ccpo_cli.backends.local.ownership import RunLock, check_folder, read_identity, write_identity
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import ensure_run, get_run, list_runs, open_db, update_run_state
from ccpo_cli.store.liveness import (
    ProcessOwner,
    annotate_runs,
    end_session,
    failed_runs,
    live_status_of,
    record_failure,
    run_failure,
    start_session,
)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.fixture
def db(tmp_path):
    database = open_db(tmp_path / "runs.db")
    ensure_run(database, "r", backend="local", status="running", total_steps=10)
    update_run_state(database, "r", last_step=4)
    return database


def _status(db) -> dict:
    return annotate_runs(db, list_runs(db))[0]


def test_a_run_without_a_liveness_row_keeps_its_recorded_status(db):
    assert _status(db)["status"] == "running" and "recorded_status" not in _status(db)


def test_a_live_trainer_on_this_host_is_running(db):
    start_session(db, "r", ProcessOwner.this_process())
    assert _status(db)["status"] == "running"


def test_a_dead_trainer_on_this_host_is_interrupted_with_its_last_step(db):
    here = ProcessOwner.this_process()
    start_session(
        db, "r", ProcessOwner(pid=_dead_pid(), host=here.host, session="s", boot_id=here.boot_id)
    )
    shown = _status(db)
    assert (shown["status"], shown["recorded_status"]) == ("interrupted", "running")
    assert "is no longer running; last step 4" in shown["interrupted_because"]


def test_a_reused_pid_is_not_taken_for_the_trainer(db):
    here = ProcessOwner.this_process()
    assert here.start_ticks is not None  # Linux: from /proc/<pid>/stat
    start_session(
        db,
        "r",
        ProcessOwner(
            pid=os.getpid(),
            host=here.host,
            session="s",
            boot_id=here.boot_id,
            start_ticks=here.start_ticks - 1,
        ),
    )
    assert _status(db)["status"] == "interrupted"


def test_another_hosts_trainer_is_judged_by_its_heartbeat(db):
    elsewhere = ProcessOwner(pid=1, host="another-machine", session="s")
    start_session(db, "r", elsewhere, every_s=30.0)
    row = dict(db["run_liveness"].get(get_run(db, "r")["id"]))
    recent = datetime.datetime.fromisoformat(row["heartbeat_at"]) + datetime.timedelta(minutes=4)
    late = datetime.datetime.fromisoformat(row["heartbeat_at"]) + datetime.timedelta(minutes=6)
    run_row = {"status": "running", "last_step": 4}
    assert live_status_of(run_row, row, now=recent).status == "running"  # 8 beats missed: not yet
    stale = live_status_of(run_row, row, now=late)
    assert stale.status == "interrupted" and "no heartbeat" in stale.reason


def test_an_ended_session_of_a_run_still_recorded_running_is_interrupted(db):
    owner = ProcessOwner.this_process()
    start_session(db, "r", owner)
    end_session(db, "r", owner.session)
    assert _status(db)["status"] == "interrupted"


def test_finished_and_failed_runs_are_shown_as_recorded(db):
    owner = ProcessOwner(pid=_dead_pid(), host=ProcessOwner.this_process().host, session="s")
    start_session(db, "r", owner)
    update_run_state(db, "r", status="finished")
    assert _status(db)["status"] == "finished"


def test_failures_are_recorded_and_read_back(db):
    assert run_failure(db, "r") is None and failed_runs(db) == {}
    record_failure(
        db,
        "r",
        "run 'r' stopped at step 5: non-finite loss",
        step=5,
        quantity="loss",
        value=float("nan"),
    )
    assert run_failure(db, "r") is None  # recorded, but the run's status is not failed
    update_run_state(db, "r", status="failed")
    failure = run_failure(db, "r")
    assert (failure.step, failure.quantity, failure.value) == (5, "loss", "nan")
    assert failed_runs(db) == {"r": failure}
    assert _status(db)["failure"]["message"].startswith("run 'r' stopped at step 5")


# -- the folder and its lock ---------------------------------------------------------------------


def test_the_lock_refuses_a_second_holder_and_is_free_after_release(tmp_path):
    folder = tmp_path / "run"
    first = RunLock(folder, "r", ProcessOwner.this_process(), log=print).acquire()
    with pytest.raises(InvalidInput, match=f"being trained by pid {os.getpid()}"):
        RunLock(folder, "r", ProcessOwner.this_process(), log=print).acquire()
    first.release()
    assert (folder / "trainer.lock").read_text() == ""
    RunLock(folder, "r", ProcessOwner.this_process(), log=print).acquire().release()


def test_a_forked_child_does_not_keep_the_lock(tmp_path):
    folder = tmp_path / "run"
    lock = RunLock(folder, "r", ProcessOwner.this_process(), log=print).acquire()
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child lives on after the parent lets go, like an orphaned rollout worker
        os.close(write_end)
        os.read(read_end, 1)
        os._exit(0)
    os.close(read_end)
    try:
        lock.release()
        RunLock(folder, "r", ProcessOwner.this_process(), log=print).acquire().release()
    finally:
        os.write(write_end, b"x")
        os.close(write_end)
        os.waitpid(child, 0)


def test_a_lock_naming_a_dead_process_is_taken_over(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    dead = ProcessOwner(pid=_dead_pid(), host=ProcessOwner.this_process().host, session="old")
    (folder / "trainer.lock").write_text(json.dumps(dead.as_dict()))
    said: list[str] = []
    RunLock(folder, "r", ProcessOwner.this_process(), log=said.append).acquire().release()
    assert said == [
        f"took over the lock of run 'r' from {dead.describe()}, which is no longer running"
    ]


def test_folder_identity_rules(tmp_path):
    db = open_db(tmp_path / "runs.db")
    ensure_run(db, "a", backend="local")
    recorded = get_run(db, "a")
    folder = tmp_path / "ccpo-runs" / "a"
    check_folder(folder, "a", tmp_path / "runs.db", recorded)  # absent: a fresh start
    folder.mkdir(parents=True)
    write_identity(folder, "a", recorded["uid"], tmp_path / "runs.db")
    assert read_identity(folder).uid == recorded["uid"]
    check_folder(folder, "a", tmp_path / "runs.db", recorded)
    with pytest.raises(InvalidInput, match="belongs to run 'a'"):
        check_folder(folder, "b", tmp_path / "runs.db", None)
    with pytest.raises(InvalidInput, match="does not hold"):
        check_folder(folder, "a", tmp_path / "other.db", None)
    with pytest.raises(InvalidInput, match="another run named 'a'"):
        check_folder(folder, "a", tmp_path / "runs.db", dict(recorded, uid="someone-else"))
    stray = tmp_path / "stray"
    stray.mkdir()
    (stray / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(InvalidInput, match="holds files but no run.json"):
        check_folder(stray, "a", tmp_path / "runs.db", recorded)
    # A folder written before run.json existed is accepted as the one runs.db records for the run.
    check_folder(stray, "a", tmp_path / "runs.db", dict(recorded, config={"run_dir": str(stray)}))
    (folder / "run.json").write_text("not json")
    with pytest.raises(InvalidInput, match="not a ccpo run identity record"):
        check_folder(folder, "a", tmp_path / "runs.db", recorded)
