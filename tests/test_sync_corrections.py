"""Retractions and settled conflicts travel with `ccpo sync` (issue 29, item 4): a result one
machine retracted, or a conflict it settled, is out of every number on the machine that pulls,
and a push never claims to have sent what it did not. Parts are written and merged as a push
and a pull do (store/sync*.py), without the Hub; real SQLite and parquet."""

from __future__ import annotations

from pathlib import Path

from helpers_sync import copy_database, full_run, machine, record_step
from test_store_sync import _pull_from_folder, _push_to_folder

from ccpo_cli.store import open_db, run_conflicts, run_evaluations
from ccpo_cli.store.retractions import resolve, retract
from ccpo_cli.store.sync_export import write_parts


def _standing_steps(db_path: Path, run: str) -> list[tuple[int, float]]:
    return [(row["step"], row["success_rate"]) for row in run_evaluations(open_db(db_path), run)]


def test_a_retraction_and_a_resolution_reach_the_machine_that_pulls(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4, 6))  # holds a conflict at step 2
    b = machine(tmp_path, "node-b", monkeypatch)
    monkeypatch.setenv("CCPO_HOST", "node-a")
    _pull_from_folder(b, _push_to_folder(a, tmp_path / "dataset", "node-a", "c1"), "c1")
    assert _standing_steps(b, "r1") == _standing_steps(a, "r1")
    assert [c["resolution"] for c in run_conflicts(open_db(b), "r1")] == [None]

    # A retracts step 4 and settles the conflict at step 2 by keeping the conflicting value.
    retract(open_db(a), "r1", step=4, reason="evaluated on the training games", by="alice@node-a")
    conflict = run_conflicts(open_db(a), "r1")[0]
    kept = conflict["content"]["success_rate"]
    resolve(
        open_db(a), "r1", step=2, keep=repr(kept), reason="the rerun is right", by="alice@node-a"
    )
    before_b = _standing_steps(b, "r1")
    assert before_b != _standing_steps(
        a, "r1"
    )  # the two machines disagree until the corrections travel

    parts = _push_to_folder(a, tmp_path / "dataset", "node-a", "c2")
    assert {part.table for part in parts} >= {"retractions", "resolutions"}
    _pull_from_folder(b, parts, "c2")
    assert _standing_steps(b, "r1") == _standing_steps(a, "r1")
    assert (2, kept) in _standing_steps(b, "r1") and all(
        step != 4 for step, _ in _standing_steps(b, "r1")
    )
    [settled] = run_conflicts(open_db(b), "r1")
    assert settled["resolution"] is not None

    # Pulled again, or pushed back from B: nothing new, and no correction is made twice.
    assert write_parts(open_db(b), tmp_path / "again", "node-b", repo_id="tester/results") == []
    retractions = open_db(b)["retractions"].count
    _pull_from_folder(b, parts, "c2")
    assert open_db(b)["retractions"].count == retractions


def test_a_whole_run_retraction_travels_and_a_missing_result_changes_nothing(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    b = machine(tmp_path, "node-b", monkeypatch)
    copy_database(a, b)
    monkeypatch.setenv("CCPO_HOST", "node-a")
    record_step(open_db(a), "r1", 8, 1)
    retract(open_db(a), "r1", reason="the wrong games", by="alice@node-a")
    retract(open_db(a), "r1", step=8, reason="a stray point", by="alice@node-a")
    parts = _push_to_folder(a, tmp_path / "dataset", "node-a", "c1")
    only_corrections = [part for part in parts if part.table == "retractions"]
    counts = _pull_from_folder(b, only_corrections, "c1")  # step 8 never reached B
    outcomes = {outcome for total in counts for outcome in total.by_table["retractions"]}
    assert outcomes == {"new", "not_here"}
    assert open_db(b)["retractions"].count_where("evaluation_id IS NULL") == 1
