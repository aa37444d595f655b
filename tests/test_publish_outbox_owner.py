"""The outbox is owned (issue 30, item 2) and the locks cannot be turned against their files
(item 5): one uploader per run at a time, an attempt killed mid-commit looked up before it is
sent again, `--retry-failed`, exit 4 when nothing could be published, `--follow --dry-run`
without any network call. Real SQLite, the loopback fake Hub, the CLI as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_hostile import assert_refused
from helpers_hub import TOKEN
from typer.testing import CliRunner

from ccpo_cli.backends.local.ownership import LOCK_FILE, RunLock
from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import hub_timeouts
from ccpo_cli.hub_repo import KEY_PREFIX
from ccpo_cli.publishing import uploader as uploader_module
from ccpo_cli.publishing.owner import outbox_lock
from ccpo_cli.publishing.target import push_target
from ccpo_cli.publishing.uploader import Uploader
from ccpo_cli.store import open_db, outbox, run_evaluations
from ccpo_cli.store.liveness import ProcessOwner

REPO = "tester/ccpo-owned-outbox"
RUN = "return-hard"


@pytest.fixture
def db_path(tmp_path):
    """The seed card's run, as a local run that is still training (a follower reads it from
    runs.db, with no run folder to ingest)."""
    path = tmp_path / "runs.db"
    db = seed_card_db(path)
    db["runs"].update(
        db["runs"].rows_where("name = ?", [RUN]).__next__()["id"],
        {"backend": "local", "status": "running"},
    )
    return path


def follow(db_path: Path, endpoint: str, *extra: str):
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
            "--endpoint",
            endpoint,
            "--token",
            TOKEN,
            "--window-start",
            "0",
            "--once",
            "--timeout",
            "2",
            "--deadline",
            "10",
            *extra,
        ],
    )


def _card_entry(db_path: Path, endpoint: str):
    db = open_db(db_path)
    step = run_evaluations(db, RUN)[-1]["step"]
    entry, _ = outbox.enqueue(
        db,
        RUN,
        repo_id=REPO,
        revision="main",
        kind="card",
        role="interim",
        step=step,
        content_hash="owned",
        private=True,
        endpoint=endpoint,
    )
    return db, entry


def _ours(hub) -> list:
    return (
        [c for c in hub.history(REPO) if KEY_PREFIX in c.description] if REPO in hub.repos else []
    )


# -- the lock files ------------------------------------------------------------------------------


def test_a_symlinked_lock_never_empties_the_file_it_points_to(tmp_path):
    precious = tmp_path / "precious.txt"
    precious.write_text("a week of notes\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / LOCK_FILE).symlink_to(precious)
    lock = RunLock(folder, "r", ProcessOwner.this_process(), log=lambda message: None)
    with pytest.raises(InvalidInput, match="not a regular file.*symbolic link"):
        lock.acquire()
    assert precious.read_text() == "a week of notes\n"


def test_a_lock_that_is_a_folder_is_refused_not_a_traceback(tmp_path):
    folder = tmp_path / "run"
    (folder / LOCK_FILE).mkdir(parents=True)
    with pytest.raises(InvalidInput, match="not a regular file"):
        RunLock(folder, "r", ProcessOwner.this_process(), log=lambda message: None).acquire()


# -- one uploader per run ----------------------------------------------------------------------


def test_a_second_follower_is_refused_while_the_first_holds_the_outbox(db_path, hub, tmp_path):
    target = push_target(REPO, endpoint=hub.endpoint)
    first = outbox_lock(target.staging_for(db_path, RUN), RUN, log=lambda message: None).acquire()
    try:
        second = follow(db_path, hub.endpoint)
        assert_refused(second, 3, "being published by", f"pid {first.owner.pid}")
        assert _ours(hub) == []
    finally:
        first.release()
    after = follow(db_path, hub.endpoint)
    assert after.exit_code == 0, after.output
    assert len(_ours(hub)) >= 1


@pytest.mark.slow
def test_an_attempt_killed_mid_commit_is_looked_up_not_sent_again(
    db_path, hub, tmp_path, monkeypatch
):
    """kill -9 after the commit landed and before the attempt was recorded: the attempt never
    finished, so `attempts` is 0; the next uploader must still read the history first."""
    db, entry = _card_entry(db_path, hub.endpoint)
    target = push_target(REPO, endpoint=hub.endpoint, window_start=0, staging=tmp_path / "staging")

    def killed(*args, **kwargs):
        raise SystemExit(137)  # the process dies here: nothing after the commit is recorded

    monkeypatch.setattr(uploader_module, "record_publication", killed)
    with hub_timeouts(target.timeouts), pytest.raises(SystemExit):
        Uploader(db, db_path, RUN, target, TOKEN).process(entry)
    assert len(_ours(hub)) == 1
    monkeypatch.undo()
    [again] = outbox.entries(db, RUN, REPO, state="pending")
    assert again.attempts == 0  # the killed attempt was never finished
    with hub_timeouts(target.timeouts):
        done = Uploader(db, db_path, RUN, target, TOKEN).process(again)
    assert done.state == "done" and "found on the Hub" in (done.reason or "")
    assert len(_ours(hub)) == 1 and done.commit_id == _ours(hub)[0].oid


def test_nothing_published_is_exit_4_and_retry_failed_publishes_once_fixed(db_path, hub):
    hub.inject(
        "status", method="POST", path="/commit/", status=403, times=50, message="no write access"
    )
    refused = follow(db_path, hub.endpoint)
    assert refused.exit_code == 4 and "Traceback" not in refused.output
    last = refused.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("error: ")
        and "nothing could be published" in last
        and "--retry-failed" in last
    )
    db = open_db(db_path)
    assert outbox.counts(db, RUN)["failed"] >= 1 and _ours(hub) == []
    hub.faults.clear()
    still = follow(db_path, hub.endpoint)  # a failed entry stays failed without --retry-failed
    assert still.exit_code == 0 and _ours(hub) == []
    again = follow(db_path, hub.endpoint, "--retry-failed", "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["done"] and len(_ours(hub)) >= 1
    assert outbox.counts(db, RUN)["failed"] == 0


def test_follow_dry_run_makes_no_network_call(db_path, hub):
    result = follow(db_path, hub.endpoint, "--dry-run", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["dry_run"] is True and document["would_publish"]
    assert hub.requests == [], [r.path for r in hub.requests]


@pytest.mark.parametrize("poll", ["-1", "nan", "inf", "0"])
def test_a_bad_poll_is_one_line_before_any_network(db_path, hub, poll):
    result = follow(db_path, hub.endpoint, "--poll", poll)
    assert_refused(result, 3, "--poll")
    assert hub.requests == []


def test_train_push_to_hub_into_an_existing_public_repository_is_refused_before_training(
    hub, tmp_path
):
    hub.seed_repo(REPO, private=False)
    db_path = tmp_path / "train.db"
    result = CliRunner().invoke(
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
            "pub",
            "--steps",
            "2",
            "--push-to-hub",
            REPO,
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
        ],
    )
    assert_refused(result, 3, "is public on the Hub", "--public")
    assert hub.commits_by_ccpo(REPO) == []
    assert not db_path.exists() or open_db(db_path)["runs"].count == 0
