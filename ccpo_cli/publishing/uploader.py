"""The uploader: takes a run's outbox entries one at a time and makes them true on the Hub.

Order and coalescing: checkpoints go before the cards that name them; of several pending
best-so-far checkpoints only the newest is still the best (the others are skipped, with the
reason); of several pending cards only the newest is committed (the others are skipped as
coalesced into it), so a queue that backed up still makes at most one card commit per
evaluation. Each attempt is recorded. An attempt that fails in a way worth retrying puts the
entry back with a backoff (the Hub's Retry-After when it gave one); a definite refusal fails it.

Before every entry is sent, the remote history is searched for its publication key (run uid
and content): a commit whose answer was lost, one another follower or a copy of this database
made, or one the Hub applied after its process died is recognised as landed, never made twice
(hub_repo.RepoSession). A repository found public while private was asked stops the uploads:
every pending entry fails with the reason (`EXPOSED`), which `--public --retry-failed` queues again.

`python -m ccpo_cli.publishing.uploader` is the background process the trainer starts: it reads
the token, the target (JSON) and what to upload (JSON: runs.db, the run, verl-agent's home) from
its standard input, one line each, and when the input closes (the trainer finished, or died) it
empties the outbox and exits. It parses no command line: that is the CLI layer's job
(docs/architecture.md §1), and nothing on a command line is left for `ps` to show.

One concern, kept in one file past 400 lines: the uploader is one loop over a run's outbox: its
ordering and coalescing, the landed-commit check before a resend, the backoff and the attempt
records all act on the same entry and session (`Uploader`), and its `main` is the background
process that runs that loop.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.errors import CcpoError, InvalidInput, RemoteError
from ccpo_cli.hub_access import DEFAULT_RULE, HubCallError, RetryRule, hub_timeouts
from ccpo_cli.hub_repo import RepositoryExposed
from ccpo_cli.publishing.target import POLL_S, PushTarget
from ccpo_cli.store import best_evaluation, get_run, open_db, record_publication, run_evaluations
from ccpo_cli.store.outbox import (
    OutboxEntry,
    entries,
    finish_attempt,
    is_ready,
    seconds_until_ready,
    set_base_commit,
    skip,
    start_attempt,
)

# How much lower than the trainer the uploader runs (os.nice).
UPLOADER_NICENESS = 10
# The line a trainer writes to the uploader's input when training is over.
FINISHED = "training-finished"
# How the reason of a publication stopped because the repository is not private begins.
EXPOSED = "stopped for exposure"


def stop_for_exposure(
    db: sqlite_utils.Database, run: str, repo_id: str, why: str
) -> list[OutboxEntry]:
    """Fail every pending publication of `run` to `repo_id`: the repository is public while
    private was asked. Failed, not skipped, so `--public --retry-failed` publishes them."""
    from ccpo_cli.store.outbox import fail_pending

    return fail_pending(db, run, repo_id, f"{EXPOSED}: {why}")


def exposure_stop(db: sqlite_utils.Database, run: str, repo_id: str) -> str | None:
    """The reason publishing `run` to `repo_id` stopped for exposure, if it did (and nothing was
    queued again since)."""
    for entry in reversed(entries(db, run, repo_id, state="failed")):
        if (entry.reason or "").startswith(EXPOSED):
            return entry.reason
    return None


@dataclass
class Uploader:
    """One run's uploads to one repository."""

    db: sqlite_utils.Database
    db_path: Path
    run: str
    target: PushTarget
    token: str
    log: Callable[[str], None] = lambda message: None
    verl_agent_home: Path | None = None
    sleep: Callable[[float], None] = time.sleep
    rule: RetryRule = DEFAULT_RULE
    _session: Any = None
    _repo: dict[str, Any] | None = None
    done: list[OutboxEntry] = field(default_factory=list)

    # -- the loop ---------------------------------------------------------------------------
    def next_entry(self) -> OutboxEntry | None:
        """The entry to work on now (after coalescing what the queue holds); None when none is ready."""
        pending = entries(self.db, self.run, self.target.repo_id, state="pending")
        checkpoints = [e for e in pending if e.kind == "checkpoint"]
        best = [e for e in checkpoints if e.role == "best"]
        for older in best[:-1]:
            skip(self.db, older, f"superseded by the best checkpoint of step {best[-1].step}")
        checkpoints = (
            [e for e in checkpoints if e.role == "final" or e is best[-1]] if best else checkpoints
        )
        ready = [e for e in checkpoints if is_ready(e)]
        if ready:
            return ready[0]
        cards = [e for e in pending if e.kind == "card"]
        if not cards:
            return None
        newest = max(cards, key=lambda e: (e.role == "final", e.step, e.id))
        if any(e.step <= newest.step for e in checkpoints):
            return None  # its checkpoint goes first (waiting for a retry)
        for older in cards:
            if older.id != newest.id:
                skip(self.db, older, f"coalesced into the {newest.role} card of step {newest.step}")
        return newest if is_ready(newest) else None

    def wait_hint(self) -> float | None:
        """Seconds until some pending entry is ready; None when nothing is pending."""
        pending = entries(self.db, self.run, self.target.repo_id, state="pending")
        return min((seconds_until_ready(e) for e in pending), default=None)

    def drain(
        self,
        *,
        keep_going: Callable[[], bool] = lambda: False,
        until: float | None = None,
        wait_for_retries: bool = True,
    ) -> None:
        """Work the outbox until nothing is pending and `keep_going()` is false (or `until`, a
        time.monotonic() value, passes). Without `wait_for_retries` (one bounded round, `--once`)
        it returns as soon as nothing is ready now: an entry waiting for its retry stays pending."""
        with hub_timeouts(self.target.timeouts):
            while until is None or time.monotonic() < until:
                entry = self.next_entry()
                if entry is not None:
                    self.process(entry)
                    continue
                wait = self.wait_hint()
                if (wait is None or not wait_for_retries) and not keep_going():
                    return
                pause = POLL_S if wait is None else min(max(wait, 0.05), POLL_S * 4)
                if until is not None:
                    pause = min(pause, max(until - time.monotonic(), 0.0))
                self.sleep(pause)

    # -- one entry --------------------------------------------------------------------------
    def session(self):
        from ccpo_cli.hub_repo import open_session

        if self._session is None:
            self._session = open_session(
                self.target.repo_id,
                token=self.token,
                endpoint=self.target.endpoint,
                timeouts=self.target.timeouts,
                revision=self.target.revision,
                log=self.log,
                rule=self.rule,
            )
            self._session.landed_first = True
        if self._repo is None:
            self._repo = self._session.ensure_repo(self.target.private)
        return self._session

    def process(self, entry: OutboxEntry) -> OutboxEntry:
        attempt = start_attempt(self.db, entry)
        if self._session is not None:
            self._session.client.restart()  # each entry is one command: its own deadline
        try:
            if entry.kind == "checkpoint":
                outcome = self._checkpoint(entry)
            else:
                outcome = self._card(entry)
        except RepositoryExposed as exposed:
            self._finish(entry, attempt, "failed", reason=f"{EXPOSED}: {exposed}")
            stopped = stop_for_exposure(self.db, self.run, self.target.repo_id, str(exposed))
            self.log(
                f"publishing stopped: {exposed}; {len(stopped) + 1} publication(s) failed, "
                f"`ccpo publish --follow {self.run} --repo {self.target.repo_id} --public --retry-failed` "
                "publishes them once the repository may be public"
            )
            raise
        except HubCallError as failure:
            if self.rule.retry_later(failure):  # the one rule: the same answer as every Hub path
                wait = max(self.rule.wait(entry.attempts, None), failure.retry_after or 0.0)
                return self._finish(entry, attempt, "retry", reason=str(failure), retry_in_s=wait)
            if failure.status in (401, 403):
                self._session = self._repo = None
            return self._finish(entry, attempt, "failed", reason=str(failure))
        except RemoteError as failure:  # e.g. verification found another file: worth another upload
            return self._finish(
                entry,
                attempt,
                "retry",
                reason=str(failure),
                retry_in_s=self.rule.wait(entry.attempts, None),
            )
        except InvalidInput as refused:
            return self._finish(entry, attempt, "skipped", reason=str(refused))
        except CcpoError as failure:
            return self._finish(entry, attempt, "failed", reason=str(failure))
        return self._finish(entry, attempt, "done", **outcome)

    def _finish(self, entry: OutboxEntry, attempt: int, outcome: str, **fields: Any) -> OutboxEntry:
        now = finish_attempt(self.db, entry, attempt, outcome, rule=self.rule, **fields)
        label = {
            "done": f"done {str(now.commit_id)[:12]}",
            "retry": "failed, will retry",
            "failed": "failed",
            "skipped": "skipped",
        }[outcome]
        self.log(
            f"push {entry.describe()} to {self.target.repo_id}: {label}"
            + (f" ({fields['reason']})" if fields.get("reason") and outcome != "done" else "")
        )
        if outcome == "done":
            self.done.append(now)
        return now

    def _landed(self, entry: OutboxEntry, key: str) -> str | None:
        """The commit carrying this entry's key, wherever it came from: an attempt of this
        outbox killed mid-commit or whose answer was lost, another follower of this database
        (another --staging), a copy of this database, a commit the Hub applied after its process
        died. The key digests the run's uid and the content, so it is the same for all of them."""
        return self.session().find_landed(key, None)

    def _key(self, entry: OutboxEntry) -> str:
        from ccpo_cli.hub_repo import publication_key

        uid = get_run(self.db, self.run).get("uid") or self.run
        return publication_key(uid, entry.kind, entry.role, entry.step, entry.content_hash)

    def _checkpoint(self, entry: OutboxEntry) -> dict[str, Any]:
        if entry.role == "best":
            best = best_evaluation(run_evaluations(self.db, self.run))
            if best is not None and best["step"] != entry.step:
                raise InvalidInput(
                    f"step {best['step']} is the best recorded evaluation "
                    f"({best['success_rate']:.1f}%), not step {entry.step}; its checkpoint is not published as the best"
                )
        files = self._checkpoint_files(entry)
        session = self.session()
        key = self._key(entry)
        tag = f"step-{entry.step}"
        message = f"ccpo: {'final weights' if entry.role == 'final' else 'best checkpoint so far'} of {self.run} at step {entry.step}"
        landed = self._landed(entry, key)
        if landed is not None:
            session.verify(landed, files)
            tagged = session.tag(tag, landed, message)
            return {
                "commit_id": landed,
                "tag": tagged["tag"] if tagged["commit_id"] == landed else None,
                "reason": "found on the Hub: an earlier attempt, another publisher or a copy of "
                "this database landed it",
            }
        if entry.base_commit is None:
            set_base_commit(self.db, entry, session.head_sha())
        result = session.upload_checkpoint(files, message=message, key=key, tag=tag)
        return {
            "commit_id": result["commit_id"],
            "tag": result["tag"]["tag"]
            if result["tag"].get("created") or result["tag"]["commit_id"] == result["commit_id"]
            else None,
            "reason": result["tag"].get("note")
            or ("found on the Hub after a lost answer" if result["found_landed"] else None),
        }

    def _final_tag(self, entry: OutboxEntry, commit_id: str, message: str) -> str | None:
        """`final` on a final card's commit; recorded only when the Hub's tag names that commit
        (runs.db's tags name the Hub's commits, never one the Hub tagged otherwise)."""
        if entry.role != "final":
            return None
        tagged = self.session().tag("final", commit_id, message)
        return tagged["tag"] if tagged["commit_id"] == commit_id else None

    def _checkpoint_files(self, entry: OutboxEntry) -> dict[str, Path]:
        from ccpo_cli.hub_plan import checkpoint_files
        from ccpo_cli.paths import file_sha256
        from ccpo_cli.publishing.plan import recorded_sha256s

        source = Path(entry.source or "")
        if not source.exists():
            raise CcpoError(f"{source}: the checkpoint to publish is gone")
        if source.is_file():
            # The run's own weights only: the file must still be what runs.db recorded for this
            # run and step, and what was queued (a file swapped in since is never published).
            recorded = recorded_sha256s(self.db, self.run, entry.step)
            actual = file_sha256(source)
            if actual not in recorded or actual != entry.content_hash:
                raise InvalidInput(
                    f"{source}: sha256 {actual[:12]} is not "
                    + (
                        "what was queued"
                        if actual in recorded
                        else "the checkpoint runs.db records"
                    )
                    + f" for run {self.run!r} at step {entry.step}; not published"
                )
            return {f"checkpoints/{source.name}": source}
        from ccpo_cli.backends.verl.checkpoint import find_verl_checkpoint, merge_checkpoint

        verl = find_verl_checkpoint(source)
        if verl is None:
            return checkpoint_files(source)
        merged = merge_checkpoint(verl, verl_agent_home=self.verl_agent_home, log=self.log)
        return checkpoint_files(merged.folder)

    def _published_checkpoints(self) -> list[OutboxEntry]:
        """The checkpoints of this run's outbox that are up on the Hub, oldest first."""
        return [
            e
            for e in entries(self.db, self.run, self.target.repo_id, state="done")
            if e.kind == "checkpoint"
        ]

    def _weights(self, card: OutboxEntry) -> OutboxEntry | None:
        """The published checkpoint a card names: for a final card the weights of its last step
        (else the newest published best-so-far checkpoint), else the newest published
        best-so-far checkpoint; None when none is up."""
        done = self._published_checkpoints()
        best = [e for e in done if e.role == "best"]
        if card.role == "final":
            # Without weights of the last step, the best checkpoint on the Hub is the one the
            # final card names: it never says "no checkpoint is recorded" while one is tagged.
            last = next((e for e in reversed(done) if e.step == card.step), None)
            return last or (best[-1] if best else None)
        return best[-1] if best else None

    @staticmethod
    def _cited(weights: OutboxEntry) -> dict[str, Any]:
        """How a card cites published weights: their commit, the tag naming it, their step."""
        return {
            "commit": weights.commit_id,
            "revision": weights.tag or weights.commit_id,
            "step": weights.step,
        }

    def _published_card(
        self,
        entry: OutboxEntry,
        message: str,
        commit: Callable[[Any, str], dict[str, Any]],
        *,
        landed_fields: dict[str, Any],
        checkpoint_step: int | None,
    ) -> dict[str, Any]:
        """A card entry made true on the Hub: found landed by its key (`landed_fields` then say
        what is known of it), else committed by `commit(session, key)` against the head
        recorded as the entry's base; a final card's commit tagged; the publication recorded."""
        session = self.session()
        key = self._key(entry)
        landed = self._landed(entry, key)
        if landed is not None:
            result = {"commit_id": landed, **landed_fields}
        else:
            if entry.base_commit is None:
                set_base_commit(self.db, entry, session.head_sha())
            result = commit(session, key)
        tag = self._final_tag(entry, result["commit_id"], message)
        record_publication(
            self.db,
            self.run,
            self.target.repo_id,
            revision=self.target.revision,
            commit_id=result["commit_id"],
            card_hash=result["card_hash"],
            status=entry.role,
            checkpoint_step=checkpoint_step,
            url=result.get("commit_url"),
        )
        return {"commit_id": result["commit_id"], "tag": tag, "reason": result.get("reason")}

    def _weights_instead(
        self, entry: OutboxEntry, weights: OutboxEntry | None, refused: InvalidInput, folder: Path
    ) -> dict[str, Any]:
        """Weights always get a card: the full card was refused, but when weights of the run are
        up a README names them and says why (publishing/weights_card.py); else the refusal."""
        from ccpo_cli.publishing.weights_card import commit_weights_card

        published = self._published_checkpoints()
        up = weights or (published[-1] if published else None)
        if up is None:
            raise refused
        message = f"ccpo: weights card for {self.run} ({entry.role}, step {entry.step})"
        result = self._published_card(
            entry,
            message,
            lambda session, key: commit_weights_card(
                session,
                self.db,
                self.run,
                weights=self._cited(up),
                reason=str(refused),
                status=entry.role,
                license=self.target.license,
                key=key,
                message=message,
                scratch=folder / ".hub-cache",
            ),
            landed_fields={"card_hash": None, "commit_url": None},
            checkpoint_step=up.step,
        )
        return dict(
            result,
            reason=f"the full card was refused ({refused}); a weights card names the weights of "
            f"step {up.step} instead",
        )

    def _card_message(self, entry: OutboxEntry) -> str:
        if entry.role == "final":
            return f"ccpo: final card for {self.run}"
        return f"ccpo: interim card for {self.run} (step {entry.step})"

    def _staging_folder(self, entry: OutboxEntry) -> Path:
        """Where a card entry is staged. Per process: two processes never write one staging
        folder (one uploader owns the outbox at a time, but a killed one may have left its folder
        half-written)."""
        return (
            self.target.staging_for(self.db_path, self.run)
            / f"{entry.role}-step-{entry.step}-pid{os.getpid()}"
        )

    def _card(self, entry: OutboxEntry) -> dict[str, Any]:
        from ccpo_cli.cards.staging import README_PATH, stage_card
        from ccpo_cli.hub import commit_card

        weights = self._weights(entry)
        folder = self._staging_folder(entry)
        try:
            staged = stage_card(
                self.db,
                self.run,
                folder / README_PATH,
                status=entry.role,
                repo_id=self.target.repo_id,
                window_start=self.target.window_start,
                license=self.target.license,
                checkpoint_step=None if weights is None else weights.step,
                weights=None
                if weights is None
                else {"repo_id": self.target.repo_id, **self._cited(weights)},
                force=True,
            )
        except InvalidInput as refused:
            return self._weights_instead(entry, weights, refused, folder)
        message = self._card_message(entry)

        def commit(session: Any, key: str) -> dict[str, Any]:
            try:
                result = commit_card(session, staged, key=key, message=message)
            except InvalidInput as refused:  # refused once merged with the Hub's README
                raise _FullCardRefused(refused) from None
            lost = "found on the Hub after a lost answer" if result["found_landed"] else None
            return dict(result, reason=lost)

        try:
            return self._published_card(
                entry,
                message,
                commit,
                landed_fields={
                    "card_hash": staged.card_hash,
                    "commit_url": None,
                    "reason": "found on the Hub: an earlier attempt landed although its answer was lost",
                },
                checkpoint_step=None if weights is None else weights.step,
            )
        except _FullCardRefused as refused:
            return self._weights_instead(entry, weights, refused.refused, folder)


class _FullCardRefused(Exception):
    """The card merged with the Hub's README failed its checks: a weights card goes instead."""

    def __init__(self, refused: InvalidInput):
        super().__init__(str(refused))
        self.refused = refused


# --- the background process -------------------------------------------------------------------


@dataclass(frozen=True)
class UploadJob:
    """What an uploader process works on: one run's outbox in one runs.db."""

    db: str
    run: str
    verl_agent_home: str | None = None

    def to_json(self) -> str:
        return json.dumps({"db": self.db, "run": self.run, "verl_agent_home": self.verl_agent_home})

    @classmethod
    def from_json(cls, text: str) -> UploadJob:
        document = json.loads(text)
        return cls(str(document["db"]), str(document["run"]), document.get("verl_agent_home"))


def _watch_trainer() -> threading.Event:
    """An event set once training is over: "finished" from the trainer, or the end of the input
    (the trainer closed it or died; its forked rollout workers may hold the pipe open, hence the
    explicit line too), or this process handed to init (the trainer died)."""
    trainer_done = threading.Event()
    parent = os.getppid()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == FINISHED:
                break
        trainer_done.set()

    def watch_parent() -> None:
        while not trainer_done.wait(1.0):
            if os.getppid() != parent:
                trainer_done.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    threading.Thread(target=watch_parent, daemon=True).start()
    return trainer_done


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main() -> int:
    """The uploader process a trainer starts (see the module docstring)."""
    try:  # uploads are background work: training keeps the cores when they are scarce
        os.nice(UPLOADER_NICENESS)
    except OSError:
        pass
    token = sys.stdin.readline().strip()
    target = PushTarget.from_json(sys.stdin.readline())
    job = UploadJob.from_json(sys.stdin.readline())
    trainer_done = _watch_trainer()
    from ccpo_cli.publishing.owner import acquire_waiting, outbox_lock

    db = open_db(job.db)
    uploader = Uploader(
        db,
        Path(job.db),
        job.run,
        target,
        token,
        log=_log,
        verl_agent_home=Path(job.verl_agent_home) if job.verl_agent_home else None,
    )
    try:
        # A killed trainer's uploader may still be draining: wait for it, never work beside it.
        lock = acquire_waiting(
            outbox_lock(target.staging_for(Path(job.db), job.run), job.run, log=_log),
            give_up=trainer_done.is_set,
        )
        if lock is None:
            _log(
                f"uploader: another uploader works the outbox of {job.run}; it publishes what is pending"
            )
            return 0
        try:
            uploader.drain(keep_going=lambda: not trainer_done.is_set())
        finally:
            lock.release()
    except KeyboardInterrupt:
        return 130
    except CcpoError as error:
        _log(f"uploader: {error}")
        return error.exit_code
    return 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    sys.exit(main())
