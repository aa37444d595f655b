"""Only this machine writes its runs: a pulled part, in any host folder (this machine's own
included), that touches one of this machine's runs is kept as a field conflict or a held row,
shown by `runs show`, in no number until `ccpo sync accept`; a held retraction is undone by
`ccpo sync reject`. A pull has a row and growth budget, and a part that fails to download or has
a bad path is recorded and skipped while the parts after it merge.

Asked for in issue 42, case 3.
"""

from __future__ import annotations

import json

import pytest
from helpers_hostile import invoke
from helpers_hub import TOKEN
from helpers_sync import copy_database, full_run, machine
from test_sync_trust import FAST, REPO, _forged, _merge

from ccpo_cli.hub_sync import SyncLimits, pull, push
from ccpo_cli.store import get_run, open_db, run_evaluations
from ccpo_cli.store.retractions import retract
from ccpo_cli.store.sync_export import write_parts
from ccpo_cli.store.sync_runs import run_field_conflicts


def _rates(db_path, run="r1"):
    return [(row["step"], row["success_rate"]) for row in run_evaluations(open_db(db_path), run)]


def test_a_forged_snapshot_in_this_machines_own_folder_rewrites_nothing(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    before = get_run(open_db(a), "r1")

    def rewrite(row):
        return dict(row, status="failed", total_steps=1, config='{"forged": true}',
                    updated_at="2026-12-01T23:59:59+00:00")  # fmt: skip

    _merge(a, *_forged(tmp_path, a, "runs", rewrite, folder_host="node-a"))
    after = get_run(open_db(a), "r1")
    for column in ("status", "total_steps", "config", "updated_at"):
        assert after[column] == before[column], column
    fields = {c["field"] for c in run_field_conflicts(open_db(a), after["id"])}
    assert {"status", "total_steps", "config"} <= fields


def _foreign_evaluation(tmp_path, a, monkeypatch):
    """node-b records another evaluation of node-a's run at a step it has, and writes it as a
    part of its own folder."""
    b = machine(tmp_path, "node-b", monkeypatch)
    copy_database(a, b)
    from helpers_sync import record_step

    record_step(open_db(b), "r1", 4, 4, salt=9, eval_seed=5)  # a new eval seed: no conflict
    parts = write_parts(open_db(b), tmp_path / "b-parts", "node-b", repo_id=None)
    monkeypatch.setenv("CCPO_HOST", "node-a")
    return [part for part in parts if part.table == "evaluations"]


def test_a_foreign_evaluation_is_held_out_of_every_number_until_accepted(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    before = _rates(a)
    [part] = _foreign_evaluation(tmp_path, a, monkeypatch)
    counts = _merge(a, part.local_path, part.path_in_repo)
    assert counts.by_table["evaluations"]["held"] == 1
    assert _rates(a) == before

    shown = invoke("--db", a, "runs", "show", "r1", "--json")
    held = json.loads(shown.stdout)["held_from_sync"]
    assert [(row["table"], row["state"]) for row in held] == [("evaluations", "held")]
    text = invoke("--db", a, "runs", "show", "r1")
    assert "held from sync" in text.stdout and "ccpo sync accept r1" in text.stdout

    accepted = invoke("--db", a, "sync", "accept", "r1", "--id", str(held[0]["id"]), "--json")
    assert accepted.exit_code == 0, accepted.output
    assert len(_rates(a)) == len(before) + 1
    again = invoke("--db", a, "sync", "accept", "r1", "--id", str(held[0]["id"]))
    assert again.exit_code == 3  # settled already: no held row of that id


def test_a_foreign_whole_run_retraction_is_held_and_can_be_rejected(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    b = machine(tmp_path, "mallory", monkeypatch)
    copy_database(a, b)
    retract(open_db(b), "r1", reason="forged", by="mallory")
    parts = write_parts(open_db(b), tmp_path / "m-parts", "node-a", repo_id=None)
    [part] = [part for part in parts if part.table == "retractions"]
    monkeypatch.setenv("CCPO_HOST", "node-a")
    _merge(a, part.local_path, part.path_in_repo)  # in node-a's own folder, even
    assert not get_run(open_db(a), "r1").get("retracted")
    assert open_db(a)["retractions"].count == 0
    rejected = invoke("--db", a, "sync", "reject", "r1", "--json")
    assert rejected.exit_code == 0, rejected.output
    assert json.loads(rejected.stdout)["rejected"][0]["outcome"] == "rejected"
    shown = json.loads(invoke("--db", a, "runs", "show", "r1", "--json").stdout)
    assert [row["state"] for row in shown["held_from_sync"]] == ["rejected"]
    assert open_db(a)["retractions"].count == 0


def test_this_machines_own_rows_pulled_back_are_duplicates_not_held(hub, tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    push(open_db(a), REPO, token=TOKEN, endpoint=hub.endpoint, host="node-a", rule=FAST)
    fresh = tmp_path / "restored" / "runs.db"
    fresh.parent.mkdir()
    copy_database(a, fresh)  # the same machine, its runs.db restored: the dataset is not known
    open_db(fresh).execute("DELETE FROM sync_items")
    open_db(fresh).execute("DELETE FROM sync_parts")
    result = pull(open_db(fresh), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST)
    assert all("held" not in counts for counts in result["counts"].values()), result["counts"]
    assert open_db(fresh)["sync_held_rows"].count == 0


def _two_machines_pushed(hub, tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    push(open_db(a), REPO, token=TOKEN, endpoint=hub.endpoint, host="node-a", rule=FAST)
    return machine(tmp_path, "node-c", monkeypatch)


def test_a_part_that_never_downloads_is_skipped_recorded_and_tried_again(
    hub, tmp_path, monkeypatch
):
    c = _two_machines_pushed(hub, tmp_path, monkeypatch)
    files = hub.datasets[REPO].branches["main"][-1].files
    [facts] = [path for path in files if "/facts-" in path]
    hub.inject("status", method="GET", path=facts.split("/")[-1], times=1000, status=404)
    first = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST)
    assert [item["part"] for item in first["parts_refused"]] == [facts]
    assert "download failed" in first["parts_refused"][0]["reason"]
    assert len(run_evaluations(open_db(c), "r1")) == 2  # the parts after it merged
    again = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST)
    assert [item["part"] for item in again["parts_refused"]] == [facts]  # tried again


@pytest.mark.parametrize("bad", ["data/../x/facts-1.parquet", "data/node-z/../facts-1.parquet"])
def test_a_listed_part_path_with_dot_dot_is_refused_and_the_rest_merges(
    hub, tmp_path, monkeypatch, bad
):
    c = _two_machines_pushed(hub, tmp_path, monkeypatch)
    hub.datasets[REPO].branches["main"][-1].files[bad] = b"x"
    result = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST)
    assert [item["part"] for item in result["parts_refused"]] == [bad]
    assert len(run_evaluations(open_db(c), "r1")) == 2


def test_a_pull_stops_at_its_row_budget_and_the_rest_waits(hub, tmp_path, monkeypatch):
    c = _two_machines_pushed(hub, tmp_path, monkeypatch)
    small = SyncLimits(max_pull_rows=2)
    first = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST, limits=small)
    assert first["parts_waiting"] > 0
    assert "budget of 2 rows" in first["parts_refused"][-1]["reason"]
    merged = first["parts_merged"]
    second = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST, limits=small)
    assert second["parts_merged"] + merged > merged  # the next pull goes on


def test_a_part_alone_past_the_growth_budget_is_refused(hub, tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=tuple(range(2, 120, 2)))  # an evaluations part of many pages
    push(open_db(a), REPO, token=TOKEN, endpoint=hub.endpoint, host="node-a", rule=FAST)
    c = machine(tmp_path, "node-c", monkeypatch)
    tiny = SyncLimits(max_pull_growth_bytes=16 << 10)
    result = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST, limits=tiny)
    assert any("grow runs.db" in item["reason"] for item in result["parts_refused"])
