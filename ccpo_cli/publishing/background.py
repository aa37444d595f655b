"""`--push-to-hub` beside a trainer: the outbox is filled in the trainer's process (a few rows in
runs.db per evaluation), the uploads run in a separate process, so a slow, failing or silent
Hub never blocks a training step, never changes the trainer's numbers or exit status, and at
the very end costs at most `PushTarget.end_wait_s` of waiting.

The uploader is `python -m ccpo_cli.publishing.uploader`; the token, the target and the run reach
it on its standard input (never its command line), and closing that input tells it training is over.
If the uploader dies it is started again at the next evaluation; if the trainer dies, the
uploader sees its input close, empties the outbox and exits; whatever is left pending is taken
up by the next `ccpo train --resume ... --push-to-hub` or `ccpo publish --follow`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from ccpo_cli.publishing.plan import CheckpointFinder, local_checkpoints, note_end, note_evaluations
from ccpo_cli.publishing.target import PushTarget
from ccpo_cli.store import open_db
from ccpo_cli.store.outbox import counts, last_push
from ccpo_cli.vocabulary import VERL

if TYPE_CHECKING:
    from ccpo_cli.hub_access import HubAccess

UPLOADER_MODULE = "ccpo_cli.publishing.uploader"


class BackgroundPublisher:
    """A TrainingObserver (backends/observer.py) that pushes a run to the Hub while it trains."""

    def __init__(
        self,
        db_path: str | Path,
        target: PushTarget,
        token: str,
        *,
        log: Callable[[str], None] = lambda message: None,
        checkpoints: Callable[[object, str, Path], CheckpointFinder] | None = None,
        verl_agent_home: Path | None = None,
    ):
        self.db_path = Path(db_path)
        self.target = target
        self._token = token
        self.log = log
        self._finder = checkpoints or (lambda db, run, run_dir: local_checkpoints(db, run, run_dir))
        self.verl_agent_home = verl_agent_home
        self.run: str | None = None
        self.run_dir: Path | None = None
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self._db = None
        self._exposure_said = False

    # -- the uploader process ---------------------------------------------------------------
    def _ensure_uploader(self) -> None:
        if self.process is not None and self.process.poll() is None:
            return
        if self.process is not None:
            self.log(
                f"publishing: the uploader exited ({self.process.returncode}); starting it again"
            )
        from ccpo_cli.publishing.uploader import UploadJob

        command = [sys.executable, "-m", UPLOADER_MODULE]
        job = UploadJob(
            str(self.db_path),
            self.run,
            None if self.verl_agent_home is None else str(self.verl_agent_home),
        )
        # huggingface_hub 0.3x reads the Hub address only from HF_ENDPOINT at start-up.
        env = {
            **os.environ,
            "HF_ENDPOINT": self.target.endpoint,
            "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        }
        self.log_path = self.target.staging_for(self.db_path, self.run) / "uploader.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log_file:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=log_file, stderr=log_file, env=env, text=True
            )
        self.process.stdin.write(
            self._token + "\n" + self.target.to_json() + "\n" + job.to_json() + "\n"
        )
        self.process.stdin.flush()

    def _close_input(self) -> None:
        from ccpo_cli.publishing.uploader import FINISHED

        if (
            self.process is not None
            and self.process.stdin is not None
            and not self.process.stdin.closed
        ):
            try:
                self.process.stdin.write(FINISHED + "\n")
                self.process.stdin.close()
            except OSError:
                pass

    def _stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    # -- TrainingObserver ---------------------------------------------------------------------
    def started(self, run: str, run_dir: Path) -> None:
        self.run, self.run_dir = run, Path(run_dir)
        self._db = open_db(self.db_path)
        pending = counts(self._db, run)["pending"]
        if pending:
            self.log(
                f"publishing: {pending} pending publication(s) of {run} from before; resuming them"
            )
        self._ensure_uploader()

    def evaluated(self, step: int) -> None:
        note_evaluations(
            self._db,
            self.run,
            self.target,
            checkpoint_for=self._finder(self._db, self.run, self.run_dir),
            run_dir=self.run_dir,
        )
        if not self._stopped_for_exposure():
            self._ensure_uploader()

    def _stopped_for_exposure(self) -> bool:
        """Whether the uploader found the repository public while private was asked: then no
        uploader is started again, and the trainer's output says so (once)."""
        from ccpo_cli.publishing.uploader import exposure_stop

        reason = exposure_stop(self._db, self.run, self.target.repo_id)
        if reason is not None and not self._exposure_said:
            self.log(
                f"publishing: STOPPED, nothing more is uploaded: {reason}; training goes on. "
                f"`ccpo publish --follow {self.run} --repo {self.target.repo_id} --public --retry-failed` "
                "publishes what is left once the repository may be public"
            )
            self._exposure_said = True
        return reason is not None

    def progress(self) -> str | None:
        """The last push (and how many wait), for the trainer's progress line."""
        if self._db is None:
            return None
        last = last_push(self._db, self.run)
        pending = counts(self._db, self.run)["pending"]
        waiting = f" ({pending} pending)" if pending else ""
        if last is None:
            return f"push: {pending} pending" if pending else None
        commit = f" {last['commit_id'][:8]}" if last["commit_id"] else ""
        return f"push: {last['role']} {last['kind']} step {last['step']} {last['outcome']}{commit}{waiting}"

    def finished(self, status: str, last_step: int, checkpoint: Path | None) -> None:
        if self._db is None:
            return
        if self._stopped_for_exposure():
            self._close_input()
            return
        if status == "finished":
            note_end(
                self._db,
                self.run,
                self.target,
                last_step=last_step,
                checkpoint=checkpoint,
                run_dir=self.run_dir,
            )
            self._ensure_uploader()
        elif status != "stopped":
            self.evaluated(last_step)
        self._close_input()
        if status == "stopped":  # Ctrl-C: leave at once, the outbox keeps what is pending
            self._stop()
            return
        started = time.monotonic()
        try:
            self.process.wait(timeout=self.target.end_wait_s)
        except subprocess.TimeoutExpired:
            self._stop()
        waited = time.monotonic() - started
        left = counts(self._db, self.run)
        if left["pending"]:
            self.log(
                f"publishing: {left['pending']} publication(s) still pending after waiting {waited:.0f} s "
                f"(--push-wait); `ccpo publish --follow {self.run} --repo {self.target.repo_id}` resumes them"
            )
        self.log(
            f"publishing: {left['done']} done, {left['failed']} failed, {left['skipped']} skipped "
            f"(`ccpo runs show {self.run}` lists every attempt; uploader log {self.log_path})"
        )
        from ccpo_cli.store.outbox import weights_without_card

        for weights in weights_without_card(self._db, self.run, self.target.repo_id):
            self.log(
                f"publishing: warning: the {weights['role']} weights of step {weights['step']} are on the Hub "
                f"(commit {str(weights['commit_id'])[:12]}) but no card names them: {weights['card']}"
            )


def publisher_for(
    db_path: str | Path,
    repo_id: str,
    *,
    backend: str,
    private: bool | None = None,
    end_wait_s: float | None = None,
    window_start: int | None = None,
    verl_agent: Path | None = None,
    log: Callable[[str], None] = lambda message: None,
    **access: Unpack[HubAccess],
) -> BackgroundPublisher:
    """The publisher `ccpo train --push-to-hub` hands its backend, every option checked (and the
    token found) before training starts."""
    from ccpo_cli.hub_access import required_token, resolve_token
    from ccpo_cli.publishing.plan import verl_checkpoints
    from ccpo_cli.publishing.target import push_target

    target = push_target(
        repo_id,
        endpoint=access.get("endpoint"),
        private=private,
        timeout=access.get("timeout"),
        deadline=access.get("deadline"),
        window_start=window_start,
        end_wait_s=end_wait_s,
    )
    secret = required_token(
        resolve_token(access.get("token"), access.get("token_file")), "--push-to-hub: "
    )
    check_visibility(target, secret, log)
    finder = (lambda db, run, run_dir: verl_checkpoints(run_dir)) if backend == VERL else None
    return BackgroundPublisher(
        db_path, target, secret, log=log, checkpoints=finder, verl_agent_home=verl_agent
    )


def check_visibility(target: PushTarget, token: str, log: Callable[[str], None]) -> None:
    """Before training starts: an existing public repository is refused unless --public was
    given (the uploader would refuse every upload, and say so only in its own log); with
    --public it is named on the trainer's own output. A Hub that cannot be asked now is said
    and left to the uploader, which checks again before its first upload."""
    from dataclasses import replace

    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.hub_access import HubCallError, hub_timeouts
    from ccpo_cli.hub_repo import open_session

    timeouts = replace(target.timeouts, command=min(target.timeouts.command, 30.0))
    try:
        with hub_timeouts(timeouts):
            session = open_session(
                target.repo_id, token=token, endpoint=target.endpoint, timeouts=timeouts
            )
            info = session.call("reading the repository", "model_info")
    except HubCallError as failure:
        if failure.status != 404:  # 404: a new repository, created private unless --public
            log(
                f"publishing: could not read {target.repo_id}'s visibility now ({failure}); the uploader checks "
                "before its first upload"
            )
        return
    public = getattr(info, "private", None) is False
    if public and target.private:
        raise InvalidInput(
            f"--push-to-hub {target.repo_id}: the repository is public on the Hub; ccpo uploads "
            "checkpoints and cards to a public repository only with --public (nothing was trained "
            "or uploaded)"
        )
    if public:
        log(
            f"publishing: {target.repo_id} is a PUBLIC repository: every checkpoint and card goes up publicly"
        )
