"""The SQL views of m009_views leave out what compare leaves out, and the
recipes of docs/runs-db.md ("SQL views") give compare's numbers on a database with retracted
evaluations, a retracted run, a conflict kept and one settled for the other value, a failed run,
a repeated seed and a mixed protocol.

Asked for in issue 32, item 4.
"""

from __future__ import annotations

import math
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ccpo_cli.arms import load_arm
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.retractions import resolve, retract

DOC = Path(__file__).resolve().parents[1] / "docs" / "runs-db.md"


def _rate(arm_offset: float, seed: int, step: int) -> float:
    return round(30 + arm_offset + step + 3 * seed + (2.5 if step % 4 else -1.5), 4)


@pytest.fixture(scope="module")
def corrected_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("views") / "runs.db"
    db = open_db(path)
    runs = [
        ("rh-0", "return-hard", 0, 6.0),
        ("rh-1", "return-hard", 1, 6.0),
        ("rh-bad", "return-hard", 2, 6.0),
        ("grpo-0", "grpo", 0, 0.0),
        ("grpo-1", "grpo", 1, 0.0),
        ("grpo-1b", "grpo", 1, 1.0),
        ("grpo-failed", "grpo", 3, 0.0),
    ]
    for name, arm, seed, offset in runs:
        ensure_run(
            db,
            name,
            arm=load_arm(arm),
            seed=seed,
            base_model="ccpo-tiny-policy",
            backend="local",
            benchmark="alfworld",
            total_steps=30,
        )
        for step in range(0, 31, 2):
            record_evaluation(
                db,
                name,
                step,
                success_rate=_rate(offset, seed, step),
                episodes=128,
                temperature=0.4,
            )
        update_run_state(db, name, last_step=30, status="finished")
    # A 7B ingest of one arm: another unit, one seed, its own window start (70 of 150).
    ensure_run(
        db,
        "rh-7b",
        arm=load_arm("return-hard"),
        seed=0,
        base_model="Qwen/Qwen2.5-7B-Instruct",
        backend="verl",
        benchmark="alfworld",
        total_steps=150,
    )
    for step in range(50, 151, 10):
        record_evaluation(
            db, "rh-7b", step, success_rate=60 + step / 10, episodes=134, temperature=0.4
        )
    # Corrections: a retracted window evaluation, a retracted run, a conflict left open (the kept
    # row stands), a conflict settled for the other value (the new row stands, the old is retracted).
    retract(db, "rh-0", step=20, reason="evaluated on the training games")
    retract(db, "rh-bad", reason="wrong arm")
    record_evaluation(db, "rh-1", 24, success_rate=99.0, episodes=128, temperature=0.4)
    record_evaluation(db, "rh-1", 26, success_rate=12.5, episodes=128, temperature=0.4)
    resolve(db, "rh-1", step=26, keep="12.5", reason="the first log was cut")
    update_run_state(db, "grpo-failed", status="failed")
    # A mixed protocol: three 64-episode evaluations in grpo-0's window, fewer than its 128 ones.
    for step in (21, 23, 25):
        record_evaluation(
            db, "grpo-0", step, success_rate=1.5625 * step, episodes=64, temperature=0.4
        )
    return path


def _recipes(language: str) -> list[str]:
    text = DOC.read_text()
    section = text.split("## SQL views")[1].split("\n## ")[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def _compare(path: Path) -> dict:
    return compare_runs(open_db(path, must_exist=True)).as_json()


def test_standing_evaluations_leave_out_what_compare_leaves_out(corrected_db):
    connection = sqlite3.connect(corrected_db)
    every = connection.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    standing = connection.execute("SELECT COUNT(*) FROM standing_evaluations").fetchone()[0]
    retracted_run_rows = connection.execute(
        "SELECT COUNT(*) FROM evaluations e JOIN runs r ON r.id = e.run_id WHERE r.name = 'rh-bad'"
    ).fetchone()[0]
    assert (
        every - standing == retracted_run_rows + 2
    )  # rh-0 step 20 and the settled-over rh-1 step 26
    steps = [
        row[0]
        for row in connection.execute(
            "SELECT step FROM standing_evaluations WHERE run = 'rh-0' ORDER BY step"
        )
    ]
    assert 20 not in steps and 18 in steps
    rh1 = dict(
        connection.execute("SELECT step, success_rate FROM standing_evaluations WHERE run = 'rh-1'")
    )
    assert (
        rh1[24] == _rate(6.0, 1, 24) and rh1[26] == 12.5
    )  # the open conflict is not applied; the settled one is
    identity = {
        row[0]: row[1:]
        for row in connection.execute(
            "SELECT run, retracted, backend, base_model FROM run_identity"
        )
    }
    assert identity["rh-bad"][0] == 1 and identity["rh-7b"] == (
        0,
        "verl",
        "Qwen/Qwen2.5-7B-Instruct",
    )


def test_the_sqlite_utils_recipe_gives_compares_window_means(corrected_db):
    document = _compare(corrected_db)
    (command,) = _recipes("bash")
    executable = Path(sys.executable).with_name("sqlite-utils")
    argv = ["sqlite-utils", *re.findall(r'"[^"]*"|\S+', command.strip())[1:]]
    argv = [str(executable)] + [arg.strip('"') for arg in argv[1:]]
    output = subprocess.run(
        argv, cwd=corrected_db.parent, capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split(",") for line in output.strip().splitlines()[1:]]
    expected = {
        run["run"]: run["window"]
        for run in document["runs"]
        if run["run"] not in document["left_out"]
    }
    assert {row[0] for row in rows} == set(expected) and "rh-bad" not in expected
    assert list(document["left_out"]) == ["grpo-failed"]
    for run, n, mean in rows:
        assert int(n) == expected[run]["n"] and float(mean) == pytest.approx(
            expected[run]["mean"], abs=1e-9
        )


def test_the_python_recipes_give_compares_run_and_arm_numbers(corrected_db, monkeypatch):
    document = _compare(corrected_db)
    monkeypatch.chdir(corrected_db.parent)
    standard, with_pandas = _recipes("python")
    namespace: dict = {}
    exec(standard, namespace)
    runs = {
        run["run"]: run["window"]
        for run in document["runs"]
        if run["run"] not in document["left_out"]
    }
    assert namespace["window_means"] == pytest.approx(
        {name: window["mean"] for name, window in runs.items()}
    )
    exec(with_pandas, namespace)
    per_run = namespace["per_run"]
    for name, window in runs.items():
        assert per_run.loc[name, "mean"] == pytest.approx(window["mean"])
        assert (
            per_run.loc[name, "std"] == pytest.approx(window["sd"])
            and per_run.loc[name, "count"] == window["n"]
        )
    per_arm = namespace["per_arm"].reset_index()
    assert len(per_arm) == len(document["arms"]) == 3
    for arm in document["arms"]:
        row = per_arm[
            (per_arm["arm_fingerprint"] == arm["arm_fingerprint"])
            & (per_arm["backend"] == arm["backend"])
        ]
        assert len(row) == 1
        assert row["mean"].iloc[0] == pytest.approx(arm["mean"])
        if arm["n_seeds"] >= 2:
            assert (
                row["std"].iloc[0] == pytest.approx(arm["sd"])
                and row["count"].iloc[0] == arm["n_seeds"]
            )
        else:
            assert math.isnan(
                row["std"].iloc[0]
            )  # one seed: compare's sd is over evaluations instead
