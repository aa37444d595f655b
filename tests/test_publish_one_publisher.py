"""One publisher per repository and run (issue 42, case 4): two followers of one database with
different `--staging` folders, two copies of one database, and a commit the Hub applies after
its process was killed each leave every checkpoint and card on the Hub once, and runs.db's tags
name the Hub's commits. The followers are real `ccpo publish --follow` processes against the
loopback fake Hub; a kill is a SIGKILL at a chosen request, which the Hub then still applies."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading

import pytest
from helpers_hostile import invoke
from helpers_publishing import (
    REPO,
    RUN,
    assert_once_and_tags_agree,
    ccpo_commits,
    follow_args,
    follower,
    local_runs,
)

from ccpo_cli import store
from ccpo_cli.store import outbox

# Every follower ends well within this (it has a 60 s --deadline; a hang is a failure).
WAIT_S = 120


def finish(process) -> tuple[int, str]:
    out, err = process.communicate(timeout=WAIT_S)
    return process.returncode, out + err


def expected_messages() -> list[str]:
    return [
        f"ccpo: best checkpoint so far of {RUN} at step 115",
        f"ccpo: final weights of {RUN} at step 150",
        f"ccpo: final card for {RUN}",
    ]


def test_two_followers_with_different_staging_folders_publish_once(tmp_path, hub):
    db_path = local_runs(tmp_path)
    # Every commit is slow to be applied, so the two followers are in flight together.
    hub.inject("delay", method="POST", path="/commit/", seconds=0.4, times=20)
    first = follower(db_path, hub.endpoint, "--staging", str(tmp_path / "a"), cwd=tmp_path)
    second = follower(db_path, hub.endpoint, "--staging", str(tmp_path / "b"), cwd=tmp_path)
    for process in (first, second):
        code, output = finish(process)
        assert code in (0, 3), output  # 3: it found the outbox's entries taken by the other
    assert [c.message for c in ccpo_commits(hub)] == expected_messages()
    assert_once_and_tags_agree(hub, [db_path])


def test_two_copies_of_one_database_publish_once(tmp_path, hub):
    db_path = local_runs(tmp_path)
    copy = tmp_path / "elsewhere" / "runs.db"
    copy.parent.mkdir()
    with sqlite3.connect(copy) as target:  # a whole copy, as `cp` of a quiet database gives
        store.open_db(db_path).conn.backup(target)
    hub.inject("delay", method="POST", path="/commit/", seconds=0.4, times=20)
    processes = [
        follower(path, hub.endpoint, "--staging", str(path.parent / "staging"), cwd=path.parent)
        for path in (db_path, copy)
    ]
    for process in processes:
        code, output = finish(process)
        assert code == 0, output
    assert [c.message for c in ccpo_commits(hub)] == expected_messages()
    assert_once_and_tags_agree(hub, [db_path, copy])
    # Both databases record the same commits for the same publications.
    done = [
        {
            (e.kind, e.role, e.step): e.commit_id
            for e in outbox.entries(store.open_db(p), RUN, REPO, state="done")
        }
        for p in (db_path, copy)
    ]
    assert done[0] == done[1]


def test_a_commit_applied_after_its_process_was_killed_is_not_repeated(tmp_path, hub):
    """The follower is killed while its checkpoint commit is in flight; the Hub applies that
    commit after the rerun began reading the repository. The rerun finds it and goes on."""
    db_path = local_runs(tmp_path)
    release = threading.Event()
    killed: list[int] = []
    process = follower(db_path, hub.endpoint, cwd=tmp_path)

    def kill_then_hold(number: int, method: str, path: str) -> None:
        if method == "POST" and "/commit/" in path and not killed:
            os.kill(process.pid, signal.SIGKILL)
            killed.append(number)
            release.wait(WAIT_S)  # the commit is applied only once the rerun is under way

    hub.on_request = kill_then_hold
    finish(process)
    assert killed and ccpo_commits(hub) == []

    def let_it_land(number: int, method: str, path: str) -> None:
        if number > killed[0] + 2:  # the rerun has begun: now the dead process's commit lands
            release.set()

    hub.on_request = let_it_land
    rerun = invoke(*follow_args(db_path, hub.endpoint))
    release.set()
    assert rerun.exit_code == 0, rerun.output
    assert [c.message for c in ccpo_commits(hub)] == expected_messages()
    assert_once_and_tags_agree(hub, [db_path])


@pytest.mark.slow
def test_a_kill_at_any_request_then_a_rerun_publishes_everything_once(tmp_path, hub):
    """A sweep of kill points over a whole follow: SIGKILL at the k-th request (the Hub still
    applies that request), then a rerun; every checkpoint and card is on the Hub once and
    runs.db's tags equal the Hub's. Bounded: every write (the create, 3 commits, 3 tags) and a spread of
    the reads, 10 points (the rerun in this process)."""
    from fakehub import FakeHub
    from helpers_hub import TOKEN

    db_path = local_runs(tmp_path / "probe")
    with FakeHub(token=TOKEN) as probe:
        code, output = finish(follower(db_path, probe.endpoint, cwd=tmp_path / "probe"))
        assert code == 0, output
        requests = [(r.method, r.path) for r in probe.requests]
    writes = [
        i
        for i, (method, path) in enumerate(requests, start=1)
        if method == "POST" and ("/commit/" in path or "/tag/" in path or "/repos/create" in path)
    ]
    reads = [i for i in range(1, len(requests) + 1) if requests[i - 1][0] == "GET"]
    points = sorted(set(writes) | set(reads[1 :: max(1, len(reads) // 3)]))[:10]
    assert len(writes) == 7 and len(points) >= 9, requests  # create, 3 commits, 3 tags
    for k in points:
        with FakeHub(token=TOKEN) as fresh:
            folder = tmp_path / f"kill-{k}"
            db = local_runs(folder)
            process = follower(db, fresh.endpoint, cwd=folder)

            def kill_at(number: int, method: str, path: str, k=k, process=process) -> None:
                if number == k:
                    os.kill(process.pid, signal.SIGKILL)

            fresh.on_request = kill_at
            finish(process)
            fresh.on_request = None
            rerun = invoke(*follow_args(db, fresh.endpoint))
            assert rerun.exit_code == 0, (k, rerun.output)
            assert [c.message for c in ccpo_commits(fresh)] == expected_messages(), k
            assert_once_and_tags_agree(fresh, [db])
            states = {e.state for e in outbox.entries(store.open_db(db), RUN, REPO)}
            assert "pending" not in states and "failed" not in states, (k, states)
