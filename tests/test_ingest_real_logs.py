"""Two real verl-agent logs written elsewhere (docs/runs-db.md, "Tested on real logs") through
`ccpo ingest --format auto`: every validation step, value and per-type rate equals what the
file holds, read here independently with a regex or the csv module."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db, run_evaluations
from ccpo_cli.task_types import VERL_METRIC_NAMES

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs"
CONSOLE_LOG = REAL_LOGS / "jonp07_grpo_run_alfworld.txt"
CSV_EXPORT = REAL_LOGS / "boerz_run_a_telemetry.csv"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
VALUE = r"(-?[0-9.]+|nan)"

runner = CliRunner()


def ingest(db_path: Path, path: Path, *extra: str) -> dict:
    result = runner.invoke(
        app, ["--db", str(db_path), "ingest", str(path), "--run", "real", "--json", *extra]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def console_validations(text: str) -> dict[int, dict[str, float]]:
    """{step: {"overall": ..., short task type: ...}} from the `step:N - ...` lines holding a validation."""
    found = {}
    for line in ANSI.sub("", text).splitlines():
        step = re.search(r"\bstep:(\d+) - ", line)
        overall = re.search(r" - val/success_rate:" + VALUE, line)
        if not step or not overall:
            continue
        rates = {"overall": float(overall.group(1))}
        for short, name in VERL_METRIC_NAMES.items():
            match = re.search(rf" - val/{name}_success_rate:" + VALUE, line)
            if match:
                rates[short] = float(match.group(1))
        found[int(step.group(1))] = rates
    return found


def recorded(db_path: Path) -> dict[int, dict[str, float]]:
    return {
        row["step"]: {
            "overall": row["success_rate"],
            **{k: v["success"] for k, v in row["task_types"].items()},
        }
        for row in run_evaluations(open_db(db_path), "real")
    }


def assert_same_as_percent(
    stored: dict[int, dict[str, float]], logged: dict[int, dict[str, float]]
) -> None:
    assert sorted(stored) == sorted(logged)
    for step, rates in logged.items():
        assert stored[step].keys() == rates.keys(), step
        for key, fraction in rates.items():
            assert stored[step][key] == pytest.approx(100.0 * fraction, abs=1e-9), (step, key)


def test_the_real_console_log_ingests_every_validation_exactly(tmp_path):
    logged = console_validations(CONSOLE_LOG.read_text())
    assert len(logged) == 31 and all(len(rates) == 7 for rates in logged.values())
    document = ingest(tmp_path / "runs.db", CONSOLE_LOG, "--format", "auto")
    assert document["format"] == "console" and document["new"] == 31 and document["skipped"] == 0
    assert document["last_step"] == 150
    assert_same_as_percent(recorded(tmp_path / "runs.db"), logged)


def test_the_real_csv_export_ingests_every_validation_in_full_precision(tmp_path):
    with CSV_EXPORT.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    logged = {
        int(row["step"]): {"overall": float(row["val/success_rate"])}
        for row in rows
        if row["val/success_rate"]
    }
    train = {
        int(row["step"]): float(row["episode/success_rate"])
        for row in rows
        if row["episode/success_rate"]
    }
    assert len(logged) >= 15
    document = ingest(tmp_path / "runs.db", CSV_EXPORT, "--format", "auto")
    assert (
        document["format"] == "csv" and document["new"] == len(logged) and document["skipped"] == 0
    )
    assert document["last_step"] == max(int(row["step"]) for row in rows)
    assert_same_as_percent(recorded(tmp_path / "runs.db"), logged)
    for row in run_evaluations(open_db(tmp_path / "runs.db"), "real"):
        expected = train.get(row["step"])
        assert row["train_success_rate"] == (
            None if expected is None else pytest.approx(100.0 * expected, abs=1e-9)
        )


def test_a_corrupted_copy_of_the_real_console_log_keeps_every_good_record(tmp_path):
    lines = CONSOLE_LOG.read_bytes().split(b"\n")
    index = {
        int(re.search(rb"step:(\d+) ", line).group(1)): i
        for i, line in enumerate(lines)
        if re.search(rb"\) \x1b\[0mstep:\d+ ", line) or re.search(rb"\)\x1b\[0m step:\d+ ", line)
    }
    cut_validation, cut_training, restarted = index[100], index[101], index[50]
    # A restart padded the file with NULs where step 50's line starts, plus a line of nothing but NULs.
    lines[restarted] = b"\x00" * 5000 + lines[restarted]
    lines.insert(restarted, b"\x00" * 300)
    cut_validation, cut_training = (
        i + 1 if i >= restarted else i for i in (cut_validation, cut_training)
    )
    # Two lines cut mid-key, as a capped console capture leaves them.
    lines[cut_validation] = lines[cut_validation][
        : lines[cut_validation].index(b"val/success_rate") + 9
    ]
    lines[cut_training] = lines[cut_training][: lines[cut_training].index(b"actor/pg_loss") + 5]
    binary = cut_training + 2
    lines.insert(binary, b"\xff\xfe\x80\x81 stray binary \xc3")
    corrupted = tmp_path / "restarted.log"
    corrupted.write_bytes(
        b"\n".join(lines) + b"(TaskRunner pid=1) step:151 - val/succ"
    )  # cut last line
    logged = console_validations(CONSOLE_LOG.read_text())
    del logged[100]
    document = ingest(tmp_path / "runs.db", corrupted)
    assert document["format"] == "console" and document["new"] == 30
    assert {item["line"] for item in document["skipped_lines"]} == {
        restarted + 1,
        cut_validation + 1,
        cut_training + 1,
        binary + 1,
    }
    assert document["skipped"] == 4 and document["cleaned_lines"] == [restarted + 2]
    assert document["incomplete_tail_line"] == len(lines) and document["last_step"] == 150
    assert_same_as_percent(recorded(tmp_path / "runs.db"), logged)
    result = runner.invoke(
        app,
        ["--db", str(tmp_path / "strict.db"), "ingest", str(corrupted), "--run", "s", "--strict"],
    )
    assert result.exit_code == 3 and "Traceback" not in result.output
