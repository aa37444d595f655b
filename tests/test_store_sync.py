"""The database side of `ccpo sync`: rows out as parquet parts, back in with the store's rules,
matched by the runs' global ids (no Hub here: tests/test_sync_hub.py adds it)."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest
from helpers_sync import as_machine, copy_database, full_run, machine, record_step, table_snapshot

from ccpo_cli.errors import InvalidInput
from ccpo_cli.names import check_run_name
from ccpo_cli.store import get_run, list_runs, open_db, run_conflicts, run_evaluations
from ccpo_cli.store.sync import dataset_sources, mark_pushed, merge_part, part_already_merged
from ccpo_cli.store.sync_export import export_chunks, write_parts
from ccpo_cli.store.sync_format import TABLES
from ccpo_cli.store.sync_merge import Origin, merge_chunks
from ccpo_cli.store.sync_read import read_part

REPO = "tester/results"


def _push_to_folder(db_path: Path, folder: Path, host: str, commit: str) -> list:
    """A push without the Hub: parts written to `folder`, then marked as in the dataset."""
    parts = write_parts(open_db(db_path), folder / commit, host, repo_id=REPO)
    mark_pushed(open_db(db_path), REPO, commit, parts)
    return parts


def _pull_from_folder(db_path: Path, parts: list, commit: str):
    """A pull without the Hub, run on the machine whose runs.db it is."""
    with as_machine(db_path):
        db = open_db(db_path)
        totals = []
        for part in sorted(parts, key=lambda p: (TABLES.index(p.table), p.path_in_repo)):
            if not part_already_merged(db, REPO, part.path_in_repo, None):
                totals.append(
                    merge_part(
                        db,
                        part.local_path,
                        Origin(REPO, commit, part.path_in_repo),
                    )
                )
        return totals


def test_parts_are_typed_parquet_named_by_host_and_run(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    parts = write_parts(open_db(a), tmp_path / "out", "node-a", repo_id=REPO)
    assert sorted(part.table for part in parts) == [
        "conflicts",
        "evaluations",
        "facts",
        "publications",
        "runs",
    ]
    for part in parts:
        assert part.path_in_repo.startswith(
            "data/node-a/r1/" + part.table + "-"
        ) and part.path_in_repo.endswith(".parquet")
    evaluations = next(part for part in parts if part.table == "evaluations")
    table = pq.read_table(evaluations.local_path)
    assert table.num_rows == 2
    assert table.schema.field("episode_rows").type.value_type.field("won").type == "int64"
    assert table.schema.metadata[b"ccpo_table"] == b"evaluations"
    # Nothing new since the push: the next push has nothing to send.
    mark_pushed(open_db(a), REPO, "commit-1", parts)
    assert list(export_chunks(open_db(a), repo_id=REPO)) == []
    record_step(open_db(a), "r1", 6, 3)
    (chunk,) = [c for c in export_chunks(open_db(a), repo_id=REPO) if c.table == "evaluations"]
    assert [row["step"] for row in chunk.rows] == [6]


@pytest.mark.slow
def test_a_pull_holds_every_row_once_and_a_second_pull_changes_nothing(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    parts = _push_to_folder(a, tmp_path / "hub", "node-a", "c1")
    c = machine(tmp_path, "node-c", monkeypatch)
    _pull_from_folder(c, parts, "c1")
    assert table_snapshot(c) == table_snapshot(a)
    run = get_run(open_db(c), "r1")
    assert (
        run["uid"] == get_run(open_db(a), "r1")["uid"]
        and run["host"] == "node-a"
        and run["arm"] == "grpo"
    )
    assert len(run_conflicts(open_db(c), "r1")) == 1
    assert dataset_sources(open_db(c), run["id"])[0]["commit_id"] == "c1"
    before = table_snapshot(c), [dict(r) for r in open_db(c)["runs"].rows]
    # Merging the same parts again (forgetting they were merged) still changes nothing.
    for part in parts:
        merge_part(open_db(c), part.local_path, Origin(REPO, "c1", part.path_in_repo))
    assert (table_snapshot(c), [dict(r) for r in open_db(c)["runs"].rows]) == before
    # The pulled rows are known to be in the dataset: machine C has nothing of its own to push.
    assert list(export_chunks(open_db(c), repo_id=REPO)) == []


@pytest.mark.slow
def test_same_named_runs_of_two_machines_stay_two_runs(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "shared-name")
    parts_a = _push_to_folder(a, tmp_path / "hub", "node-a", "c1")
    b = machine(tmp_path, "node-b", monkeypatch)
    full_run(b, "shared-name", wins_offset=2, seed=1)
    parts_b = _push_to_folder(b, tmp_path / "hub", "node-b", "c2")
    _pull_from_folder(b, parts_a, "c2")
    names = {run["name"]: run for run in list_runs(open_db(b))}
    assert set(names) == {"shared-name", "shared-name@node-a"}
    assert (
        names["shared-name"]["host"] == "node-b" and names["shared-name@node-a"]["host"] == "node-a"
    )
    assert names["shared-name@node-a"]["seed"] == 0 and names["shared-name"]["seed"] == 1
    check_run_name("shared-name@node-a")  # the shown name is a valid run name for every command
    c = machine(tmp_path, "node-c", monkeypatch)
    _pull_from_folder(c, parts_a + parts_b, "c2")
    assert sorted(run["name"] for run in list_runs(open_db(c))) == [
        "shared-name",
        "shared-name@node-b",
    ]
    assert len(run_evaluations(open_db(c), "shared-name@node-b")) == 2


def test_a_copied_database_is_the_same_run_and_a_different_result_is_a_conflict(
    tmp_path, monkeypatch
):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    b = machine(tmp_path, "node-b", monkeypatch)
    copy_database(a, b)
    # Each machine goes on with the run: B adds step 6, A re-records step 4 with another result.
    record_step(open_db(b), "r1", 6, 2)
    record_step(open_db(a), "r1", 4, 0, salt=7)
    parts_a = _push_to_folder(a, tmp_path / "hub", "node-a", "c1")
    parts_b = _push_to_folder(b, tmp_path / "hub", "node-b", "c2")
    # B's push leaves out what both had before the copy only if A's push is known to B; here it
    # is not, so both send the shared rows, and the pull keeps each once.
    # B's rows of A's run sit in B's folder: B's snapshot cannot move the run on (only the run's
    # own machine does), so B's evaluation past the run's recorded steps is refused with its part.
    c = machine(tmp_path, "node-c", monkeypatch)
    _pull_from_folder(c, parts_a, "c1")
    with pytest.raises(InvalidInput, match="past the run's recorded steps"):
        _pull_from_folder(c, [part for part in parts_b if part.table == "evaluations"], "c2")
    _pull_from_folder(c, [part for part in parts_b if part.table != "evaluations"], "c2")
    (run,) = list_runs(open_db(c))
    assert run["name"] == "r1" and run["last_step"] == 4
    steps = sorted(row["step"] for row in run_evaluations(open_db(c), "r1"))
    assert steps == [2, 4]
    conflicts = run_conflicts(open_db(c), "r1")
    assert sorted(row["step"] for row in conflicts) == [
        2,
        4,
    ]  # the copy's conflict, and A's new one
    _pull_from_folder(b, parts_a, "c2")
    assert sorted(row["step"] for row in run_conflicts(open_db(b), "r1")) == [2, 4]


def test_a_run_created_after_the_copy_and_ray_chunks_merge_in_one_transaction(
    tmp_path, monkeypatch
):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    chunks = list(export_chunks(open_db(a)))
    driver = machine(tmp_path, "driver", monkeypatch)
    first = merge_chunks(open_db(driver), chunks, where="block")
    assert first.by_table["runs"]["new"] == 1 and first.by_table["evaluations"]["new"] == 2
    assert first.by_table["conflicts"]["conflict"] == 1
    again = merge_chunks(open_db(driver), chunks, where="block")
    assert again.total("new") == 0 and again.by_table["evaluations"]["duplicate"] == 2
    assert table_snapshot(driver) == table_snapshot(a)


def test_an_altered_part_is_refused_and_nothing_of_it_is_written(tmp_path, monkeypatch):
    import pyarrow as pa

    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    parts = write_parts(open_db(a), tmp_path / "out", "node-a", repo_id=REPO)
    runs_part = next(part for part in parts if part.table == "runs")
    evaluations = next(part for part in parts if part.table == "evaluations")
    table = pq.read_table(evaluations.local_path)
    rates = table.column("success_rate").to_pylist()
    rates[0] = 99.0
    altered = table.set_column(
        table.schema.get_field_index("success_rate"), "success_rate", pa.array(rates)
    )
    pq.write_table(altered, evaluations.local_path)
    c = machine(tmp_path, "node-c", monkeypatch)
    merge_part(
        open_db(c),
        runs_part.local_path,
        Origin(REPO, "c1", runs_part.path_in_repo),
    )
    with pytest.raises(InvalidInput, match="does not match its content hash|disagrees"):
        merge_part(
            open_db(c),
            evaluations.local_path,
            Origin(REPO, "c1", evaluations.path_in_repo),
        )
    assert open_db(c)["evaluations"].count == 0
    assert not part_already_merged(open_db(c), REPO, evaluations.path_in_repo, None)
    # Right columns, wrong contents: an episode's extra fields that are not JSON.
    rows = table.to_pylist()
    rows[0]["episode_rows"][0]["extra"] = "{not json"
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), evaluations.local_path)
    with pytest.raises(InvalidInput, match="a row of evaluations that ccpo cannot read"):
        merge_part(
            open_db(c),
            evaluations.local_path,
            Origin(REPO, "c1", evaluations.path_in_repo),
        )
    assert open_db(c)["evaluations"].count == 0
    not_parquet = tmp_path / "junk.parquet"
    not_parquet.write_bytes(b"PAR1 nothing")
    with pytest.raises(InvalidInput, match="not a readable parquet part"):
        read_part(not_parquet, "data/x/r/runs-1-2.parquet")


def test_without_pyarrow_parts_are_one_clear_error(tmp_path, monkeypatch):
    import sys

    from ccpo_cli.errors import CcpoError

    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    with pytest.raises(CcpoError, match=r"pip install 'ccpo\[sync\]'"):
        write_parts(open_db(a), tmp_path / "out", "node-a", repo_id=REPO)
    # The Ray path moves rows without parquet: it does not need pyarrow.
    assert (
        merge_chunks(
            open_db(machine(tmp_path, "driver", monkeypatch)),
            list(export_chunks(open_db(a))),
            where="block",
        ).by_table["evaluations"]["new"]
        == 2
    )
