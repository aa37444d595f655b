"""`ccpo ingest`: the three formats, idempotence, and every kind of bad file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from helpers_store import (
    WINDOW_STEPS,
    WRITERS,
    acceptance_rows,
    db_content,
    training_series,
    window_rates,
    write_ccpo,
    write_console,
    write_verl_file,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store import open_db, run_evaluations
from ccpo_cli.store.identity import ExternalArm
from ccpo_cli.store.ingest import ingest_file, parse_metrics_file

runner = CliRunner()


def cli(db_path: Path, *args: str):
    return runner.invoke(app, ["--db", str(db_path), *map(str, args)])


def counts(db) -> tuple:
    return tuple(
        db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("runs", "evaluations", "task_type_results", "conflicts")
    )


def write(fmt: str, rows, path: Path, **options) -> Path:
    return WRITERS[fmt](rows, path, **options)


@pytest.mark.parametrize("decimals", [None, 3])
def test_three_formats_give_the_same_database_content(tmp_path, decimals):
    contents = {}
    for fmt in WRITERS:
        options = {"decimals": decimals} if fmt == "console" else {}
        path = write(fmt, acceptance_rows(decimals), tmp_path / f"metrics-{fmt}.log", **options)
        db = open_db(tmp_path / f"{fmt}.db")
        report = ingest_file(db, path, "return-hard-s0", arm=ExternalArm("return-hard"), seed=0)
        assert report.format == fmt and report.new == 24 and report.last_step == 119
        contents[fmt] = db_content(db)
    assert contents["ccpo"] == contents["verl-file"] == contents["console"]
    assert len(contents["ccpo"]["evaluations"]) == 24
    assert len(contents["ccpo"]["task_types"]) == 24 * 6


def test_metric_names_map_to_evaluations_and_task_types(tmp_path):
    path = write_verl_file(acceptance_rows(), tmp_path / "m.jsonl")
    db = open_db(tmp_path / "runs.db")
    ingest_file(db, path, "r")
    by_step = {row["step"]: row for row in run_evaluations(db, "r")}
    assert sorted(by_step) == list(range(0, 120, 5))
    step115 = by_step[115]
    assert step115["success_rate"] == pytest.approx(window_rates()[-1], abs=1e-9)
    assert step115["mean_turns"] == pytest.approx(40 - 115 / 5)
    assert step115["train_success_rate"] == pytest.approx(100.0)  # episode/success_rate capped at 1
    assert set(step115["task_types"]) == {"pick", "look", "clean", "heat", "cool", "pick2"}
    # pick2's verl name contains "pick" and "and_place": it must not be read as pick.
    assert step115["task_types"]["pick2"]["success"] != step115["task_types"]["pick"]["success"]
    assert step115["source_file"] == str(path.resolve()) and step115["source_line"] == 116


def test_ingesting_twice_and_a_grown_file(tmp_path):
    rows = acceptance_rows()
    path = tmp_path / "m.jsonl"
    write_ccpo(rows[:60], path)
    db = open_db(tmp_path / "runs.db")
    first = ingest_file(db, path, "r")
    before = counts(db)
    again = ingest_file(db, path, "r")
    assert counts(db) == before
    assert (first.new, again.new, again.duplicates) == (12, 0, 12)
    write_ccpo(rows, path)  # the trainer kept going
    grown = ingest_file(db, path, "r")
    assert (grown.new, grown.duplicates) == (12, 12)
    assert counts(db)[1] == 24


def test_cli_ingest_twice_leaves_row_counts_unchanged(tmp_path):
    path = write_console(acceptance_rows(3), tmp_path / "worker.log")
    db_path = tmp_path / "runs.db"
    result = cli(
        db_path, "ingest", path, "--run", "rh", "--arm", "return-hard", "--seed", "0", "--json"
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (
        document["schema_version"] == 1
        and document["new"] == 24
        and document["format"] == "console"
    )
    before = counts(open_db(db_path))
    result = cli(db_path, "ingest", path, "--run", "rh", "--arm", "return-hard")
    assert result.exit_code == 0, result.output
    assert counts(open_db(db_path)) == before
    run = open_db(db_path).execute("SELECT arm, arm_fingerprint, seed FROM runs").fetchone()
    assert run == ("return-hard", load_arm("return-hard").fingerprint, 0)


def test_a_different_arm_fingerprint_is_refused(tmp_path):
    path = write_ccpo(acceptance_rows(), tmp_path / "m.jsonl")
    db_path = tmp_path / "runs.db"
    assert cli(db_path, "ingest", path, "--run", "rh", "--arm", "return-hard").exit_code == 0
    before = counts(open_db(db_path))
    result = cli(db_path, "ingest", path, "--run", "rh", "--arm", "gigpo")
    assert result.exit_code == 3
    assert "refusing" in result.output and "Traceback" not in result.output
    assert counts(open_db(db_path)) == before
    db = open_db(db_path)
    with pytest.raises(InvalidInput, match="arm_fingerprint"):
        ingest_file(db, path, "rh", arm=ExternalArm("return-hard", "0" * 64))


def test_a_malformed_line_is_skipped_or_under_strict_fails_the_whole_file(tmp_path):
    db_path = tmp_path / "runs.db"
    good = write_ccpo(acceptance_rows()[:30], tmp_path / "good.jsonl")
    assert cli(db_path, "ingest", good, "--run", "r").exit_code == 0
    before = counts(open_db(db_path))
    lines = write_ccpo(acceptance_rows(), tmp_path / "bad.jsonl").read_text().splitlines()
    lines[80] = lines[80][:-5] + "oops}"  # step 80, a validation step
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    result = cli(db_path, "ingest", bad, "--run", "r", "--strict")
    assert result.exit_code == 3
    assert f"{bad}:81:" in result.output and "Traceback" not in result.output
    assert counts(open_db(db_path)) == before
    result = cli(db_path, "ingest", bad, "--run", "new-run", "--strict")
    assert result.exit_code == 3
    assert counts(open_db(db_path)) == before  # not even the run was created
    result = cli(db_path, "ingest", bad, "--run", "tolerant", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["skipped"] == 1 and document["skipped_lines"][0]["line"] == 81
    assert "not valid JSON" in document["skipped_lines"][0]["reason"]
    assert document["new"] == 23 and "skipped 1 line(s)" in result.output  # reported on stderr too
    assert 80 not in {row["step"] for row in run_evaluations(open_db(db_path), "tolerant")}


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"step": 1, "val/success_rate": 0.5}\n[1, 2]\n', ":2: expected a JSON object"),
        (
            '{"step": 1, "val/success_rate": 0.5}\n{"val/success_rate": 0.5}\n',
            ":2: missing field 'step'",
        ),
        ('{"step": "five", "val/success_rate": 0.5}\n', ":1: field 'step' must be a whole number"),
        ('{"step": 2.5, "val/success_rate": 0.5}\n', ":1: field 'step' must be a whole number"),
        ('{"step": -1, "val/success_rate": 0.5}\n', ":1: field 'step' is negative"),
        ('{"step": 1, "val/success_rate": 83.5}\n', ":1: field 'val/success_rate' is 83.5"),
        (
            '{"step": 1, "val/success_rate": "high"}\n',
            ":1: field 'val/success_rate' must be a number",
        ),
        ('{"step": 1, "data": [1]}\n', ":1: field 'data' must be an object"),
        ("step:5 - val/success_rate:0.5 - broken\n", ":1: malformed metrics line"),
        ("nothing to see here\nat all\n", "no 'step:N - key:value' lines found"),
    ],
)
def test_bad_content_names_file_and_line(tmp_path, content, message):
    path = tmp_path / "m.log"
    path.write_text(content)
    db_path = tmp_path / "runs.db"
    fmt = "verl-file" if '"data"' in content else "auto"
    result = cli(db_path, "ingest", path, "--run", "r", "--format", fmt, "--strict")
    assert result.exit_code == 3, result.output
    assert message in result.output and "Traceback" not in result.output
    assert counts(open_db(db_path)) == (0, 0, 0, 0)


@pytest.mark.parametrize("kind", ["missing", "empty", "binary", "directory", "latin1"])
def test_unreadable_inputs_exit_3_with_one_line(tmp_path, kind):
    path = tmp_path / "m.jsonl"
    if kind == "empty":
        path.write_text("")
    elif kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    elif kind == "directory":
        path.mkdir()
    elif kind == "latin1":
        path.write_bytes(b'{"step": 1, "val/success_rate": 0.5}\n{"step": 2, "note": "caf\xe9"}\n')
        tolerant = cli(tmp_path / "tolerant.db", "ingest", path, "--run", "r", "--json")
        assert tolerant.exit_code == 0 and json.loads(tolerant.stdout)["skipped_lines"] == [
            {"line": 2, "reason": "not UTF-8 text (binary content?)"}
        ]
    expected = {
        "missing": "no such file",
        "empty": "empty",
        "binary": "binary",
        "directory": "not a regular file",
        "latin1": ":2: not UTF-8",
    }[kind]
    result = cli(
        tmp_path / "runs.db",
        "ingest",
        path,
        "--run",
        "r",
        *(["--strict"] if kind == "latin1" else []),
    )
    assert result.exit_code == 3
    assert expected in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    if kind in ("missing", "empty", "directory"):
        assert not (tmp_path / "runs.db").exists()  # refused before any database is created


def test_truncated_last_line_is_left_for_the_next_ingest(tmp_path):
    rows = acceptance_rows()
    full = write_ccpo(rows, tmp_path / "full.jsonl").read_text()
    cut = full[: full.index('"step": 115') + 40]  # mid-way through the step-115 object
    path = tmp_path / "m.jsonl"
    path.write_text(cut)
    db_path = tmp_path / "runs.db"
    result = cli(db_path, "ingest", path, "--run", "r", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["new"] == 23 and document["incomplete_tail_line"] == 116
    assert "incomplete last line" in result.output
    path.write_text(full)
    result = cli(db_path, "ingest", path, "--run", "r", "--json")
    assert json.loads(result.stdout)["new"] == 1


def test_truncated_console_record_waits_for_its_wrapped_lines(tmp_path):
    path = write_console(acceptance_rows(3), tmp_path / "w.log", wrap=60)
    text = path.read_text()
    start = text.index("step:115 ")
    cut = text[: text.index("\n", start + 200) + 1] + text[text.index("\n", start + 200) + 1 :][:30]
    path.write_text(cut)  # the step-115 record is mid-wrap, its last physical line unterminated
    db = open_db(tmp_path / "runs.db")
    report = ingest_file(db, path, "r")
    assert report.new == 23 and report.incomplete_tail_line is not None
    assert 115 not in {row["step"] for row in run_evaluations(db, "r")}


def test_nan_missing_out_of_order_and_duplicate_steps(tmp_path):
    rates = {step: 50.0 + step / 10 for step in range(0, 120, 5)}
    rows = training_series(rates, 119)
    rows[10]["metrics"]["val/success_rate"] = float("nan")  # step 10
    rows[20]["metrics"]["val/success_rate"] = None  # step 20: null, as ccpo writes NaN
    rows[25]["metrics"]["val/look_at_obj_in_light_success_rate"] = float("nan")
    rows[30]["metrics"].pop("val/success_rate")  # per-type rates without the overall rate
    rows = list(reversed(rows)) + rows[100:106]  # out of order, with duplicated steps
    path = tmp_path / "m.jsonl"
    with path.open("w") as handle:
        for row in rows:
            handle.write(
                json.dumps({"step": row["step"], **row["metrics"]}) + "\n"
            )  # NaN as a JSON token
    db = open_db(tmp_path / "runs.db")
    report = ingest_file(db, path, "r")
    steps = [row["step"] for row in run_evaluations(db, "r")]
    assert steps == sorted(set(range(0, 120, 5)) - {10, 20, 30})
    assert report.new == 21 and report.duplicates == 2 and not report.conflicts
    assert any("step 10: val/success_rate is NaN" in w for w in report.warnings)
    assert any("step 30 has per-type rates but no val/success_rate" in w for w in report.warnings)
    step25 = next(row for row in run_evaluations(db, "r") if row["step"] == 25)
    assert "look" not in step25["task_types"] and len(step25["task_types"]) == 5


def test_a_changed_result_for_a_recorded_step_is_a_reported_conflict(tmp_path):
    rows = acceptance_rows()
    db_path = tmp_path / "runs.db"
    assert (
        cli(db_path, "ingest", write_ccpo(rows, tmp_path / "a.jsonl"), "--run", "r").exit_code == 0
    )
    rows[115]["metrics"]["val/success_rate"] = (
        0.5  # a resumed run re-evaluated step 115 differently
    )
    result = cli(db_path, "ingest", write_ccpo(rows, tmp_path / "b.jsonl"), "--run", "r", "--json")
    assert result.exit_code == 0
    document = json.loads(result.stdout)
    assert (
        document["new"] == 0
        and len(document["conflicts"]) == 1
        and document["conflicts"][0]["step"] == 115
    )
    assert "differs from the evaluation already recorded" in result.output
    db = open_db(db_path)
    kept = next(row for row in run_evaluations(db, "r") if row["step"] == 115)
    assert kept["success_rate"] == pytest.approx(window_rates()[-1])


@pytest.mark.parametrize("wrap", [200, 61, 23, 7])
def test_console_wrapping_at_any_width_reads_the_same(tmp_path, wrap):
    rows = acceptance_rows(3)
    reference = parse_metrics_file(write_ccpo(rows, tmp_path / "m.jsonl"))
    wrapped = parse_metrics_file(write_console(rows, tmp_path / "w.log", wrap=wrap))
    assert [(r.step, r.metrics) for r in wrapped.records] == [
        (r.step, {k: v for k, v in r.metrics.items() if k != "wall_time"})
        for r in reference.records
    ]


def test_console_log_with_ansi_prefixes_noise_and_numpy_reprs(tmp_path):
    path = tmp_path / "w.log"
    path.write_text(
        "\x1b[2m(TaskRunner pid=77, ip=10.0.0.2)\x1b[0m Training Progress: 0%|\r"
        "\x1b[2m(TaskRunner pid=77, ip=10.0.0.2)\x1b[0m step:5 - val/success_rate:\x1b[1m0.812\x1b[0m - "
        "val/episode_length/mean:30.500\n"
        "(WorkerDict pid=9) step:6 - this is not ours\n"
        "(TaskRunner pid=77) Final validation metrics: {'val/success_rate': np.float64(0.9)}\n"
        "step:10 - val/success_rate:np.float64(0.9) - val/pick_two_obj_and_place_success_rate:nan\r\n"
    )
    with pytest.raises(InvalidInput, match=r"w.log:2: malformed"):
        parse_metrics_file(path, strict=True)
    assert [item["line"] for item in parse_metrics_file(path).skipped] == [2]
    path.write_bytes(
        path.read_bytes().replace(b"(WorkerDict pid=9) step:6 - this is not ours\n", b"")
    )
    parsed = parse_metrics_file(path)
    assert parsed.format == "console"
    assert [(r.step, r.line) for r in parsed.records] == [(5, 1), (10, 3)]
    assert parsed.records[0].metrics == {"val/success_rate": 0.812, "val/episode_length/mean": 30.5}
    assert math.isnan(parsed.records[1].metrics["val/pick_two_obj_and_place_success_rate"])


def test_acceptance_window_in_compare_json(tmp_path):
    db_path = tmp_path / "runs.db"
    path = write_verl_file(acceptance_rows(), tmp_path / "m.jsonl")
    assert (
        cli(
            db_path, "ingest", path, "--run", "rh", "--arm", "return-hard", "--total-steps", "150"
        ).exit_code
        == 0
    )
    result = cli(db_path, "compare", "--json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["runs"][0]
    # The window starts at 7/15 of the recorded total: step 70 of 150, as on the seed card.
    assert (
        run["window"]["start"] == 70
        and run["window"]["start_basis"] == "7/15 of the run's 150 total steps"
    )
    assert run["window"]["mean"] == pytest.approx(83.5, abs=1e-9)
    assert run["window"]["sd"] == pytest.approx(6.5, abs=1e-9)
    assert run["window"]["n"] == 10 and run["window"]["steps"] == WINDOW_STEPS
    rates = window_rates()
    best_index = max(range(10), key=lambda i: rates[i])
    assert run["best"]["step"] == WINDOW_STEPS[best_index]
    assert run["best"]["success"] == pytest.approx(rates[best_index], abs=1e-9)


def test_progress_reports_every_byte_and_is_off_without_a_terminal(tmp_path):
    rates = {step: 50.0 for step in range(0, 12_000, 100)}
    path = write_ccpo(training_series(rates, 11_999), tmp_path / "big.jsonl")
    assert path.stat().st_size > 2 * 1024 * 1024  # above the size that gets a bar on a terminal
    seen = []
    ingest_file(open_db(tmp_path / "a.db"), path, "r", progress=seen.append)
    assert sum(seen) == path.stat().st_size
    result = cli(tmp_path / "b.db", "ingest", path, "--run", "r")
    assert result.exit_code == 0
    assert "━" not in result.output and "\x1b[" not in result.output  # no bar, no cursor codes


def test_ingest_options_describe_the_run_and_bad_format_is_a_usage_error(tmp_path):
    path = write_ccpo(acceptance_rows(), tmp_path / "m.jsonl")
    db_path = tmp_path / "runs.db"
    result = cli(
        db_path,
        "ingest",
        path,
        "--run",
        "r",
        "--seed",
        "2",
        "--base-model",
        "Qwen/Qwen2.5-7B-Instruct",
        "--total-steps",
        "150",
        "--format",
        "ccpo",
    )
    assert result.exit_code == 0, result.output
    row = (
        open_db(db_path)
        .execute("SELECT seed, base_model, total_steps, last_step FROM runs")
        .fetchone()
    )
    assert row == (2, "Qwen/Qwen2.5-7B-Instruct", 150, 119)
    assert cli(db_path, "ingest", path, "--run", "r", "--format", "yaml").exit_code == 2
    result = cli(db_path, "ingest", path, "--run", "r", "--format", "verl-file")
    assert result.exit_code == 3 and "field 'data' must be an object" in result.output
    result = cli(db_path, "ingest", path, "--run", "r", "--arm", "no-such-arm")
    assert result.exit_code == 2 and "unknown arm" in result.output


KEYS = [
    "val/success_rate",
    "val/pick_two_obj_and_place_success_rate",
    "actor/pg_loss",
    "timing_s/step",
    "val/episode_length/mean",
    "critic/score/mean",
]


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    steps=st.lists(
        st.dictionaries(
            st.sampled_from(KEYS), st.integers(-5000, 100_000).map(lambda n: n / 1000), min_size=1
        ),
        min_size=1,
        max_size=6,
    ),
    wrap=st.integers(8, 300),
    pid=st.integers(1, 99999),
)
def test_console_and_json_read_the_same_metrics(tmp_path, steps, wrap, pid):
    rows = [{"step": step, "metrics": metrics} for step, metrics in enumerate(steps)]
    expected = [(row["step"], row["metrics"]) for row in rows]
    console = parse_metrics_file(write_console(rows, tmp_path / "w.log", wrap=wrap, pid=pid))
    verl = parse_metrics_file(write_verl_file(rows, tmp_path / "v.jsonl"))
    assert [(r.step, r.metrics) for r in console.records] == expected
    assert [(r.step, r.metrics) for r in verl.records] == expected
