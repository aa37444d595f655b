"""A publication is about its run (issue 42, case 2): `publish --follow RUN --run-dir` must be
RUN's own folder (its run.json names RUN's uid), and a checkpoint goes up only when its sha256
is the one runs.db records for that run and step. Nothing is written into another run's folder.
Real SQLite, the loopback fake Hub, the CLI as a user runs it."""

from __future__ import annotations

import shutil

from helpers_hostile import assert_refused, invoke
from helpers_publishing import (
    OTHER,
    REPO,
    RUN,
    assert_once_and_tags_agree,
    best_step,
    ccpo_commits,
    checkpoint_file,
    follow_args,
    local_runs,
    run_folder,
)

from ccpo_cli import store
from ccpo_cli.store import outbox


def _tree(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_another_runs_folder_is_refused_and_left_untouched(tmp_path, hub):
    db_path = local_runs(tmp_path)
    theirs = run_folder(tmp_path, OTHER)
    before = _tree(theirs)
    result = invoke(*follow_args(db_path, hub.endpoint, "--run-dir", str(theirs)))
    assert_refused(result, 3, "belongs to run 'return-hard-fbjw'", "not to run 'return-hard'")
    assert ccpo_commits(hub) == [] and hub.requests == []
    assert _tree(theirs) == before  # no hard link, no publish/ folder in the other run's folder
    assert outbox.entries(store.open_db(db_path), RUN) == []


def test_a_folder_without_the_runs_identity_is_refused(tmp_path, hub):
    db_path = local_runs(tmp_path)
    stranger = tmp_path / "copied"
    shutil.copytree(run_folder(tmp_path, OTHER) / "checkpoints", stranger / "checkpoints")
    result = invoke(*follow_args(db_path, hub.endpoint, "--run-dir", str(stranger)))
    assert_refused(result, 3, "holds no run.json")
    assert ccpo_commits(hub) == []


def test_weights_whose_sha256_runs_db_does_not_record_are_never_published(tmp_path, hub):
    """The run's own folder, but its best checkpoint file was replaced by another run's weights
    of the same name: they are not this run's checkpoint, and never go up as one."""
    db_path = local_runs(tmp_path, final_weights=False)
    db = store.open_db(db_path)
    step = best_step(db, RUN)
    mine = checkpoint_file(run_folder(tmp_path), step)
    # The recorded path is relative (a ccpo from before absolute paths), so the folder is searched.
    row = next(r for r in db["checkpoints"].rows if r["path"] == str(mine))
    db["checkpoints"].update(row["id"], {"path": f"checkpoints/{mine.name}"})
    mine.write_bytes(b"the weights of another run, copied over this one's\n" * 64)
    result = invoke(*follow_args(db_path, hub.endpoint, "--run-dir", str(run_folder(tmp_path))))
    assert result.exit_code == 0, result.output
    assert not [c for c in ccpo_commits(hub) if "checkpoint" in c.message]
    published = b"".join(
        content for commit in hub.history(REPO) for content in commit.files.values()
    )
    assert b"another run" not in published


def test_weights_swapped_after_they_were_queued_are_not_published(tmp_path, hub):
    db_path = local_runs(tmp_path, finished=False)
    db = store.open_db(db_path)
    step = best_step(db, RUN)
    planned = invoke(*follow_args(db_path, hub.endpoint, "--dry-run"))
    assert planned.exit_code == 0, planned.output
    # Queue (a round whose uploads all fail: the Hub answers 503 to every commit)...
    hub.inject("status", method="POST", path="/commit/", status=503, times=1000)
    invoke(*follow_args(db_path, hub.endpoint, "--deadline", "3"))
    hub.faults.clear()
    [queued] = [e for e in outbox.entries(db, RUN, REPO) if e.kind == "checkpoint"]
    # ...then the kept file is overwritten in place before the next round uploads it.
    kept = queued.source
    with open(kept, "r+b") as handle:
        handle.write(b"X")
    db.execute("UPDATE publication_outbox SET next_attempt_at = NULL")
    invoke(*follow_args(db_path, hub.endpoint))
    [entry] = [e for e in outbox.entries(db, RUN, REPO) if e.kind == "checkpoint"]
    assert entry.state == "skipped" and "not the checkpoint runs.db records" in entry.reason, entry
    assert not [
        c for c in ccpo_commits(hub) if f"step {step}" in c.message and "checkpoint" in c.message
    ]
    assert_once_and_tags_agree(hub, [db_path])
