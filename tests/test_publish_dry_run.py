"""`publish --follow --dry-run` writes nothing anywhere and lists exactly what a real follow then
publishes (issue 42, case 8), final weights and card included; a final card never states that no
checkpoint is recorded while one of the run's checkpoints is tagged on the Hub. Real SQLite, the
loopback fake Hub, the CLI as a user runs it."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from helpers_hostile import invoke
from helpers_publishing import REPO, RUN, ccpo_commits, follow_args, local_runs, run_folder

from ccpo_cli import store
from ccpo_cli.store import outbox


def _snapshot(folder):
    """Every file under `folder` with its content digest (runs.db, the run folders), and every
    row of runs.db (SQLite's own -wal and -shm come and go with its connections)."""
    files = {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.name.endswith(("-wal", "-shm"))
    }
    with sqlite3.connect(f"file:{folder / 'runs.db'}?mode=ro", uri=True) as connection:
        rows = list(connection.iterdump())
    return files, rows


def test_a_dry_run_writes_nothing_and_lists_what_a_follow_publishes(tmp_path, hub_env, no_sockets):
    db_path = local_runs(tmp_path)
    store.open_db(db_path).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    before = _snapshot(tmp_path)
    result = invoke(*follow_args(db_path, "http://127.0.0.1:9", "--dry-run", "--json"))
    assert result.exit_code == 0, result.output
    assert _snapshot(tmp_path) == before  # no outbox row, no hard link in the run folder
    assert not (run_folder(tmp_path) / "publish").exists()
    assert no_sockets == []
    plan = [(e["role"], e["kind"], e["step"]) for e in json.loads(result.stdout)["would_publish"]]
    assert plan == [
        ("best", "checkpoint", 115),
        ("final", "checkpoint", 150),
        ("final", "card", 150),
    ]


def test_the_plan_is_what_the_real_follow_then_publishes(tmp_path, hub):
    db_path = local_runs(tmp_path)
    planned = invoke(*follow_args(db_path, hub.endpoint, "--dry-run", "--json"))
    assert planned.exit_code == 0, planned.output
    assert hub.requests == []
    real = invoke(*follow_args(db_path, hub.endpoint, "--json"))
    assert real.exit_code == 0, real.output
    done = [(e["role"], e["kind"], e["step"]) for e in json.loads(real.stdout)["done"]]
    plan = [(e["role"], e["kind"], e["step"]) for e in json.loads(planned.stdout)["would_publish"]]
    assert plan == done and len(ccpo_commits(hub)) == len(done)


def test_a_final_card_names_the_tagged_best_checkpoint_when_the_last_step_has_none(tmp_path, hub):
    db_path = local_runs(tmp_path, final_weights=False)
    result = invoke(*follow_args(db_path, hub.endpoint))
    assert result.exit_code == 0, result.output
    repo = hub.repos[REPO]
    final = hub.history(REPO)[-1]
    assert repo.tags["final"] == final.oid and "step-115" in repo.tags
    readme = final.files["README.md"].decode()
    assert "no checkpoint is recorded" not in readme.lower()
    assert repo.tags["step-115"][:12] in readme
    summary = json.loads(final.files["results/ccpo_summary.json"])
    assert summary["weights"]["commit"] == repo.tags["step-115"]
    db = store.open_db(db_path)
    [card] = [e for e in outbox.entries(db, RUN, REPO, state="done") if e.kind == "card"]
    assert card.role == "final" and card.tag == "final"
