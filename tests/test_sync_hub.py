"""`ccpo sync push/pull` through a dataset repository of the loopback fake Hub (real
huggingface_hub client, real HTTP, real SQLite), three machines simulated by three folders."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from fakehub import FakeHub
from helpers_hub import TOKEN
from helpers_sync import (
    as_machine,
    copy_database,
    full_run,
    machine,
    record_step,
    table_snapshot,
)
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput, RemoteError
from ccpo_cli.hub_access import RetryRule
from ccpo_cli.hub_sync import SyncLimits, pull, push
from ccpo_cli.store import get_run, list_runs, open_db, run_conflicts, run_evaluations
from ccpo_cli.store.sync import dataset_sources, sync_history

REPO = "tester/ccpo-results"
FAST = RetryRule(attempts=8, first_wait_s=0.05, max_wait_s=0.4)


def _push(db_path: Path, hub: FakeHub, host: str, **options):
    return push(
        open_db(db_path),
        REPO,
        token=TOKEN,
        endpoint=hub.endpoint,
        host=host,
        **{"rule": FAST, **options},
    )


def _pull(db_path: Path, hub: FakeHub, **options):
    with as_machine(db_path):  # a pull runs on the machine that pulls
        return pull(
            open_db(db_path), REPO, token=TOKEN, endpoint=hub.endpoint, **{"rule": FAST, **options}
        )


def _evidence(*db_paths: Path) -> set[tuple]:
    """Every recorded result (kept evaluations and conflicts alike) by run uid, step and content."""
    found = set()
    for path in db_paths:
        snapshot = table_snapshot(path)
        found |= {(uid, step, digest) for uid, step, digest, *_ in snapshot["evaluations"]}
        found |= set(snapshot["conflicts"])
    return found


@pytest.fixture
def two_machines(tmp_path, monkeypatch):
    """A and B: B's runs.db is a copy of A's taken after r1's step 2; then each goes on alone:
    both record r1's step 4, with different results, A adds step 6, and each creates a run named
    `shared` of its own."""
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2,))
    b = machine(tmp_path, "node-b", monkeypatch)
    copy_database(a, b)
    monkeypatch.setenv("CCPO_HOST", "node-a")
    full_run(a, "shared", seed=3)
    record_step(open_db(a), "r1", 4, 3)
    record_step(open_db(a), "r1", 6, 3)
    monkeypatch.setenv("CCPO_HOST", "node-b")
    full_run(b, "shared", seed=4, wins_offset=1)
    record_step(open_db(b), "r1", 4, 0, salt=9)
    return a, b


def test_three_machines_share_runs_through_one_dataset(two_machines, hub, tmp_path, monkeypatch):
    a, b = two_machines
    # Two concurrent pushes: the fake Hub holds each commit for a while and answers a commit that
    # races it with 409, as the Hub does; both pushes retry and succeed, and nothing is lost.
    hub.dataset_commit_seconds = 0.4
    results, errors = {}, []

    def push_from(path: Path, host: str) -> None:
        try:
            results[host] = _push(path, hub, host)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [
        threading.Thread(target=push_from, args=(a, "node-a")),
        threading.Thread(target=push_from, args=(b, "node-b")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == [] and results["node-a"]["pushed"] and results["node-b"]["pushed"]
    assert hub.dataset_commit_answers.count(200) == 2 and 409 in hub.dataset_commit_answers
    commits = [request for request in hub.requests_to(f"/api/datasets/{REPO}/commit/", "POST")]
    assert all(b'"parentCommit"' not in request.body for request in commits)  # no parent_commit
    assert hub.datasets[REPO].private
    files = hub.datasets[REPO].branches["main"][-1].files
    assert {path.split("/")[1] for path in files if path.startswith("data/")} == {
        "node-a",
        "node-b",
    }
    assert (
        sum(1 for path in files if path.startswith("data/"))
        == results["node-a"]["parts"] + results["node-b"]["parts"]
    )

    # The third machine: every evaluation of A and B exactly once.
    c = machine(tmp_path, "node-c", monkeypatch)
    first = _pull(c, hub)
    assert first["parts_merged"] == first["parts"] > 0
    assert _evidence(c) == _evidence(a, b)
    db = open_db(c)
    snapshot = table_snapshot(c)
    assert len(snapshot["evaluations"]) == len(
        {(uid, digest) for uid, _, digest, *_ in snapshot["evaluations"]}
    )
    # Same-named runs of two machines stay two runs, shown distinctly; the copied run is one run.
    names = {run["name"]: run for run in list_runs(db)}
    assert set(names) == {"r1", "shared", "shared@node-b"}
    assert (names["shared"]["host"], names["shared@node-b"]["host"]) == ("node-a", "node-b")
    assert (names["shared"]["seed"], names["shared@node-b"]["seed"]) == (3, 4)
    # r1, re-recorded differently at step 4 on A and B, ends with a conflict: both values kept.
    step4 = [row for row in run_conflicts(db, "r1") if row["step"] == 4]
    kept = [row for row in run_evaluations(db, "r1") if row["step"] == 4]
    assert len(step4) == 1 and len(kept) == 1
    assert {step4[0]["content_hash"], kept[0]["content_hash"]} == {
        row["content_hash"]
        for path in (a, b)
        for row in run_evaluations(open_db(path), "r1")
        if row["step"] == 4
    }
    assert sorted(row["step"] for row in run_evaluations(db, "r1")) == [2, 4, 6]
    # Where the pulled rows came from: the pinned dataset commit, for the card of each run.
    head = hub.datasets[REPO].branches["main"][-1].oid
    assert first["commit_id"] == head
    assert {source["commit_id"] for source in dataset_sources(db, names["r1"]["id"])} == {head}
    assert sync_history(db, REPO)[-1]["commit_id"] == head

    # A second pull changes nothing.
    before = (
        table_snapshot(c),
        sorted(tuple(sorted(run.items())) for run in open_db(c)["runs"].rows),
    )
    second = _pull(c, hub)
    assert second["parts_merged"] == 0 and second["rows_new"] == 0
    assert (
        table_snapshot(c),
        sorted(tuple(sorted(run.items())) for run in open_db(c)["runs"].rows),
    ) == before
    # Nor does C have anything to push: what it pulled is known to be in the dataset.
    assert _push(c, hub, "node-c")["pushed"] is False

    # A new evaluation on A reaches B after a push and a pull.
    monkeypatch.setenv("CCPO_HOST", "node-a")
    record_step(open_db(a), "shared", 8, 1)
    again = _push(a, hub, "node-a")
    assert (
        again["pushed"] and again["rows"] >= 1 and again["parts"] <= 2
    )  # the new row and the run's snapshot
    _pull(b, hub)
    assert [row["step"] for row in run_evaluations(open_db(b), "shared@node-a")] == [2, 4, 8]
    assert [row["step"] for row in run_evaluations(open_db(b), "shared")] == [
        2,
        4,
    ]  # B's own, untouched
    # And B now holds the other side of r1's step 4 as a conflict too.
    assert [row["step"] for row in run_conflicts(open_db(b), "r1")].count(4) == 1


def test_a_pull_pinned_to_an_older_commit_merges_that_commit_only(
    two_machines, hub, tmp_path, monkeypatch
):
    a, b = two_machines
    first = _push(a, hub, "node-a")
    _push(b, hub, "node-b")
    c = machine(tmp_path, "node-c", monkeypatch)
    pinned = _pull(c, hub, revision=first["commit_id"])
    assert pinned["commit_id"] == first["commit_id"]
    assert _evidence(c) == _evidence(a)
    assert {run["host"] for run in list_runs(open_db(c))} == {"node-a"}
    rest = _pull(c, hub)  # then main: only B's parts are new
    assert rest["parts_merged"] == rest["parts"] - pinned["parts"]
    assert _evidence(c) == _evidence(a, b)


def test_rate_limits_and_server_errors_are_retried_then_reported(two_machines, hub):
    a, _ = two_machines
    hub.dataset_commit_failures = [429, 503]
    done = _push(a, hub, "node-a")
    assert done["pushed"] and hub.dataset_commit_answers == [429, 503, 200]
    record_step(open_db(a), "r1", 10, 2)
    hub.dataset_commit_failures = [503] * 10
    with pytest.raises(RemoteError, match="HTTP 503.*gave up after 3 attempts"):
        _push(a, hub, "node-a", rule=RetryRule(attempts=3, first_wait_s=0.01, max_wait_s=0.02))
    # Nothing was marked as pushed: the next push sends the row again.
    hub.dataset_commit_failures = []
    assert _push(a, hub, "node-a")["rows"] >= 1


@pytest.mark.parametrize("status", [502, None])
def test_a_push_whose_commit_landed_but_whose_answer_was_lost_is_not_committed_twice(
    two_machines, hub, status
):
    a, _ = two_machines
    hub.inject("lost", method="POST", path=f"/api/datasets/{REPO}/commit/", status=status)
    done = _push(a, hub, "node-a")
    commits = [
        commit
        for commit in hub.datasets[REPO].branches["main"]
        if commit.message.startswith("ccpo sync")
    ]
    assert done["pushed"] and len(commits) == 1 and done["commit_id"] == commits[0].oid
    assert _push(a, hub, "node-a")["pushed"] is False  # the rows are known to be there


def test_a_public_dataset_needs_public_and_limits_bound_the_work(
    two_machines, hub, tmp_path, monkeypatch
):
    a, _ = two_machines
    hub.datasets.clear()
    public = _push(a, hub, "node-a", public=True)
    assert public["pushed"] and not hub.datasets[REPO].private
    record_step(open_db(a), "r1", 12, 1)
    with pytest.raises(InvalidInput, match="public dataset.*--public"):
        _push(a, hub, "node-a")
    with pytest.raises(InvalidInput, match="over the limit"):
        _push(a, hub, "node-a", public=True, limits=SyncLimits(max_push_bytes=10))
    c = machine(tmp_path, "node-c", monkeypatch)
    with pytest.raises(InvalidInput, match="over the limit"):
        _pull(c, hub, limits=SyncLimits(max_pull_bytes=10))
    assert open_db(c)["runs"].count == 0
    with pytest.raises(RemoteError, match="deadline"):
        _pull(c, hub, limits=SyncLimits(deadline_s=1e-9))


def test_sync_commands_print_one_line_and_the_contract_exit_codes(
    two_machines, hub, tmp_path, monkeypatch
):
    a, _ = two_machines
    base = ["--endpoint", hub.endpoint, "--token", TOKEN, "--repo", REPO]
    pushed = CliRunner().invoke(app, ["--db", str(a), "sync", "push", *base, "--json"])
    assert pushed.exit_code == 0, pushed.output
    document = json.loads(pushed.stdout)
    assert document["push"]["pushed"] and document["push"]["commit_id"]
    c = machine(tmp_path, "node-c", monkeypatch)
    pulled = CliRunner().invoke(app, ["--db", str(c), "sync", "pull", *base])
    assert pulled.exit_code == 0, pulled.output
    assert "evaluations" in pulled.stdout and get_run(open_db(c), "r1")["host"] == "node-a"
    nothing = CliRunner().invoke(app, ["--db", str(c), "sync", "push", *base])
    assert nothing.exit_code == 0 and "nothing new to push" in nothing.output
    wrong_token = CliRunner().invoke(
        app,
        [
            "--db",
            str(c),
            "sync",
            "pull",
            "--endpoint",
            hub.endpoint,
            "--token",
            "hf_wrong",
            "--repo",
            REPO,
        ],
    )
    assert (
        wrong_token.exit_code == 4
        and "hf_wrong" not in wrong_token.output
        and "Traceback" not in wrong_token.output
    )
    bad_repo = CliRunner().invoke(
        app, ["--db", str(c), "sync", "pull", *base[:4], "--repo", "../../etc"]
    )
    assert bad_repo.exit_code == 3
    missing_revision = CliRunner().invoke(
        app, ["--db", str(c), "sync", "pull", *base, "--revision", "f" * 40]
    )
    assert missing_revision.exit_code == 4 and "no such dataset revision" in missing_revision.output


def test_the_retry_rule_waits_are_capped_and_jittered():
    assert RetryRule(first_wait_s=1.0, max_wait_s=30.0).wait(10, None) <= 30  # capped, with jitter
    assert 1.0 <= RetryRule(first_wait_s=1.0).wait(0, retry_after=1.0) < 1.5


def test_an_answer_of_another_shape_is_one_remote_error_line():
    from ccpo_cli.hub_access import HubClient, resolve_timeouts

    hub = HubClient(
        api=None, token="hf_secret_x", repo_id=REPO, timeouts=resolve_timeouts(), rule=FAST
    )

    def wrong_shape():
        raise KeyError("path of hf_secret_x")  # what a tree entry without "path" gives

    with pytest.raises(RemoteError, match="not of the shape ccpo expects") as caught:
        hub.call("listing the dataset's parts", wrong_shape)
    assert "hf_secret_x" not in str(caught.value)
