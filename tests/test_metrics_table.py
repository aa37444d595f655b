"""runs.db's `metrics` table: every scalar a run logged, at every step (issue 41, cause 7 and
deliverable 7). Filled by ingest from every format, kept once per value (re-ingesting adds
nothing), carried by `ccpo sync`, read by `ccpo runs show RUN --metric KEY` and the SQL views,
migrated into an existing runs.db. On the code before the issue none of this exists: the table,
the views, the option and the sync part are all missing, and a verl-agent log's loss, KL,
entropy and gradient norm were dropped ("runs.db has no place for them").
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
from pathlib import Path

import pytest
from helpers_benchmarks import REAL_LOGS
from helpers_sync import machine
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import open_db, run_evaluations
from ccpo_cli.store.db import APPLICATION_ID, MIGRATIONS
from ccpo_cli.store.ingest import ingest_file
from ccpo_cli.store.metrics import metric_series, run_metric_steps
from ccpo_cli.store.sync import mark_pushed, merge_part, part_already_merged
from ccpo_cli.store.sync_export import write_parts
from ccpo_cli.store.sync_format import TABLES
from ccpo_cli.store.sync_merge import Origin

ROOT = Path(__file__).resolve().parents[1]
# A verl-agent GRPO run on ALFWorld as its author committed it: 150 training steps, each with
# its loss, KL, entropy and gradient norm printed to 3 decimals (its source is named in the real logs' SOURCES.md).
VERL_AGENT_LOG = REAL_LOGS / "jonp07_grpo_run_alfworld.txt"
# verl-agent's names of the loss, the KL, the entropy and the gradient norm.
TRAINING_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/grad_norm")
runner = CliRunner()


def printed_values(path: Path, key: str) -> dict[int, str]:
    """{step: the value as printed} of `key`, read from the raw log with a regular expression
    (not ccpo's reader): verl's console prints `step:N - key:value - ...` on one line."""
    found = {}
    for line in path.read_bytes().decode(errors="replace").split("\n"):
        step = re.search(r"step:(\d+) - ", line)
        value = re.search(re.escape(key) + r":([-+0-9.eE]+|nan|inf)", line)
        if step and value:
            found[int(step.group(1))] = value.group(1)
    return found


@pytest.fixture(scope="module")
def verl_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("metrics") / "runs.db"
    ingest_file(open_db(path), VERL_AGENT_LOG, "jonp07")
    return path


def test_a_verl_agent_log_keeps_its_loss_kl_entropy_and_grad_norm_at_every_step(verl_db):
    db = open_db(verl_db)
    lines = VERL_AGENT_LOG.read_bytes().decode(errors="replace").split("\n")
    for key in TRAINING_KEYS:
        printed = printed_values(VERL_AGENT_LOG, key)
        assert sorted(printed) == list(range(1, 151))
        series = metric_series(db, "jonp07", key)
        assert {point["step"]: f"{point['value']:.3f}" for point in series} == printed
        for point in series:  # the file and the line the value was printed on
            assert point["source_file"] == str(VERL_AGENT_LOG.resolve())
            assert f"{key}:{printed[point['step']]}" in lines[point["source_line"] - 1]
            assert point["other_values"] == 0
    # The evaluations stay what they were: compare and the cards read them, not this table.
    assert len(run_evaluations(db, "jonp07")) == 31


def test_re_ingesting_the_same_log_adds_nothing(tmp_path):
    db = open_db(tmp_path / "runs.db")
    first = ingest_file(db, VERL_AGENT_LOG, "r")
    count = db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
    assert first.metrics.new == count > 150 * len(TRAINING_KEYS)
    again = ingest_file(db, VERL_AGENT_LOG, "r")
    assert again.metrics.new == 0 and again.metrics.duplicates == count
    assert again.as_dict()["metrics"] == {"new": 0, "duplicates": count}
    assert db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == count
    assert db.execute("SELECT COUNT(*) FROM metric_sources").fetchone()[0] == 1


def test_the_same_value_from_another_file_is_one_row_another_value_is_kept_beside_it(tmp_path):
    db = open_db(tmp_path / "runs.db")
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps({"step": 1, "actor/kl": 0.5, "note": "text"}) + "\n")
    second.write_text(
        json.dumps({"step": 1, "actor/kl": 0.5}) + "\n" + json.dumps({"step": 1, "actor/kl": 0.7})
    )
    second.write_text(second.read_text() + "\n")
    ingest_file(db, first, "r", benchmark="alfworld")
    report = ingest_file(db, second, "r")
    assert (report.metrics.new, report.metrics.duplicates) == (1, 1)
    (point,) = metric_series(db, "r", "actor/kl")
    assert point["value"] == 0.5 and point["other_values"] == 1  # the first recorded stands
    assert point["source_file"] == str(first.resolve()) and point["source_line"] == 1
    names = [row["name"] for row in db.query("SELECT DISTINCT name FROM run_metrics")]
    assert names == ["actor/kl"]  # text is not a scalar


def test_metrics_are_append_only(verl_db):
    db = open_db(verl_db)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        db.execute("UPDATE metrics SET value = 0 WHERE id = 1")


def test_a_nan_is_kept_as_logged_and_once(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 3, "actor/grad_norm": NaN}\n{"step": 4, "actor/grad_norm": 1.5}\n')
    db = open_db(tmp_path / "runs.db")
    for _ in range(2):
        ingest_file(db, path, "r", benchmark="alfworld")
    series = metric_series(db, "r", "actor/grad_norm")
    assert [point["step"] for point in series] == [3, 4] and math.isnan(series[0]["value"])
    assert db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 2


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("history.csv", "step,val/success_rate,actor/kl_loss\n1,,0.25\n5,0.5,0.125\n"),
        (
            "long.csv",
            "step,tag,value\n1,actor/kl_loss,0.25\n5,val/success_rate,0.5\n5,actor/kl_loss,0.125\n",
        ),
        (
            "metrics.jsonl",
            '{"step": 1, "actor/kl_loss": 0.25}\n'
            '{"step": 5, "val/success_rate": 0.5, "actor/kl_loss": 0.125}\n',
        ),
        (
            "output.log",
            "step:1 - actor/kl_loss:0.25\nstep:5 - val/success_rate:0.5 - actor/kl_loss:0.125\n",
        ),
    ],
)
def test_every_text_format_keeps_its_scalars(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    db = open_db(tmp_path / "runs.db")
    ingest_file(db, path, "r", benchmark="alfworld")
    assert {p["step"]: p["value"] for p in metric_series(db, "r", "actor/kl_loss")} == {
        1: 0.25,
        5: 0.125,
    }
    assert [p["value"] for p in metric_series(db, "r", "val/success_rate")] == [0.5]


def test_tensorboard_event_files_keep_their_scalars(tmp_path):
    from ccpo_cli.report.trackers import ScalarPoint, TensorBoardSink

    sink = TensorBoardSink(tmp_path / "tb")
    sink.write(ScalarPoint(1, {"actor/kl_loss": 0.25}))
    sink.write(ScalarPoint(5, {"actor/kl_loss": 0.125, "val/success_rate": 0.5}))
    sink.close()
    db = open_db(tmp_path / "runs.db")
    ingest_file(db, tmp_path / "tb", "r", benchmark="alfworld")
    assert run_metric_steps(db, "r") == {
        1: {"actor/kl_loss": 0.25},
        5: {"actor/kl_loss": 0.125, "val/success_rate": 0.5},
    }


def test_the_views_give_the_long_rows_and_one_row_per_step(verl_db):
    db = open_db(verl_db)
    rows = list(
        db.query("SELECT * FROM run_metrics WHERE run = 'jonp07' AND name = 'actor/kl_loss'")
    )
    assert len(rows) == 150 and {row["source_file"] for row in rows} == {
        str(VERL_AGENT_LOG.resolve())
    }
    steps = list(db.query("SELECT step, metrics FROM metric_steps WHERE run = 'jonp07'"))
    assert [row["step"] for row in steps] == list(range(151))  # step 0: the untrained validation
    kl = {row["step"]: json.loads(row["metrics"]).get("actor/kl_loss") for row in steps}
    assert {step: value for step, value in kl.items() if value is not None} == {
        point["step"]: point["value"] for point in metric_series(db, "jonp07", "actor/kl_loss")
    }
    # The same through SQL alone, as pandas or duckdb would read it.
    (value,) = db.execute(
        "SELECT json_extract(metrics, '$.\"actor/grad_norm\"') FROM metric_steps "
        "WHERE run = 'jonp07' AND step = 7"
    ).fetchone()
    assert f"{value:.3f}" == printed_values(VERL_AGENT_LOG, "actor/grad_norm")[7]


def test_runs_show_prints_a_series_and_its_json(verl_db):
    result = runner.invoke(
        app,
        ["--db", str(verl_db), "runs", "show", "jonp07", "--metric", "actor/kl_loss", "--json"],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    (series,) = document["series"]
    assert series["metric"] == "actor/kl_loss" and len(series["points"]) == 150
    assert series["points"][0]["step"] == 1 and series["points"][0]["source_line"] > 0
    table = runner.invoke(
        app, ["--db", str(verl_db), "runs", "show", "jonp07", "--metric", "actor/grad_norm"]
    )
    assert table.exit_code == 0 and "actor/grad_norm (150 step(s))" in table.stdout
    missing = runner.invoke(
        app, ["--db", str(verl_db), "runs", "show", "jonp07", "--metric", "actor/kl"]
    )
    assert missing.exit_code == 3
    assert "no metric 'actor/kl'" in missing.stderr and "actor/kl_loss" in missing.stderr


def test_an_unknown_metric_names_what_the_run_has(verl_db):
    with pytest.raises(InvalidInput, match="actor/entropy_loss"):
        metric_series(open_db(verl_db), "jonp07", "entropy")


def test_an_existing_runs_db_gains_the_table_and_keeps_what_it_held(tmp_path):
    path = tmp_path / "runs.db"
    old = sqlite3.connect(path)
    import sqlite_utils

    before = sqlite_utils.Database(old)
    MIGRATIONS.apply(before, stop_before="m011_metrics")
    old.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    old.execute(f"PRAGMA user_version = {len(MIGRATIONS.applied(before))}")
    old.execute(
        "INSERT INTO runs (name, uid, created_at, updated_at) VALUES ('old', 'u1', 'now', 'now')"
    )
    old.commit()
    old.close()
    db = open_db(path)
    assert "metrics" in db.table_names() and "metric_steps" in db.view_names()
    assert db.execute("SELECT name FROM runs").fetchall() == [("old",)]
    ingest_file(db, VERL_AGENT_LOG, "old")
    assert len(metric_series(db, "old", "actor/pg_loss")) == 150


def test_sync_carries_the_metrics_and_a_second_pull_adds_nothing(tmp_path, monkeypatch):
    a = machine(tmp_path, "node-a", monkeypatch)
    ingest_file(open_db(a), VERL_AGENT_LOG, "jonp07")
    parts = write_parts(open_db(a), tmp_path / "hub", "node-a", repo_id="t/r")
    mark_pushed(open_db(a), "t/r", "c1", parts)
    assert "metrics" in {part.table for part in parts}
    b = machine(tmp_path, "node-b", monkeypatch)
    db = open_db(b)
    for _ in range(2):
        for part in sorted(parts, key=lambda p: (TABLES.index(p.table), p.path_in_repo)):
            if not part_already_merged(db, "t/r", part.path_in_repo, None):
                merge_part(db, part.local_path, Origin("t/r", "c1", part.path_in_repo))
    assert run_metric_steps(db, "jonp07") == run_metric_steps(open_db(a), "jonp07")
    assert (
        db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
        == open_db(a).execute("SELECT COUNT(*) FROM metrics").fetchone()[0]
    )
    (point,) = [p for p in metric_series(db, "jonp07", "actor/kl_loss") if p["step"] == 3]
    assert point["source_file"] == str(VERL_AGENT_LOG.resolve())
    # Nothing new to push from A: the dataset holds every row.
    assert write_parts(open_db(a), tmp_path / "again", "node-a", repo_id="t/r") == []


def test_a_synced_metric_past_the_runs_steps_is_refused(tmp_path, monkeypatch):
    from ccpo_cli.store.sync_merge import merge_rows

    a = machine(tmp_path, "node-a", monkeypatch)
    db = open_db(a)
    ingest_file(db, VERL_AGENT_LOG, "jonp07")
    uid = db.execute("SELECT uid FROM runs").fetchone()[0]
    row = {
        "run_uid": uid,
        "name": "actor/kl_loss",
        "step": 999,
        "value": 1.0,
        "source_file": None,
        "source_line": None,
    }
    with pytest.raises(InvalidInput, match="past the run's recorded steps"):
        merge_rows(db, "metrics", [row], where="part")


def test_compare_reads_the_evaluations_only(verl_db, tmp_path):
    """The metrics table adds nothing to compare's numbers: the document is the same with the
    table emptied."""
    copy = tmp_path / "copy.db"
    source, target = sqlite3.connect(verl_db), sqlite3.connect(copy)
    source.backup(target)  # the WAL's pages included
    source.close()
    target.close()
    emptied = open_db(copy)
    emptied.execute("DELETE FROM metrics")

    def document(path: Path) -> dict:
        result = runner.invoke(app, ["--db", str(path), "compare", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    assert document(verl_db) == document(copy)
    assert open_db(copy).execute("SELECT COUNT(*) FROM metrics").fetchone()[0] == 0


def test_a_renamed_metric_is_kept_under_the_name_it_was_logged_with(tmp_path):
    from ccpo_cli.store.readers.metric_names import MetricRename

    path = tmp_path / "fork.jsonl"
    path.write_text('{"step": 5, "val/val/success_rate": 0.5, "actor/kl_loss": 0.125}\n')
    db = open_db(tmp_path / "runs.db")
    rename = MetricRename.parse("val/val/success_rate=val/success_rate")
    ingest_file(db, path, "r", benchmark="alfworld", rename=rename)
    assert [row["success_rate"] for row in run_evaluations(db, "r")] == [50.0]
    assert run_metric_steps(db, "r") == {5: {"val/val/success_rate": 0.5, "actor/kl_loss": 0.125}}
