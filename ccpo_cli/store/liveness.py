"""Whether a run's trainer is still alive, and why a run failed: from what runs.db records.

A trainer records who it is when it starts (`start_session`: pid, host, boot id and the
process's start time, a session id) in `run_liveness`, and a heartbeat every
`HEARTBEAT_EVERY_S` seconds while it trains (`Heartbeat`). A run recorded as `running` is shown
as `interrupted` (`live_status`) when the data says its trainer is gone:

- on the host that reads the database: the recorded process no longer exists (or the pid now
  belongs to another process: its start time or the boot differs);
- from another host, whose processes cannot be looked at: no heartbeat for
  `STALE_AFTER_BEATS` times the cadence the trainer recorded (5 minutes by default). Clocks of
  the two hosts are compared, so a skew of that order between them misleads this rule;
- the session ended (`end_session`) without the trainer recording how the run ended.

A run without a liveness row (ingested, or trained before this table existed) keeps its
recorded status: nothing is guessed. A run that failed (`record_failure`) keeps the step, the
quantity that went non-finite (loss, gradient, advantage) or the error, and its message:
`run_failure` and `failed_runs` are the store-level way to know that a run failed and why.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import threading
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import inserted_id, utc_now, write_transaction
from ccpo_cli.store.records import run_id, this_host

HEARTBEAT_EVERY_S = 30.0
STALE_AFTER_BEATS = 10


def _boot_id() -> str | None:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def process_start_ticks(pid: int) -> int | None:
    """When process `pid` started (Linux: clock ticks since boot), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:  # the command name (field 2) may hold spaces and parentheses: split after the last ')'
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


@dataclass(frozen=True)
class ProcessOwner:
    """A trainer process, as recorded in a run's lock file and in `run_liveness`."""

    pid: int
    host: str
    session: str
    boot_id: str | None = None
    start_ticks: int | None = None
    started_at: str | None = None

    @classmethod
    def this_process(cls) -> ProcessOwner:
        pid = os.getpid()
        return cls(
            pid=pid,
            host=this_host(),
            session=uuid.uuid4().hex,
            boot_id=_boot_id(),
            start_ticks=process_start_ticks(pid),
            started_at=utc_now(),
        )

    @classmethod
    def from_mapping(cls, data: Any) -> ProcessOwner | None:
        """The owner a lock file or row describes; None when it does not describe one."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                pid=int(data["pid"]),
                host=str(data["host"]),
                session=str(data.get("session") or ""),
                boot_id=data.get("boot_id"),
                start_ticks=None if data.get("start_ticks") is None else int(data["start_ticks"]),
                started_at=data.get("started_at"),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        since = f" since {self.started_at}" if self.started_at else ""
        return f"pid {self.pid} on host {self.host}{since}"

    def state(self) -> str:
        """`alive` or `gone` for a process of this host and boot; `unknown` for another host's."""
        if self.host != this_host():
            return "unknown"
        current_boot = _boot_id()
        if self.boot_id and current_boot and self.boot_id != current_boot:
            return "gone"  # the machine restarted since
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return "gone"
        except PermissionError:
            pass  # exists, owned by another user
        if self.start_ticks is not None:
            now = process_start_ticks(self.pid)
            if now is not None and now != self.start_ticks:
                return "gone"  # the pid was reused by a later process
        return "alive"


# -- writing -------------------------------------------------------------------------------------


def start_session(
    db: sqlite_utils.Database,
    run: str | int,
    owner: ProcessOwner,
    every_s: float = HEARTBEAT_EVERY_S,
) -> None:
    """Record that `owner` trains `run` from now on (replacing any earlier session)."""
    now = utc_now()
    with write_transaction(db):
        db.table("run_liveness").upsert(
            {
                "run_id": run_id(db, run),
                "session": owner.session,
                "pid": owner.pid,
                "host": owner.host,
                "boot_id": owner.boot_id,
                "start_ticks": owner.start_ticks,
                "started_at": owner.started_at or now,
                "heartbeat_at": now,
                "heartbeat_every_s": float(every_s),
                "ended_at": None,
            },
            pk="run_id",
        )


def beat(db: sqlite_utils.Database, run: str | int, session: str) -> None:
    """A heartbeat of `session` (a session that another trainer replaced is left alone)."""
    with write_transaction(db):
        db.execute(
            "UPDATE run_liveness SET heartbeat_at = ? WHERE run_id = ? AND session = ?",
            [utc_now(), run_id(db, run), session],
        )


def end_session(db: sqlite_utils.Database, run: str | int, session: str) -> None:
    with write_transaction(db):
        db.execute(
            "UPDATE run_liveness SET ended_at = ?, heartbeat_at = ? WHERE run_id = ? AND session = ?",
            [utc_now(), utc_now(), run_id(db, run), session],
        )


def record_failure(
    db: sqlite_utils.Database,
    run: str | int,
    message: str,
    *,
    step: int | None = None,
    quantity: str | None = None,
    value: Any = None,
    session: str | None = None,
) -> int:
    """Record why `run` failed (append-only: a run resumed and failed again has both rows)."""
    with write_transaction(db):
        return inserted_id(
            db.table("run_failures").insert(
                {
                    "run_id": run_id(db, run),
                    "session": session,
                    "step": step,
                    "quantity": quantity,
                    "value": None if value is None else repr(value),
                    "message": message,
                    "recorded_at": utc_now(),
                }
            )
        )


class Heartbeat:
    """A background thread that beats for one session every `every_s` seconds, on its own
    connection (a missed beat is skipped: the heartbeat never stops training)."""

    def __init__(
        self, db_path: str | Path, run: str, session: str, every_s: float = HEARTBEAT_EVERY_S
    ):
        self.db_path, self.run, self.session, self.every_s = db_path, run, session, every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, name=f"ccpo-heartbeat-{run}", daemon=True
        )

    def _loop(self) -> None:
        from ccpo_cli.store.db import open_db

        db = None
        while not self._stop.wait(self.every_s):
            with contextlib.suppress(
                Exception
            ):  # a busy or vanished database: try at the next beat
                db = db or open_db(self.db_path)
                beat(db, self.run, self.session)
        if db is not None:
            with contextlib.suppress(Exception):
                db.conn.close()

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


# -- reading -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFailure:
    step: int | None
    quantity: str | None
    value: str | None
    message: str
    recorded_at: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LiveStatus:
    # The recorded status (runs.status may be NULL), or `interrupted` when its trainer is gone.
    status: str | None
    recorded_status: str | None
    reason: str | None  # why it is interrupted, in words
    owner: ProcessOwner | None
    heartbeat_at: str | None


def _age_s(stamp: str, now: datetime.datetime) -> float:
    return (now - datetime.datetime.fromisoformat(stamp)).total_seconds()


def live_status_of(
    row: dict[str, Any], liveness: dict[str, Any] | None, now: datetime.datetime | None = None
) -> LiveStatus:
    """The status to show for a runs row, given its `run_liveness` row (or None)."""
    recorded = row.get("status")
    if liveness is None:
        return LiveStatus(recorded, recorded, None, None, None)
    owner = ProcessOwner.from_mapping(liveness)
    heartbeat = liveness.get("heartbeat_at")
    if recorded != "running" or owner is None:
        return LiveStatus(recorded, recorded, None, owner, heartbeat)
    step = row.get("last_step")
    at = f" at step {step}" if step is not None else ""
    if liveness.get("ended_at"):
        return LiveStatus(
            "interrupted",
            recorded,
            f"its trainer ({owner.describe()}) ended{at} without recording how the run ended",
            owner,
            heartbeat,
        )
    state = owner.state()
    if state == "gone":
        return LiveStatus(
            "interrupted",
            recorded,
            f"its trainer ({owner.describe()}) is no longer running; last step {step}",
            owner,
            heartbeat,
        )
    if state == "unknown" and heartbeat:
        age = _age_s(heartbeat, now or datetime.datetime.now(datetime.UTC))
        limit = float(liveness.get("heartbeat_every_s") or HEARTBEAT_EVERY_S) * STALE_AFTER_BEATS
        if age > limit:
            return LiveStatus(
                "interrupted",
                recorded,
                f"no heartbeat from its trainer ({owner.describe()}) for "
                f"{age / 60:.0f} min (it beats every {limit / STALE_AFTER_BEATS:.0f} s); last step {step}",
                owner,
                heartbeat,
            )
    return LiveStatus(recorded, recorded, None, owner, heartbeat)


def _liveness_rows(db: sqlite_utils.Database, ids: Iterable[int]) -> dict[int, dict[str, Any]]:
    ids = list(ids)
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    return {
        row["run_id"]: row
        for row in db.table("run_liveness").rows_where(f"run_id IN ({marks})", ids)
    }


def _latest_failures(db: sqlite_utils.Database, ids: Iterable[int]) -> dict[int, RunFailure]:
    ids = list(ids)
    if not ids:
        return {}
    marks = ", ".join("?" for _ in ids)
    latest: dict[int, RunFailure] = {}
    for row in db.table("run_failures").rows_where(f"run_id IN ({marks})", ids, order_by="id"):
        latest[row["run_id"]] = RunFailure(
            row["step"], row["quantity"], row["value"], row["message"], row["recorded_at"]
        )
    return latest


def owner_is_stale(db: sqlite_utils.Database, run: str, owner: ProcessOwner) -> bool:
    """Whether runs.db shows that `owner` (another host's trainer of `run`) stopped beating."""
    try:
        identifier = run_id(db, run)
    except InvalidInput:  # no such run: nothing recorded, so nothing shows that it stopped
        return False
    row = _liveness_rows(db, [identifier]).get(identifier)
    if row is None or row["session"] != owner.session:
        return False
    status = live_status_of({"status": "running", "last_step": None}, row)
    return status.status == "interrupted"


def annotate_runs(db: sqlite_utils.Database, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`runs` (rows of `store.queries`) with the status to show: `interrupted` where the trainer
    is gone (the recorded value kept as `recorded_status`, the why as `interrupted_because`), and
    for failed runs `failure` (step, quantity, value, message)."""
    ids = [run["id"] for run in runs]
    liveness = _liveness_rows(db, ids)
    failures = _latest_failures(db, ids)
    for run in runs:
        status = live_status_of(run, liveness.get(run["id"]))
        if status.status != run.get("status"):
            run["recorded_status"] = run.get("status")
            run["status"] = status.status
            run["interrupted_because"] = status.reason
        if status.owner is not None:
            run["trainer"] = dict(status.owner.as_dict(), heartbeat_at=status.heartbeat_at)
        if run.get("status") == "failed" and run["id"] in failures:
            run["failure"] = failures[run["id"]].as_dict()
    return runs


def run_failure(db: sqlite_utils.Database, run: str | int) -> RunFailure | None:
    """Why `run` failed, when its recorded status is `failed` and the reason was recorded."""
    identifier = run_id(db, run)
    status = db.table("runs").get(identifier)["status"]
    if status != "failed":
        return None
    return _latest_failures(db, [identifier]).get(identifier)


def failed_runs(db: sqlite_utils.Database) -> dict[str, RunFailure | None]:
    """Every run recorded as failed, by name, with why when recorded (None: not recorded)."""
    rows = list(db.table("runs").rows_where("status = ?", ["failed"], select="id, name"))
    failures = _latest_failures(db, [row["id"] for row in rows])
    return {row["name"]: failures.get(row["id"]) for row in rows}
