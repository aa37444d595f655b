"""`ccpo ingest` on hostile files (issue 12): every case exits with a message, never a
traceback, and a refused file leaves the database as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db, run_evaluations
from ccpo_cli.store.ingest import MAX_LINE_BYTES

runner = CliRunner()


def cli(db_path: Path, *args: str):
    return runner.invoke(app, ["--db", str(db_path), *map(str, args)])


def counts(db_path: Path) -> tuple:
    db = open_db(db_path)
    return tuple(
        db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
        for t in ("runs", "evaluations", "task_type_results", "conflicts")
    )


def seeded_db(tmp_path: Path) -> Path:
    """A database that already holds one run, so 'unchanged' means something."""
    db_path = tmp_path / "runs.db"
    good = tmp_path / "good.jsonl"
    good.write_text('{"step": 0, "val/success_rate": 0.25}\n{"step": 5, "val/success_rate": 0.5}\n')
    assert cli(db_path, "ingest", good, "--run", "kept").exit_code == 0
    return db_path


def test_a_verl_file_line_longer_than_64_kib_is_read_as_verl_file(tmp_path):
    data = {"val/success_rate": 0.9, **{f"m/k{i}": 0.1234567 for i in range(4000)}}
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"step": 91, "data": data}) + "\n")
    assert path.stat().st_size > 64 * 1024
    db_path = tmp_path / "t.db"
    result = cli(db_path, "ingest", path, "--run", "w", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["format"] == "verl-file" and document["new"] == 1
    assert [(e["step"], e["success_rate"]) for e in run_evaluations(open_db(db_path), "w")] == [
        (91, 90.0)
    ]


def test_zero_evaluations_is_never_a_silent_success(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({"step": 91, "data": {"val/success_rate": 0.9}}) + "\n")
    db_path = seeded_db(tmp_path)
    before = counts(db_path)
    result = cli(
        db_path, "ingest", path, "--run", "w", "--format", "ccpo"
    )  # the wrong format, forced
    assert result.exit_code == 3, result.output
    assert str(path) in result.output and "Traceback" not in result.output
    assert counts(db_path) == before
    training_only = tmp_path / "train.jsonl"
    training_only.write_text(
        '{"step": 1, "actor/pg_loss": 0.1}\n{"step": 2, "actor/pg_loss": 0.2}\n'
    )
    result = cli(db_path, "ingest", training_only, "--run", "t")
    assert result.exit_code == 0  # a run that has not validated yet is legitimate, and said so
    assert "no validation" in result.output


def test_a_utf8_bom_is_accepted(tmp_path):
    for name, text in {
        "m.jsonl": '{"step": 5, "val/success_rate": 0.5}\n',
        "w.log": "step:5 - val/success_rate:0.500 - val/pick_and_place_success_rate:0.250\n",
        "m.csv": "step,val/success_rate\n5,0.5\n",
    }.items():
        path = tmp_path / name
        path.write_bytes(b"\xef\xbb\xbf" + text.encode())
        db_path = tmp_path / f"{name}.db"
        result = cli(db_path, "ingest", path, "--run", "r")
        assert result.exit_code == 0, (name, result.output)
        assert [e["success_rate"] for e in run_evaluations(open_db(db_path), "r")] == [50.0]


def test_64_kib_of_blank_lines_before_the_data(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("\n" * 70_000 + '{"step": 5, "val/success_rate": 0.5}\n')
    result = cli(tmp_path / "t.db", "ingest", path, "--run", "r", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["new"] == 1


@pytest.mark.parametrize(
    "bad_line, reason",
    [
        ('{"step": 10, "val/success_rate": 0.5, "val/episodes": 10.7}', "whole number"),
        ('{"step": 9223372036854775808, "val/success_rate": 0.5}', "step"),
        ('{"step": 10, "val/success_rate": 0.5, "val/episodes": 1e30}', "val/episodes"),
        (
            '{"step": 10, "val/success_rate": 0.5, "val/successes": 1e30, "val/episodes": 2}',
            "val/successes",
        ),
        ("[" * 200_000 + "]" * 200_000, "nested"),
        ('{"step": 1' + "0" * 5000 + ', "val/success_rate": 0.5}', "digits"),
    ],
    ids=[
        "fractional-episodes",
        "step-2^63",
        "episodes-1e30",
        "successes-1e30",
        "nested-200k",
        "5000-digit-step",
    ],
)
def test_a_bad_record_is_skipped_and_reported_and_strict_refuses(tmp_path, bad_line, reason):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 5, "val/success_rate": 0.25}\n' + bad_line + "\n")
    db_path = seeded_db(tmp_path)
    result = cli(db_path, "ingest", path, "--run", "r", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["new"] == 1 and document["skipped"] == 1
    assert (
        document["skipped_lines"][0]["line"] == 2
        and reason in document["skipped_lines"][0]["reason"]
    )
    assert "Traceback" not in result.output
    assert [e["step"] for e in run_evaluations(open_db(db_path), "r")] == [5]
    before = counts(db_path)
    result = cli(db_path, "ingest", path, "--run", "strict-run", "--strict")
    assert (
        result.exit_code == 3 and f"{path}:2:" in result.output and "Traceback" not in result.output
    )
    assert len(result.output.strip().splitlines()) == 1
    assert counts(db_path) == before


def test_a_file_of_only_bad_records_is_refused_with_the_db_unchanged(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"step": 9223372036854775808, "val/success_rate": 0.5}\n' + "[" * 200_000 + "\n"
    )
    db_path = seeded_db(tmp_path)
    before = counts(db_path)
    result = cli(db_path, "ingest", path, "--run", "r")
    assert (
        result.exit_code == 3 and "no record" in result.output and "Traceback" not in result.output
    )
    assert len(result.output.strip().splitlines()) == 1
    assert counts(db_path) == before
    assert open_db(db_path).execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_line_over_the_limit_is_skipped_and_reported(tmp_path):
    path = tmp_path / "m.jsonl"
    with path.open("w") as handle:
        handle.write('{"step": 5, "val/success_rate": 0.25}\n')
        handle.write('{"step": 6, "pad": "' + "x" * (MAX_LINE_BYTES + 10) + '"}\n')
        handle.write('{"step": 10, "val/success_rate": 0.5}\n')
    result = cli(tmp_path / "t.db", "ingest", path, "--run", "r", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["new"] == 2 and document["skipped_lines"] == [
        {"line": 2, "reason": f"line longer than {MAX_LINE_BYTES} bytes"}
    ]
    assert "16 MiB" in cli(tmp_path / "t.db", "ingest", "--help").output


def test_a_console_line_cut_at_wandbs_4096_characters_is_skipped(tmp_path):
    records = (
        "step:5 - val/success_rate:0.500 - p"
        + "x" * pad
        + " - ".join(f"/k{i}:{i}.125" for i in range(400))
        for pad in range(30)
    )
    cut = next(whole[:4096] for whole in records if whole[4095].isdigit())
    assert cut[-1].isdigit()  # cut inside a number: it would read as a (wrong) value
    path = tmp_path / "output.log"
    path.write_text(
        "step:0 - val/success_rate:0.250\n" + cut + "\nwandb: Waiting for W&B process to finish\n"
    )
    document = ingest_json(tmp_path / "t.db", path)
    assert document["new"] == 1 and document["skipped_lines"] == [
        {"line": 2, "reason": "line cut at 4096 characters (wandb's output.log limit)"}
    ]


def ingest_json(db_path: Path, path: Path) -> dict:
    result = cli(db_path, "ingest", path, "--run", "r", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
