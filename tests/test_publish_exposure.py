"""Nothing exposed (issue 42, case 5): the repository's visibility is read before every upload,
not only at start. A repository made public mid-run while private was asked stops the uploads,
says so (the follower's output, the trainer's output, the uploader's log) and exits 3; a Hub
that creates the repository public leaves failed entries that `--public --retry-failed` then
publishes. Real SQLite, the loopback fake Hub, the CLI and the uploader process."""

from __future__ import annotations

import time

from helpers_hostile import invoke
from helpers_publishing import (
    REPO,
    RUN,
    assert_once_and_tags_agree,
    best_step,
    ccpo_commits,
    follow_args,
    local_runs,
    run_folder,
)

from ccpo_cli import store
from ccpo_cli.publishing.uploader import EXPOSED
from ccpo_cli.store import outbox


def _made_public_after_the_first_commit(hub) -> None:
    def flip(repo) -> None:
        repo.private = False  # the owner changes the setting while ccpo is publishing

    hub.before_next_commit = flip


def test_a_repository_made_public_mid_run_stops_the_uploads(tmp_path, hub):
    db_path = local_runs(tmp_path)
    _made_public_after_the_first_commit(hub)
    result = invoke(*follow_args(db_path, hub.endpoint))
    assert result.exit_code == 3, result.output
    assert "public" in result.stderr.splitlines()[-1] and "Traceback" not in result.output
    assert "publishing stopped" in result.stderr
    # The checkpoint commit that was being applied when it changed is the only one.
    assert [c.message for c in ccpo_commits(hub)] == [
        f"ccpo: best checkpoint so far of {RUN} at step 115"
    ]
    db = store.open_db(db_path)
    left = [e for e in outbox.entries(db, RUN, REPO) if e.state == "failed"]
    assert left and all(e.reason.startswith(EXPOSED) for e in left)
    # What was stopped waits, failed, until --public --retry-failed queues it again.
    again = invoke(*follow_args(db_path, hub.endpoint, "--public", "--retry-failed"))
    assert again.exit_code == 0, again.output
    assert [c.message for c in ccpo_commits(hub)][-1] == f"ccpo: final card for {RUN}"
    assert_once_and_tags_agree(hub, [db_path])


def test_a_hub_that_creates_the_repository_public_leaves_entries_public_retry_publishes(
    tmp_path, hub
):
    db_path = local_runs(tmp_path)
    hub.create_public = True
    result = invoke(*follow_args(db_path, hub.endpoint))
    assert result.exit_code == 3, result.output
    assert ccpo_commits(hub) == [] and not hub.repos[REPO].private
    db = store.open_db(db_path)
    assert {e.state for e in outbox.entries(db, RUN, REPO) if e.kind == "checkpoint"} == {"failed"}
    again = invoke(*follow_args(db_path, hub.endpoint, "--public", "--retry-failed"))
    assert again.exit_code == 0, again.output
    assert [c.message for c in ccpo_commits(hub)] == [
        f"ccpo: best checkpoint so far of {RUN} at step 115",
        f"ccpo: final weights of {RUN} at step 150",
        f"ccpo: final card for {RUN}",
    ]
    assert_once_and_tags_agree(hub, [db_path])


def test_the_trainer_says_it_and_the_uploader_logs_it(tmp_path, hub):
    """`--push-to-hub` beside a trainer: the repository turns public after the first upload; the
    uploader process logs it and exits 3, the trainer's output says publishing stopped."""
    from test_push_to_hub import REPO as PUSHED
    from test_push_to_hub import publisher

    db_path = local_runs(tmp_path, finished=False)
    db = store.open_db(db_path)
    observer, messages = publisher(db_path, hub, end_wait_s=60)
    _made_public_after_the_first_commit(hub)
    observer.started(RUN, run_folder(tmp_path))
    observer.evaluated(best_step(db, RUN))
    ends = time.monotonic() + 60
    while observer.process.poll() is None and time.monotonic() < ends:
        time.sleep(0.2)
    assert observer.process.returncode == 3
    observer.evaluated(best_step(db, RUN))  # the next evaluation: said, no new uploader
    observer.finished("finished", 119, None)
    stopped = [m for m in messages if "STOPPED" in m]
    assert len(stopped) == 1 and "public" in stopped[0], messages
    log = observer.log_path.read_text()
    assert "publishing stopped" in log and "public" in log
    assert (
        len(ccpo_commits(hub, PUSHED)) == 1
    )  # the checkpoint in flight when it changed, nothing after
