"""`ccpo runs show` says where a run's synced rows came from (`store.sync.dataset_sources`) and
which of its fields another machine recorded with another value (`store.sync_runs.
run_field_conflicts`); a run recorded only here shows neither. No Hub: parts go through a
folder, as in tests/test_store_sync.py."""

from __future__ import annotations

import json
from pathlib import Path

from helpers_sync import full_run, machine
from test_store_sync import REPO, _pull_from_folder, _push_to_folder
from test_sync_trust import _forged, _merge
from typer.testing import CliRunner

from ccpo_cli.cli.app import app

runner = CliRunner()


def _show(db_path: Path, run: str, *args: str) -> str:
    result = runner.invoke(app, ["--db", str(db_path), "runs", "show", run, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_pulled_run_names_the_dataset_commit_its_rows_came_from(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    parts = _push_to_folder(a, tmp_path / "hub", "node-a", "c1")
    c = machine(tmp_path, "node-c", monkeypatch)
    _pull_from_folder(c, parts, "c1")

    document = json.loads(_show(c, "r1", "--json"))
    [source] = document["dataset_sources"]
    assert source["repo_id"] == REPO and source["commit_id"] == "c1"
    assert source["rows"] == sum(part.rows for part in parts)
    assert document["field_conflicts"] == []
    assert f"pulled from {REPO} at commit c1: {source['rows']} rows" in _show(c, "r1")

    # The machine that recorded the run itself pulled nothing of it.
    own = json.loads(_show(a, "r1", "--json"))
    assert own["dataset_sources"] == [] and own["field_conflicts"] == []
    assert "pulled from" not in _show(a, "r1")


def test_fields_another_machine_recorded_otherwise_are_listed_with_both_values(
    tmp_path, monkeypatch
):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    forged, path = _forged(tmp_path, a, "runs", lambda row: dict(row, status="failed"))
    _merge(a, forged, path)

    document = json.loads(_show(a, "r1", "--json"))
    [conflict] = [c for c in document["field_conflicts"] if c["field"] == "status"]
    assert conflict["remote_value"] == "failed" and conflict["origin"] == path
    here = conflict["local_value"]
    assert document["run"]["status"] == here  # the local value stands
    assert f"status recorded elsewhere as 'failed' (here {here!r}; {path})" in _show(a, "r1")
