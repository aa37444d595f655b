"""Sync trusts no part (issue 30, item 3): a hand-made part pulled into this database cannot
rewrite this machine's run, win "newer" with a forged time, add evaluations past the run's
recorded steps or a 2^62 last step, or block the rest of a pull. Real parquet, real SQLite,
the real pull against the loopback fake Hub for the skip-and-record path."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers_hub import TOKEN
from helpers_sync import copy_database, full_run, machine

from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import RetryRule
from ccpo_cli.hub_sync import pull, push
from ccpo_cli.store import get_run, open_db, run_evaluations
from ccpo_cli.store.sync import merge_part
from ccpo_cli.store.sync_export import write_parts
from ccpo_cli.store.sync_merge import Origin
from ccpo_cli.store.sync_runs import run_field_conflicts

REPO = "tester/results"
FAST = RetryRule(attempts=3, first_wait_s=0.05, max_wait_s=0.2)


def _forged(
    tmp_path: Path, db_path: Path, table: str, change, folder_host: str = "mallory"
) -> tuple[Path, str]:
    """This machine's own part of `table`, its rows changed by `change`, under another host's folder."""
    [part] = [
        p
        for p in write_parts(open_db(db_path), tmp_path / "forge", "node-a", repo_id=None)
        if p.table == table
    ]
    original = pq.read_table(part.local_path)
    rows = [change(dict(row)) for row in original.to_pylist()]
    forged = tmp_path / f"forged-{table}.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=original.schema), forged)
    return forged, part.path_in_repo.replace("data/node-a/", f"data/{folder_host}/")


def _merge(db_path: Path, local: Path, path: str):
    return merge_part(open_db(db_path), local, Origin(REPO, "c" * 40, path))


def test_a_foreign_snapshot_of_this_machines_run_is_a_conflict_never_a_replacement(
    tmp_path, monkeypatch
):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    before = get_run(open_db(a), "r1")

    def rewrite(row):
        return dict(
            row,
            status="failed",
            total_steps=400,
            hardware='{"gpu": "none"}',
            updated_at="2026-12-01T23:59:59+00:00",
            config='{"forged": true}',
        )

    _merge(a, *_forged(tmp_path, a, "runs", rewrite))
    after = get_run(open_db(a), "r1")
    for column in ("status", "total_steps", "hardware", "config", "last_step", "updated_at"):
        assert after[column] == before[column], column
    assert {c["field"] for c in run_field_conflicts(open_db(a), after["id"])} >= {
        "status",
        "total_steps",
    }


@pytest.mark.parametrize("stamp", ["9999-12-31T00:00:00+00:00", "zzz", "2999-01-01"])
def test_a_time_that_is_not_one_or_lies_in_the_future_is_refused(tmp_path, monkeypatch, stamp):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    before = get_run(open_db(a), "r1")
    with pytest.raises(InvalidInput, match="not a time|in the future"):
        _merge(
            a,
            *_forged(
                tmp_path,
                a,
                "runs",
                lambda row: dict(row, updated_at=stamp, status="failed"),
                "node-a",
            ),
        )
    assert get_run(open_db(a), "r1") == before


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda row: dict(row, last_step=2**62), "is not a step"),
        (lambda row: dict(row, last_step=-1), "is not a step"),
    ],
)
def test_a_forged_last_step_is_refused(tmp_path, monkeypatch, change, words):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    with pytest.raises(InvalidInput, match=words):
        _merge(a, *_forged(tmp_path, a, "runs", change, "node-a"))
    assert get_run(open_db(a), "r1")["last_step"] == 4


def test_an_evaluation_past_the_runs_recorded_steps_is_refused(tmp_path, monkeypatch):
    from ccpo_cli.store.evaluation_content import evaluation_content

    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    rates = [row["success_rate"] for row in run_evaluations(open_db(a), "r1")]

    def step_seven(row):
        # A consistent row (its content hash recomputed), only its step is past the run's 4.
        content = evaluation_content(
            7,
            split=row["split"],
            episodes=row["episodes"],
            successes=row["successes"],
            success_rate=row["success_rate"],
            mean_turns=row["mean_turns"],
            temperature=row["temperature"],
            eval_seed=row["eval_seed"],
            task_types={},
            episode_rows=[],
        )
        return dict(row, step=7, task_types=[], episode_rows=[], content_hash=content.content_hash)

    forged = _forged(tmp_path, a, "evaluations", step_seven, "node-a")
    # On a machine that holds node-a's run as another machine's run, the row is refused.
    b = machine(tmp_path, "node-b", monkeypatch)
    copy_database(a, b)
    with pytest.raises(InvalidInput, match="past the run's recorded steps"):
        _merge(b, *forged)
    assert [row["success_rate"] for row in run_evaluations(open_db(b), "r1")] == rates
    # On node-a itself the run is its own: the row is held, in no number (issue 42, case 3).
    monkeypatch.setenv("CCPO_HOST", "node-a")
    _merge(a, *forged)
    assert [row["success_rate"] for row in run_evaluations(open_db(a), "r1")] == rates


def test_a_bad_part_is_named_skipped_and_recorded_while_the_rest_merges(hub, tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    push(open_db(a), REPO, token=TOKEN, endpoint=hub.endpoint, host="node-a", rule=FAST)
    bad = "data/node-z/zz/facts-0000000000001-" + "0" * 32 + ".parquet"
    hub.datasets[REPO].branches["main"][-1].files[bad] = b"not parquet at all"
    c = machine(tmp_path, "node-c", monkeypatch)
    first = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST)
    assert [item["part"] for item in first["parts_refused"]] == [bad]
    assert "not a readable parquet part" in first["parts_refused"][0]["reason"]
    assert first["rows_new"] > 0 and len(run_evaluations(open_db(c), "r1")) == 2
    again = pull(open_db(c), REPO, token=TOKEN, endpoint=hub.endpoint, rule=FAST)
    assert again["parts_refused"] == [] and again["parts_merged"] == 0  # recorded: not tried again


_READ_IN_A_CHILD = """
import resource, sys
from pathlib import Path
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.sync_read import read_part
# A ceiling for a reader that would decode the bomb (a shared machine): 3 GiB of address space.
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
try:
    table, batches = read_part(Path(sys.argv[1]), sys.argv[2])
    rows = sum(len(batch) for batch in batches)
    print("accepted", rows)
except InvalidInput as error:
    print("refused", error)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over fork and exec, so a child of a large
# pytest process would report its parent's peak; VmHWM belongs to this program's own memory.
peak = next(line.split()[1] for line in Path("/proc/self/status").read_text().splitlines()
            if line.startswith("VmHWM:"))
print("peak_kib", peak)
"""


def _dictionary_bomb(
    tmp_path: Path, db_path: Path, *, text_bytes: int, rows: int
) -> tuple[Path, str]:
    """This machine's facts part, with `rows` rows whose value is one `text_bytes` text, stored
    once in the part's dictionary: a few kilobytes on disk, rows × text_bytes once decoded."""
    [part] = [
        p
        for p in write_parts(open_db(db_path), tmp_path / "bomb", "node-a", repo_id=None)
        if p.table == "facts"
    ]
    original = pq.read_table(part.local_path)
    first = original.slice(0, 1).to_pylist()[0]
    columns = {}
    for field in original.schema:
        if field.name == "value":
            columns[field.name] = pa.DictionaryArray.from_arrays(
                pa.array([0] * rows, pa.int32()), pa.array(["x" * text_bytes])
            )
        else:
            columns[field.name] = pa.array([first[field.name]] * rows, field.type)
    schema = pa.schema(
        [
            pa.field(f.name, pa.dictionary(pa.int32(), pa.string())) if f.name == "value" else f
            for f in original.schema
        ],
        metadata=original.schema.metadata,
    )
    bomb = tmp_path / "bomb.parquet"
    pq.write_table(pa.table(columns, schema=schema), bomb, compression="zstd")
    return bomb, part.path_in_repo


@pytest.mark.slow
@pytest.mark.parametrize(
    "text_bytes, rows, words",
    [
        (
            40 << 20,
            64,
            "a text of 41943040 bytes",
        ),  # one text past its bound, 32 of them in one batch
        (
            900 << 10,
            400,
            "decodes to more than 256 MiB",
        ),  # every text within its bound, the part past its own
    ],
)
def test_a_dictionary_encoded_part_is_bounded_as_a_whole_before_any_row_is_made(
    tmp_path, monkeypatch, text_bytes, rows, words
):
    import subprocess
    import sys

    db_path = machine(tmp_path, "node-a", monkeypatch)
    full_run(db_path, "r1", steps=(2,))
    bomb, path_in_repo = _dictionary_bomb(tmp_path, db_path, text_bytes=text_bytes, rows=rows)
    assert bomb.stat().st_size < 1 << 20
    child = subprocess.run(
        [sys.executable, "-c", _READ_IN_A_CHILD, str(bomb), path_in_repo],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    outcome, peak = child.stdout.strip().splitlines()
    # Refused on its dictionary form: the 2.6 GB / 350 MB it describes were never built.
    assert int(peak.split()[1]) < 500 * 1024, (peak, outcome)
    assert outcome.startswith("refused") and words in outcome, outcome
