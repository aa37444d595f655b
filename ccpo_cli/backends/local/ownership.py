"""A run folder belongs to its run: the identity it records, and the lock of the trainer in it.

**Identity** (`run.json`): when a run starts, its folder records the run's name, its global id
(`runs.uid`) and the database that holds it. Before a trainer writes anything into a folder,
`check_folder` compares that record with the run it was asked to train and refuses (exit 3,
nothing touched) a folder of another run: `ccpo train --run B --resume ccpo-runs/ref` would
otherwise delete ref's checkpoints and append B's steps to ref's metrics. A folder written by
an older ccpo (no `run.json`) is accepted only as the folder runs.db records for that run.

**Lock** (`trainer.lock`): a trainer holds an exclusive `flock` on the file for as long as it
trains, and writes its pid, host, boot, process start time and session id into it. The kernel
drops an flock when its process dies (even by SIGKILL), so on one host a lock can never be held
by a dead trainer: a second trainer of the same run is refused with a message naming the owner,
and a lock file that names a process that is gone is taken over, saying so. Creating the file
and taking the lock are one atomic step for the kernel (`open(O_CREAT)` then `flock(LOCK_EX |
LOCK_NB)`; two racing trainers get the lock one at a time). The forked rollout workers close
their inherited copy, so they never keep a dead trainer's lock.

Across hosts (a run folder on a shared file system), an flock is only as good as the file
system's locking, and another host's pid cannot be looked at. The rule is therefore: a lock
file naming a trainer on another host is refused, unless runs.db shows that trainer's heartbeat
stopped (store/liveness.py); then it is taken over. Once sure the other trainer is gone, deleting
the lock file also releases the folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.owned_output import RUN_IDENTITY_FILE
from ccpo_cli.store.db import utc_now
from ccpo_cli.store.liveness import ProcessOwner
from ccpo_cli.vocabulary import LOCAL

IDENTITY_FILE = RUN_IDENTITY_FILE
LOCK_FILE = "trainer.lock"
FOLDER_FORMAT = "ccpo-run-folder/1"
_MAX_RECORD_BYTES = 64 * 1024
# A trainer writes its record just after taking the lock; one that finds the lock held but the
# record not yet written waits this long for it, so its refusal names the holder.
_RECORD_WAIT_S = 2.0

# File descriptors of the locks this process holds; a forked child closes its copies.
_HELD: set[int] = set()


def _close_inherited_locks() -> None:
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)  # the child's copy only: the parent keeps its lock
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited_locks)


@dataclass(frozen=True)
class FolderIdentity:
    """Whose folder this is, as `run.json` records it."""

    run: str
    uid: str
    db: str
    backend: str
    created_at: str

    def describe(self) -> str:
        return f"run {self.run!r} (uid {self.uid}, database {self.db})"


def _read_identity_document(path: Path) -> Any:
    """The JSON of `path`; None when there is no such file; InvalidInput when it is damaged."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(_MAX_RECORD_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InvalidInput(f"{path}: cannot read ({error.strerror or error})") from None
    try:
        if len(data) > _MAX_RECORD_BYTES:
            raise ValueError("too large")
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidInput(
            f"{path}: not a ccpo run identity record; refusing to use the folder"
        ) from None


def read_identity(folder: Path) -> FolderIdentity | None:
    """The identity a run folder records; None when it records none; InvalidInput when damaged."""
    path = folder / IDENTITY_FILE
    document = _read_identity_document(path)
    if document is None:
        return None
    if not isinstance(document, Mapping) or document.get("format") != FOLDER_FORMAT:
        raise InvalidInput(f"{path}: not a ccpo run identity record; refusing to use the folder")
    try:
        return FolderIdentity(
            run=str(document["run"]),
            uid=str(document["uid"]),
            db=str(document["db"]),
            backend=str(document.get("backend", LOCAL)),
            created_at=str(document.get("created_at", "")),
        )
    except KeyError as missing:
        raise InvalidInput(
            f"{path}: run identity record without {missing}; refusing to use the folder"
        ) from None


def write_identity(
    folder: Path, run: str, uid: str, db_path: str | Path, backend: str = LOCAL
) -> FolderIdentity:
    """Record (atomically) that `folder` belongs to run `run` with global id `uid`."""
    existing = read_identity(folder)
    if existing is not None and existing.uid == uid:
        return existing
    identity = FolderIdentity(
        run=run, uid=uid, db=str(Path(db_path).resolve()), backend=backend, created_at=utc_now()
    )
    partial = folder / f".{IDENTITY_FILE}.{uuid.uuid4().hex}.partial"
    partial.write_text(
        json.dumps({"format": FOLDER_FORMAT, **asdict(identity)}, indent=2, sort_keys=True) + "\n"
    )
    partial.replace(folder / IDENTITY_FILE)
    return identity


def _in_progress(entry: Path) -> bool:
    """A file a ccpo writer is writing before renaming it into place (`.NAME.ID.partial`)."""
    return entry.name.startswith(".") and entry.name.endswith(".partial")


def _same_path(a: str | Path, b: str | Path) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except (OSError, RuntimeError):
        return False


def check_folder(
    folder: Path, run: str, db_path: str | Path, recorded: Mapping[str, Any] | None
) -> None:
    """Refuse (InvalidInput, nothing changed) to train run `run` in a folder that is not its own.

    `recorded` is the run's row in runs.db (None when the database has no such run)."""
    identity = read_identity(folder)
    if identity is not None:
        if identity.run != run:
            raise InvalidInput(
                f"{folder} belongs to {identity.describe()}, not to run {run!r}; refusing to touch it "
                f"(continue that run with --run {identity.run}, or train {run!r} in its own folder)"
            )
        if recorded is None:
            raise InvalidInput(
                f"{folder} belongs to {identity.describe()}, which {db_path} does not hold; "
                f"refusing to touch it (use --db {identity.db}, or a new --run)"
            )
        if recorded.get("uid") and recorded["uid"] != identity.uid:
            raise InvalidInput(
                f"{folder} belongs to another run named {run!r} ({identity.describe()}); this "
                f"database's run {run!r} has uid {recorded['uid']}; refusing to touch it"
            )
        return
    if not folder.exists():
        return
    if not folder.is_dir():
        raise InvalidInput(f"{folder} is not a folder; a run folder is needed")
    if not [
        entry for entry in folder.iterdir() if entry.name != LOCK_FILE and not _in_progress(entry)
    ]:
        return  # empty: a folder made for this run that never got further, or is being started
    config = (recorded or {}).get("config")
    recorded_dir = config.get("run_dir") if isinstance(config, Mapping) else None
    if recorded_dir is not None and _same_path(recorded_dir, folder):
        return  # written by a ccpo from before run.json, and recorded as this run's folder
    raise InvalidInput(
        f"{folder} holds files but no {IDENTITY_FILE}, and runs.db does not record it as run "
        f"{run!r}'s folder; refusing to touch it (give --resume the run's own folder, or a new --run)"
    )


# -- the lock ----------------------------------------------------------------------------------


def _try_flock(fd: int) -> bool | None:
    """True: locked; False: another open file holds it; None: the file system has no flock."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    except OSError as error:
        if error.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
            return None
        raise


def _await_owner(fd: int) -> tuple[ProcessOwner | None, bool]:
    """The record of a lock another process holds, given up to _RECORD_WAIT_S to appear."""
    deadline = time.monotonic() + _RECORD_WAIT_S
    owner, readable = _read_owner(fd)
    while owner is None and time.monotonic() < deadline:
        time.sleep(0.05)
        owner, readable = _read_owner(fd)
    return owner, readable


def _read_owner(fd: int) -> tuple[ProcessOwner | None, bool]:
    """(the owner a lock file names, whether its content could be read); (None, True): empty."""
    try:
        data = os.pread(fd, _MAX_RECORD_BYTES, 0)
    except OSError:
        return None, False
    if not data.strip():
        return None, True
    try:
        owner = ProcessOwner.from_mapping(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError):
        return None, False
    return owner, owner is not None


class RunLock:
    """The exclusive right to train one run in its folder (see the module docstring)."""

    # What the lock guards, for its messages: the trainer's lock; a subclass names another
    # (the publication outbox's uploader lock, publishing/owner.py).
    lock_file = LOCK_FILE
    holder = "trainer"
    doing = "being trained"
    twice = "refusing to train it twice: wait for that trainer or stop it"

    def __init__(
        self,
        folder: Path,
        run: str,
        owner: ProcessOwner,
        *,
        log: Callable[[str], None],
        gone_elsewhere: Callable[[ProcessOwner], bool] = lambda owner: False,
    ):
        self.folder, self.run, self.owner, self.log = folder, run, owner, log
        self.gone_elsewhere = gone_elsewhere
        self.path = folder / self.lock_file
        self._fd: int | None = None

    def _held_by(self, previous: ProcessOwner | None) -> InvalidInput:
        if previous is not None:
            who = previous.describe()
        else:
            who = "another process (its lock record is being written or unreadable)"
        return InvalidInput(
            f"run {self.run!r} is {self.doing} by {who} (lock {self.path}); {self.twice}"
        )

    def _open(self) -> int:
        """The lock file, never through a link (a symlinked lock would empty the file it names)
        and only when it is a regular file: anything else is refused, nothing touched."""
        try:
            fd = os.open(
                self.path,
                os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK,
                0o644,
            )
        except OSError as error:
            kind = (
                "a symbolic link"
                if error.errno == errno.ELOOP
                else (error.strerror or type(error).__name__)
            )
            raise InvalidInput(
                f"lock {self.path}: not a regular file ({kind}); refusing to use it "
                "(remove it if nothing else needs it)"
            ) from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise InvalidInput(
                f"lock {self.path}: not a regular file; refusing to use it "
                "(remove it if nothing else needs it)"
            )
        return fd

    def acquire(self) -> RunLock:
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise InvalidInput(
                f"{self.folder}: cannot create the folder of lock {self.lock_file} "
                f"({error.strerror or error})"
            ) from None
        fd = self._open()
        locked = None
        try:
            locked = _try_flock(fd)
            previous, readable = _await_owner(fd) if locked is False else _read_owner(fd)
            if locked is False or (locked is None and not readable):
                raise self._held_by(previous)
            if previous is not None and previous.session != self.owner.session:
                state = previous.state()
                if state == "alive":
                    raise self._held_by(previous)
                if state == "unknown" and not self.gone_elsewhere(previous):
                    raise InvalidInput(
                        f"run {self.run!r} is locked by {previous.describe()} (lock {self.path}), and runs.db does not "
                        f"show that {self.holder} stopped; if it is gone, delete {self.path} and try again"
                    )
                self.log(
                    f"took over the lock of run {self.run!r} from {previous.describe()}, which is no longer running"
                )
            record = (json.dumps(self.owner.as_dict(), sort_keys=True) + "\n").encode("utf-8")
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
            os.fsync(fd)
        except BaseException:
            if locked:
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self._fd = fd
        _HELD.add(fd)
        return self

    def release(self) -> None:
        """Free the lock. The file stays (emptied): removing it could let a trainer that opened it
        a moment earlier lock a file nobody else sees."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _HELD.discard(fd)
        with contextlib.suppress(OSError):  # the folder may be gone: the lock goes with the process
            os.ftruncate(fd, 0)
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
        with contextlib.suppress(OSError):
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: Any) -> None:
        self.release()
