"""The publication outbox: Hub pushes a run asked for, durable in runs.db until they are done.

A trainer (or `ccpo publish --follow`) enqueues what an evaluation calls for: the interim or
final card, and the checkpoint a card will name. An uploader process takes the entries that are
ready, one at a time, and records every attempt. An entry is keyed by (run, repository, kind,
step, content hash), so asking again for the same thing is the same entry, and an entry that a
killed trainer or uploader left pending is simply taken up by the next one.

States: `pending` (waiting, maybe until `next_attempt_at` after a failure), `done` (with the
commit id, and the tag it got), `failed` (given up after the retry rule's attempts, or refused for good: the
reason says which) and `skipped` (not needed any more: a newer card replaced it in the queue, a
better checkpoint is recorded; the reason says which). Nothing here talks to the Hub.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import DEFAULT_RULE, RetryRule
from ccpo_cli.store.db import inserted_id, utc_now, write_transaction
from ccpo_cli.store.records import run_id
from ccpo_cli.vocabulary import CARD_STATUSES

KINDS = ("checkpoint", "card")
# A checkpoint is the best one so far or the final weights; a card is interim or final.
ROLES = {"checkpoint": ("best", "final"), "card": CARD_STATUSES}
STATES = ("pending", "done", "failed", "skipped")
ATTEMPT_OUTCOMES = ("done", "retry", "failed", "skipped")


@dataclass(frozen=True)
class OutboxEntry:
    id: int
    run_id: int
    repo_id: str
    revision: str
    kind: str
    role: str
    step: int
    content_hash: str
    source: str | None
    private: bool
    endpoint: str
    state: str
    reason: str | None
    commit_id: str | None
    tag: str | None
    base_commit: str | None
    attempts: int
    next_attempt_at: str | None
    created_at: str
    updated_at: str

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> OutboxEntry:
        values = {f.name: row[f.name] for f in fields(cls)}
        values["private"] = bool(values["private"])
        return cls(**values)

    def describe(self) -> str:
        return f"{self.role} {self.kind} of step {self.step}"


def _entry(db: sqlite_utils.Database, entry_id: int) -> OutboxEntry:
    return OutboxEntry.from_row(db.table("publication_outbox").get(entry_id))


def enqueue(
    db: sqlite_utils.Database,
    run: str | int,
    *,
    repo_id: str,
    revision: str,
    kind: str,
    role: str,
    step: int,
    content_hash: str,
    private: bool,
    endpoint: str,
    source: str | None = None,
) -> tuple[OutboxEntry, bool]:
    """Ask for one publication; (the entry, whether it is new). The same key again is the entry
    already there, whatever its state: a done publication is never redone."""
    if kind not in KINDS or role not in ROLES[kind]:
        raise InvalidInput(f"publication {kind!r} {role!r}: not one of {ROLES}")
    table = db.table("publication_outbox")
    with write_transaction(db):
        identifier = run_id(db, run)
        key = [identifier, repo_id, kind, int(step), content_hash]
        existing = next(
            table.rows_where(
                "run_id = ? AND repo_id = ? AND kind = ? AND step = ? AND content_hash = ?",
                key,
                limit=1,
            ),
            None,
        )
        if existing is not None:
            return OutboxEntry.from_row(existing), False
        now = utc_now()
        row = {
            "run_id": identifier,
            "repo_id": repo_id,
            "revision": revision,
            "kind": kind,
            "role": role,
            "step": int(step),
            "content_hash": content_hash,
            "source": source,
            "private": int(bool(private)),
            "endpoint": endpoint,
            "state": "pending",
            "attempts": 0,
            "created_at": now,
            "updated_at": now,
        }
        return _entry(db, inserted_id(table.insert(row))), True


def entries(
    db: sqlite_utils.Database,
    run: str | int,
    repo_id: str | None = None,
    *,
    state: str | None = None,
) -> list[OutboxEntry]:
    """A run's entries (of one repository, in one state), by step, checkpoints before cards."""
    where: list[str] = ["run_id = ?"]
    params: list[int | str] = [run_id(db, run)]
    if repo_id is not None:
        where.append("repo_id = ?")
        params.append(repo_id)
    if state is not None:
        where.append("state = ?")
        params.append(state)
    rows = db.table("publication_outbox").rows_where(
        " AND ".join(where),
        params,
        order_by="step, CASE kind WHEN 'checkpoint' THEN 0 ELSE 1 END, id",
    )
    return [OutboxEntry.from_row(row) for row in rows]


def is_ready(entry: OutboxEntry, now: str | None = None) -> bool:
    return entry.state == "pending" and (
        entry.next_attempt_at is None or entry.next_attempt_at <= (now or utc_now())
    )


def seconds_until_ready(entry: OutboxEntry) -> float:
    if entry.next_attempt_at is None:
        return 0.0
    when = datetime.datetime.fromisoformat(entry.next_attempt_at)
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


def start_attempt(db: sqlite_utils.Database, entry: OutboxEntry) -> int:
    """Record that an attempt at `entry` starts now (by this process); the attempt's id."""
    with write_transaction(db):
        return inserted_id(
            db.table("publication_attempts").insert(
                {"outbox_id": entry.id, "started_at": utc_now(), "pid": os.getpid()}
            )
        )


def set_base_commit(db: sqlite_utils.Database, entry: OutboxEntry, commit_id: str) -> None:
    """The remote head seen before the entry's first commit: its landed commit is after it."""
    with write_transaction(db):
        db.table("publication_outbox").update(
            entry.id, {"base_commit": commit_id, "updated_at": utc_now()}
        )


def finish_attempt(
    db: sqlite_utils.Database,
    entry: OutboxEntry,
    attempt_id: int,
    outcome: str,
    *,
    reason: str | None = None,
    commit_id: str | None = None,
    tag: str | None = None,
    retry_in_s: float | None = None,
    rule: RetryRule = DEFAULT_RULE,
) -> OutboxEntry:
    """Close an attempt and move its entry: done, skipped, failed, or (retry) pending again after
    `retry_in_s`, or failed once `rule.attempts` are spent (the caller's rule: the one retry
    rule of every Hub call, hub_access.RetryRule, or a narrowing of it). The entry as it is now."""
    if outcome not in ATTEMPT_OUTCOMES:
        raise InvalidInput(
            f"attempt outcome {outcome!r} is not one of {', '.join(ATTEMPT_OUTCOMES)}"
        )
    now = utc_now()
    with write_transaction(db):
        current = _entry(db, entry.id)
        attempts = current.attempts + 1
        change: dict[str, Any] = {"attempts": attempts, "updated_at": now, "reason": reason}
        if outcome == "done":
            change.update(state="done", commit_id=commit_id, tag=tag, next_attempt_at=None)
        elif outcome == "skipped":
            change.update(state="skipped", next_attempt_at=None)
        elif outcome == "failed" or attempts >= rule.attempts:
            change.update(
                state="failed",
                next_attempt_at=None,
                reason=reason
                if outcome == "failed"
                else f"{reason} (gave up after {attempts} attempts)",
            )
        else:
            when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
                seconds=max(retry_in_s or 0.0, 0.0)
            )
            change.update(state="pending", next_attempt_at=when.isoformat(timespec="microseconds"))
        db.table("publication_attempts").update(
            attempt_id,
            {"finished_at": now, "outcome": outcome, "reason": reason, "commit_id": commit_id},
        )
        db.table("publication_outbox").update(entry.id, change)
        return _entry(db, entry.id)


def _move_entries(
    db: sqlite_utils.Database,
    run: str | int,
    repo_id: str,
    state: str,
    change: Callable[[OutboxEntry], dict[str, Any]],
) -> list[OutboxEntry]:
    """Change every entry of a run to one repository in `state`, in one transaction; the
    entries moved, as they are now."""
    moved = []
    with write_transaction(db):
        for entry in entries(db, run, repo_id, state=state):
            update = dict(change(entry), next_attempt_at=None, updated_at=utc_now())
            db.table("publication_outbox").update(entry.id, update)
            moved.append(_entry(db, entry.id))
    return moved


def retry_failed(db: sqlite_utils.Database, run: str | int, repo_id: str) -> list[OutboxEntry]:
    """Put a run's failed entries back in the queue (`--retry-failed`: the token was fixed, the
    disk freed), with a fresh count of attempts; their attempt log stays. The entries moved."""
    return _move_entries(
        db,
        run,
        repo_id,
        "failed",
        lambda entry: {
            "state": "pending",
            "attempts": 0,
            "reason": f"queued again by --retry-failed (was: {entry.reason})",
        },
    )


def fail_pending(
    db: sqlite_utils.Database, run: str | int, repo_id: str, reason: str
) -> list[OutboxEntry]:
    """Fail every pending entry of a run to one repository with `reason` (publishing there
    stopped); `retry_failed` queues them again. The entries moved."""
    return _move_entries(
        db, run, repo_id, "pending", lambda entry: {"state": "failed", "reason": reason}
    )


def make_pending_ready(db: sqlite_utils.Database) -> None:
    """Every pending entry ready now (a --dry-run plan on a scratch copy ignores back-off)."""
    db.execute("UPDATE publication_outbox SET next_attempt_at = NULL WHERE state = 'pending'")


def skip(db: sqlite_utils.Database, entry: OutboxEntry, reason: str) -> OutboxEntry:
    """Mark a pending entry skipped without an attempt (a newer card took its place in the queue)."""
    with write_transaction(db):
        db.table("publication_outbox").update(
            entry.id,
            {
                "state": "skipped",
                "reason": reason,
                "next_attempt_at": None,
                "updated_at": utc_now(),
            },
        )
        return _entry(db, entry.id)


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def run_outbox(db: sqlite_utils.Database, run: str | int) -> list[dict[str, Any]]:
    """Every publication a run asked for, each with its attempts (oldest first); an attempt
    whose process died before it finished is shown as `interrupted`."""
    found = entries(db, run)
    if not found:
        return []
    marks = ", ".join("?" for _ in found)
    attempts: dict[int, list[dict[str, Any]]] = {entry.id: [] for entry in found}
    for row in db.table("publication_attempts").rows_where(
        f"outbox_id IN ({marks})", [e.id for e in found], order_by="id"
    ):
        if row["finished_at"] is None:
            row["outcome"] = "running" if _alive(row["pid"]) else "interrupted"
        attempts[row["outbox_id"]].append(row)
    return [dict(vars(entry), attempt_log=attempts[entry.id]) for entry in found]


def last_push(db: sqlite_utils.Database, run: str | int) -> dict[str, Any] | None:
    """The latest finished attempt of a run with its entry (the train progress line shows it)."""
    row = next(
        db.query(
            "SELECT a.outcome, a.reason, a.commit_id, a.finished_at, o.kind, o.role, o.step, o.state "
            "FROM publication_attempts a JOIN publication_outbox o ON o.id = a.outbox_id "
            "WHERE o.run_id = ? AND a.finished_at IS NOT NULL ORDER BY a.id DESC LIMIT 1",
            [run_id(db, run)],
        ),
        None,
    )
    return row


def counts(db: sqlite_utils.Database, run: str | int) -> dict[str, int]:
    """How many entries of a run are in each state."""
    found = {state: 0 for state in STATES}
    for row in db.query(
        "SELECT state, COUNT(*) AS n FROM publication_outbox WHERE run_id = ? GROUP BY state",
        [run_id(db, run)],
    ):
        found[row["state"]] = row["n"]
    return found


def weights_without_card(
    db: sqlite_utils.Database, run: str | int, repo_id: str
) -> list[dict[str, Any]]:
    """Checkpoints on the Hub (done) that no published card names: no done card at their step or
    later (a final checkpoint needs the final card). Each with why the card is missing: the
    reason of its failed or skipped card, or that it is still pending."""
    done = entries(db, run, repo_id)
    cards = [e for e in done if e.kind == "card"]
    missing = []
    for weights in (e for e in done if e.kind == "checkpoint" and e.state == "done"):
        relevant = [
            c
            for c in cards
            if c.step >= weights.step and (weights.role != "final" or c.role == "final")
        ]
        if any(c.state == "done" for c in relevant):
            continue
        unpublished = [c for c in relevant if c.state in ("failed", "pending")] or relevant
        reason = (
            (
                f"its card is {unpublished[-1].state}"
                + (f": {unpublished[-1].reason}" if unpublished[-1].reason else "")
            )
            if unpublished
            else "no card was queued for it"
        )
        missing.append(
            {
                "step": weights.step,
                "role": weights.role,
                "commit_id": weights.commit_id,
                "tag": weights.tag,
                "card": reason,
            }
        )
    return missing
