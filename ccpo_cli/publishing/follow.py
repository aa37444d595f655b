"""`ccpo publish --follow RUN`: push a run that trains elsewhere, as its log and checkpoints grow.

Each round: a verl run's `metrics.jsonl` is ingested (idempotent, safe while it grows), the
recorded evaluations are turned into outbox entries exactly as `ccpo train --push-to-hub`
does (publishing/plan.py; new `global_step_N` folders are merged by verl-agent's merger when
their entry is uploaded), and the outbox is worked in this process. A local run's evaluations
and checkpoints are already in runs.db. Following ends when the run has finished and nothing is
pending (or after one round with `once`); the outbox is durable, so following again resumes it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.publishing.plan import local_checkpoints, note_end, note_evaluations, verl_checkpoints
from ccpo_cli.publishing.target import PushTarget
from ccpo_cli.publishing.uploader import Uploader
from ccpo_cli.store import get_run, open_db
from ccpo_cli.store.outbox import counts, entries

DEFAULT_POLL_S = 30.0


def _run_folder(
    run: dict[str, Any], explicit: Path | None, db_path: Path | None = None
) -> Path | None:
    """The run's folder, absolute. A relative folder recorded by a ccpo from before absolute
    paths was relative to the trainer's working folder: it is tried from here, then beside the
    database (where `ccpo-runs/RUN` is made by default)."""
    if explicit is not None:
        if not Path(explicit).is_dir():
            raise InvalidInput(f"--run-dir {explicit}: not a folder")
        return Path(explicit).absolute()
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    recorded = (
        Path(config["run_dir"])
        if config.get("run_dir")
        else (Path(config["metrics_file"]).parent if config.get("metrics_file") else None)
    )
    if recorded is None or recorded.is_absolute():
        return recorded
    beside_db = [Path(db_path).absolute().parent / recorded] if db_path is not None else []
    for candidate in (recorded, *beside_db):
        if candidate.is_dir():
            return candidate.absolute()
    return recorded.absolute()


def ingest_verl(db, run: str, run_dir: Path, log: Callable[[str], None]) -> None:
    """Bring a verl run folder's grown metrics file into runs.db (a partial last line waits)."""
    from ccpo_cli.backends.verl.follow import follow_run_folder, launch_record

    launch_record(run_dir)  # a folder that is not a verl run's is refused, not retried
    try:
        report = follow_run_folder(db, run, run_dir)
    except InvalidInput as error:  # read again next round
        log(f"follow {run}: metrics not ingested yet ({error})")
        return
    if report is not None and report.new:
        log(f"follow {run}: step {report.last_step}, {report.new} new evaluation(s) recorded")


def _ended(run: dict[str, Any], kind: str | None) -> bool:
    """Whether the run will not grow any more: its status says so, its trainer is gone
    (liveness, not the recorded status: a killed trainer leaves `running` behind), or (a verl log
    followed from afar, whose trainer cannot update runs.db) it reached its planned last step."""
    if run.get("status") in ("finished", "failed", "stopped", "interrupted"):
        return True
    return (
        kind == "verl"
        and bool(run.get("total_steps"))
        and (run.get("last_step") or 0) >= run["total_steps"]
    )


def _current(db, run: str) -> dict[str, Any]:
    from ccpo_cli.store.liveness import annotate_runs

    return annotate_runs(db, [get_run(db, run)])[0]


def follow_run(
    db_path: str | Path,
    run: str,
    target: PushTarget,
    token: str,
    *,
    run_dir: Path | None = None,
    backend: str | None = None,
    verl_agent_home: Path | None = None,
    poll_s: float = DEFAULT_POLL_S,
    once: bool = False,
    retry_failed: bool = False,
    log: Callable[[str], None] = lambda message: None,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Follow `run` until it has ended and its outbox is empty; what was published. The outbox
    is worked under its lock (publishing/owner.py): a second follower is refused (exit 3).
    `retry_failed` queues failed entries again first. When entries were tried and none could be
    published, RemoteError (exit 4) after the outbox is recorded."""
    from ccpo_cli.publishing.owner import outbox_lock

    check_poll(poll_s)
    db = open_db(db_path)
    kind, folder = _what_to_follow(db, run, run_dir, backend, Path(db_path))
    lock = outbox_lock(target.staging_for(Path(db_path), run), run, log=log).acquire()
    try:
        return _follow(
            db,
            Path(db_path),
            run,
            target,
            token,
            kind=kind,
            folder=folder,
            verl_agent_home=verl_agent_home,
            poll_s=poll_s,
            once=once,
            retry_failed=retry_failed,
            log=log,
            sleep=sleep,
        )
    finally:
        lock.release()


def check_poll(poll_s: float) -> None:
    if not (math.isfinite(poll_s) and 0 < poll_s <= 86_400):
        raise InvalidInput(f"--poll {poll_s}: expected seconds in (0, 86400]")


def _what_to_follow(
    db, run: str, run_dir: Path | None, backend: str | None, db_path: Path | None = None
) -> tuple[str | None, Path | None]:
    recorded = _known_run(db, run)
    kind = backend or (recorded or {}).get("backend")
    folder = _run_folder(recorded or {}, run_dir, db_path)
    if kind is None and folder is not None and (folder / "config.json").is_file():
        from ccpo_cli.backends.verl.follow import launch_record

        kind = launch_record(folder).get("backend")
    if recorded is None and kind != "verl":
        raise InvalidInput(
            f"no run named {run!r} in the database; give --run-dir of a verl run folder to follow it"
        )
    if kind == "verl" and folder is None:
        raise InvalidInput(f"run {run!r}: which run folder to follow? give --run-dir")
    if folder is not None and run_dir is not None:
        _check_own_folder(folder, run, recorded, kind)
    return kind, folder


def _check_own_folder(
    folder: Path, run: str, recorded: dict[str, Any] | None, kind: str | None
) -> None:
    """A publication is about its run: `--run-dir` must be that run's own folder, as its
    identity record says (a local run's `run.json` with the run's uid, a verl launch record
    naming the run). Another run's folder is refused before anything is read from it, written
    into it (a checkpoint kept for upload) or sent."""
    from ccpo_cli.backends.local.ownership import IDENTITY_FILE, read_identity

    where = f"--run-dir {folder}"
    if kind == "verl":
        from ccpo_cli.backends.verl.follow import launch_record

        named = launch_record(folder).get("run")
        if named is not None and str(named) != run:
            raise InvalidInput(
                f"{where} is the folder of run {str(named)!r}, not of {run!r}; nothing was published"
            )
        return
    identity = read_identity(folder)
    uid = (recorded or {}).get("uid")
    if identity is None:
        config = (recorded or {}).get("config")
        mine = config.get("run_dir") if isinstance(config, dict) else None
        if mine is not None and Path(mine).absolute().resolve() == folder.resolve():
            return  # written by a ccpo from before run.json, and recorded as this run's folder
        raise InvalidInput(
            f"{where} holds no {IDENTITY_FILE} and runs.db does not record it as run {run!r}'s "
            "folder; nothing was published (give the run's own folder)"
        )
    if identity.run != run or (uid and identity.uid != uid):
        raise InvalidInput(
            f"{where} belongs to {identity.describe()}, not to run {run!r}"
            + (f" (uid {uid})" if uid else "")
            + "; nothing was published"
        )


def plan_follow(
    db_path: str | Path,
    run: str,
    target: PushTarget,
    *,
    run_dir: Path | None = None,
    backend: str | None = None,
) -> dict[str, Any]:
    """`--follow --dry-run`: what one round of a real follow would publish now (a verl log
    ingested, the recorded evaluations queued, the final weights and card once the run has
    ended), worked out on an in-memory copy of runs.db: nothing is written anywhere (no outbox
    row, no checkpoint kept in the run folder) and no network call is made."""
    db = _scratch_copy(Path(db_path))
    kind, folder = _what_to_follow(db, run, run_dir, backend, Path(db_path))
    _queue_round(db, run, target, kind=kind, folder=folder, log=lambda message: None, keep=False)
    # The uploader's own choice, entry by entry (checkpoints first, superseded checkpoints and
    # coalesced cards left out), each taken out of the copy's queue as a real upload would.
    from ccpo_cli.store.outbox import make_pending_ready, skip

    make_pending_ready(db)
    planner = Uploader(db, Path(db_path), run, target, token="")
    order = []
    while (entry := planner.next_entry()) is not None:
        order.append(entry)
        skip(db, entry, "planned by --dry-run")
    return {
        "dry_run": True,
        "run": run,
        "repo_id": target.repo_id,
        "would_publish": [
            {"kind": e.kind, "role": e.role, "step": e.step, "source": e.source} for e in order
        ],
    }


def _scratch_copy(db_path: Path):
    """runs.db copied into memory (a database that is not there is refused, never created)."""
    import sqlite_utils

    source = open_db(db_path, must_exist=True)
    try:
        copy = sqlite_utils.Database(memory=True)
        copy.conn.isolation_level = None  # as open_db: autocommit outside write_transaction
        source.conn.backup(copy.conn)
    finally:
        source.conn.close()
    copy.execute("PRAGMA foreign_keys = ON")
    return copy


def _queue_round(
    db,
    run: str,
    target: PushTarget,
    *,
    kind: str | None,
    folder: Path | None,
    log: Callable[[str], None],
    keep: bool = True,
    ended_noted: bool = False,
) -> tuple[dict[str, Any], bool, bool]:
    """One round of reading the run and queueing what it calls for: a verl log ingested, the
    recorded evaluations queued, and once the run has ended (finished, or a verl log at its
    planned last step) the final weights and card. `keep`: checkpoint files are kept for upload
    in the run folder (a dry run keeps nothing). (The run as it stands, whether it ended,
    whether its end was noted.)"""
    if kind == "verl":
        ingest_verl(db, run, folder, log)
    current = _current(db, run)
    finder = verl_checkpoints(folder) if kind == "verl" else local_checkpoints(db, run, folder)
    keep_in = folder if keep and kind != "verl" else None
    note_evaluations(db, run, target, checkpoint_for=finder, run_dir=keep_in)
    ended = _ended(current, kind)
    if current.get("status") == "interrupted" and not ended_noted:
        log(
            f"follow {run}: its trainer is gone ({current.get('interrupted_because')}); publishing what is "
            "pending, then stopping (no final card: the run did not finish)"
        )
        ended_noted = True
    if (
        ended
        and current.get("status") in ("finished", None, "running", "created")
        and not ended_noted
    ):
        last = current.get("last_step") or 0
        if current.get("status") != "finished" and kind == "verl":
            from ccpo_cli.store import update_run_state

            update_run_state(db, run, status="finished")  # the log reached its planned last step
        note_end(db, run, target, last_step=last, checkpoint=finder(last), run_dir=keep_in)
        ended_noted = True
    return current, ended, ended_noted


def _follow(
    db,
    db_path: Path,
    run: str,
    target: PushTarget,
    token: str,
    *,
    kind,
    folder,
    verl_agent_home,
    poll_s,
    once,
    retry_failed,
    log,
    sleep,
) -> dict[str, Any]:
    from ccpo_cli.store.outbox import retry_failed as queue_failed_again

    if retry_failed and _known_run(db, run) is not None:
        again = queue_failed_again(db, run, target.repo_id)
        if again:
            log(f"follow {run}: {len(again)} failed publication(s) queued again (--retry-failed)")
    uploader = Uploader(
        db, db_path, run, target, token, log=log, verl_agent_home=verl_agent_home, sleep=sleep
    )
    ended_noted = False
    attempted = 0
    while True:
        current, ended, ended_noted = _queue_round(
            db, run, target, kind=kind, folder=folder, log=log, ended_noted=ended_noted
        )
        before = len(entries(db, run, target.repo_id, state="pending"))
        if once:  # one bounded round: what is ready now, within the command's deadline
            uploader.drain(until=time.monotonic() + target.timeouts.command, wait_for_retries=False)
        else:
            uploader.drain()
        attempted += before
        if once or (ended and not entries(db, run, target.repo_id, state="pending")):
            break
        sleep(poll_s)
    return _outcome(db, run, target, uploader, ended=ended, attempted=attempted)


def _outcome(
    db, run: str, target: PushTarget, uploader: Uploader, *, ended: bool, attempted: int
) -> dict[str, Any]:
    """What following published, and the outbox as it stands; RemoteError (exit 4) when entries
    were tried and none could be published, naming the last reason and any weights left up
    without a card."""
    from ccpo_cli.errors import RemoteError
    from ccpo_cli.store.outbox import weights_without_card

    outbox = counts(db, run)
    result = {
        "run": run,
        "repo_id": target.repo_id,
        "ended": ended,
        "outbox": outbox,
        "done": [
            {"kind": e.kind, "role": e.role, "step": e.step, "commit_id": e.commit_id, "tag": e.tag}
            for e in uploader.done
        ],
        # Weights up while their card was refused or failed: said, never left silent.
        "weights_without_card": weights_without_card(db, run, target.repo_id),
    }
    if attempted and not uploader.done and outbox["failed"] + outbox["pending"] > 0:
        failed = entries(db, run, target.repo_id, state="failed") or entries(
            db, run, target.repo_id, state="pending"
        )
        uncarded = "".join(
            f"; the {w['role']} weights of step {w['step']} are on the Hub (commit "
            f"{str(w['commit_id'])[:12]}) but no card names them"
            for w in result["weights_without_card"]
        )
        raise RemoteError(
            f"{run} -> {target.repo_id}: nothing could be published ({outbox['failed']} failed, "
            f"{outbox['pending']} pending; last reason: {failed[-1].reason or 'not recorded'}){uncarded}; "
            f"`ccpo publish --follow {run} --repo {target.repo_id} --retry-failed` tries again"
        )
    return result


def _known_run(db, run: str) -> dict[str, Any] | None:
    try:
        return get_run(db, run)
    except InvalidInput:
        return None
