"""One uploader per run at a time: the lock on a run's publication outbox.

Whoever works a run's outbox (the uploader a trainer starts, a resumed trainer's, `ccpo
publish --follow`) first takes an exclusive lock, `uploader.lock` in the run's publishing folder
(`PushTarget.staging_for`). It is the trainer lock's mechanism (backends/local/ownership.py: an
flock the kernel drops when its process dies, a record naming the holder, the file opened
without following links and only when it is a regular file), with its own name and words. So a
killed trainer's uploader that still drains is never joined by a second one beside it, and two
followers never both commit: the second is refused (a follower) or waits its turn (a trainer's
uploader, which takes over once the first has emptied the outbox and gone).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from ccpo_cli.backends.local.ownership import RunLock
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.liveness import ProcessOwner

LOCK_FILE = "uploader.lock"


class OutboxLock(RunLock):
    """The exclusive right to work one run's publication outbox."""

    lock_file = LOCK_FILE
    holder = "uploader"
    doing = "being published"
    twice = "one uploader per run at a time: wait for it to finish, or stop it"


def outbox_lock(folder: Path, run: str, *, log: Callable[[str], None]) -> OutboxLock:
    return OutboxLock(Path(folder), run, ProcessOwner.this_process(), log=log)


def acquire_waiting(
    lock: OutboxLock,
    *,
    give_up: Callable[[], bool],
    poll_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> OutboxLock | None:
    """Take `lock`, waiting while another uploader holds it; None once `give_up()` is true (the
    other one then finishes what is pending). A lock file that is not a regular file is refused."""
    while True:
        try:
            return lock.acquire()
        except InvalidInput as refused:
            if "not a regular file" in str(refused):
                raise
            if give_up():
                return None
        sleep(poll_s)
