"""The publication outbox in runs.db (m005_publication_outbox, store/outbox.py): keyed entries,
every attempt recorded, bounded retries, and an attempt whose process died shown as interrupted."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ccpo_cli import store
from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import DEFAULT_RULE, RetryRule
from ccpo_cli.store import outbox
from ccpo_cli.store.db import MIGRATIONS
from ccpo_cli.store.identity import ExternalArm

TARGET = {
    "repo_id": "tester/run",
    "revision": "main",
    "private": True,
    "endpoint": "http://127.0.0.1:9",
}


@pytest.fixture
def db(tmp_path):
    database = store.open_db(tmp_path / "runs.db")
    store.ensure_run(database, "r", arm=ExternalArm("return-hard"), seed=0)
    return database


def test_the_migration_is_named_as_agreed_and_creates_both_tables(db):
    names = [migration.name for migration in MIGRATIONS.applied(db)]
    assert "m005_publication_outbox" in names
    assert {"publication_outbox", "publication_attempts"} <= set(db.table_names())


def test_the_same_request_is_the_same_entry_whatever_its_state(db):
    first, new = outbox.enqueue(
        db, "r", kind="card", role="interim", step=2, content_hash="h2", **TARGET
    )
    again, new_again = outbox.enqueue(
        db, "r", kind="card", role="interim", step=2, content_hash="h2", **TARGET
    )
    assert new and not new_again and again.id == first.id
    attempt = outbox.start_attempt(db, first)
    outbox.finish_attempt(db, first, attempt, "done", commit_id="c" * 40)
    done, created = outbox.enqueue(
        db, "r", kind="card", role="interim", step=2, content_hash="h2", **TARGET
    )
    assert not created and done.state == "done" and done.commit_id == "c" * 40
    other, created = outbox.enqueue(
        db, "r", kind="card", role="interim", step=2, content_hash="h3", **TARGET
    )
    assert created and other.id != first.id


def test_an_unknown_kind_or_role_is_refused(db):
    with pytest.raises(InvalidInput):
        outbox.enqueue(db, "r", kind="card", role="best", step=1, content_hash="x", **TARGET)


@pytest.mark.parametrize("rule", [DEFAULT_RULE, RetryRule(attempts=2)], ids=["default", "narrowed"])
def test_a_failing_entry_is_retried_later_then_given_up_by_the_callers_rule(db, rule):
    """The outbox keeps no attempt count of its own: the caller's retry rule (the one rule of
    every Hub call, or a narrowing of it) decides when an entry is given up."""
    entry, _ = outbox.enqueue(
        db, "r", kind="checkpoint", role="best", step=4, content_hash="c4", source="/x", **TARGET
    )
    for number in range(1, rule.attempts + 1):
        attempt = outbox.start_attempt(db, entry)
        entry = outbox.finish_attempt(
            db, entry, attempt, "retry", reason="HTTP 500", retry_in_s=60, rule=rule
        )
        assert entry.attempts == number
        if number < rule.attempts:
            assert entry.state == "pending" and not outbox.is_ready(entry)
            assert 0 < outbox.seconds_until_ready(entry) <= 60
    assert entry.state == "failed" and f"gave up after {rule.attempts} attempts" in entry.reason
    [row] = outbox.run_outbox(db, "r")
    assert [a["outcome"] for a in row["attempt_log"]] == ["retry"] * rule.attempts


def test_an_attempt_whose_process_died_is_shown_as_interrupted(db, tmp_path):
    entry, _ = outbox.enqueue(
        db, "r", kind="card", role="interim", step=1, content_hash="h1", **TARGET
    )
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    attempt = outbox.start_attempt(db, entry)
    db["publication_attempts"].update(attempt, {"pid": int(dead.stdout)})
    [row] = outbox.run_outbox(db, "r")
    assert row["state"] == "pending" and row["attempt_log"][0]["outcome"] == "interrupted"
    live = outbox.start_attempt(db, entry)
    assert outbox.run_outbox(db, "r")[0]["attempt_log"][1]["outcome"] == "running"
    outbox.finish_attempt(db, entry, live, "skipped", reason="coalesced")
    assert outbox.counts(db, "r") == {"pending": 0, "done": 0, "failed": 0, "skipped": 1}
    assert outbox.last_push(db, "r")["outcome"] == "skipped"


def test_entries_come_checkpoints_first_within_a_step(db):
    outbox.enqueue(db, "r", kind="card", role="interim", step=4, content_hash="a", **TARGET)
    outbox.enqueue(
        db, "r", kind="checkpoint", role="best", step=4, content_hash="b", source="/x", **TARGET
    )
    outbox.enqueue(db, "r", kind="card", role="interim", step=2, content_hash="c", **TARGET)
    assert [(e.step, e.kind) for e in outbox.entries(db, "r")] == [
        (2, "card"),
        (4, "checkpoint"),
        (4, "card"),
    ]
