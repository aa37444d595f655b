"""Held-out keys in the local trainer's metrics.jsonl, `ccpo train --report-to
tensorboard,trackio,wandb` while training, and `ccpo export --to tensorboard|trackio|wandb|csv`
of any recorded run; each read back with the tracker's own reader (TensorBoard's
EventAccumulator, trackio's SQLiteStorage, wandb's transaction log of `Record` messages).

Asked for in issue 32, item 3; step 0 in every live tracker and metrics.jsonl, wandb, and every
logged scalar in the exports in issue 41 (cause 8, deliverables 7 and 8).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_benchmarks import REAL_LOGS
from helpers_wandb import wandb_history, wandb_run_record
from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.cli.app import app
from ccpo_cli.report.trackers import ReportingObserver, parse_trackers
from ccpo_cli.store import ensure_run, open_db, record_evaluation, run_evaluations
from ccpo_cli.store.retractions import retract

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def tensorboard_scalars(logdir: Path) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        tag: {event.step: event.value for event in accumulator.Scalars(tag)}
        for tag in accumulator.Tags()["scalars"]
    }


def trackio_logs(trackio_dir: Path, project: str, run: str) -> list[dict]:
    """The run's logs as trackio's own storage reads them (a fresh process: trackio reads
    TRACKIO_DIR when it is imported)."""
    code = (
        "import json, sys; from trackio.sqlite_storage import SQLiteStorage; "
        "print(json.dumps(SQLiteStorage.get_logs(sys.argv[1], sys.argv[2])))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, project, run],
        capture_output=True,
        text=True,
        check=True,
        env=_env(trackio_dir),
        timeout=120,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def _env(trackio_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "TRACKIO_DIR": str(trackio_dir),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture
def ingested_db(tmp_path) -> Path:
    """An ingested-like 7B run (rates only, per-type rates) with a retracted evaluation."""
    path = tmp_path / "runs.db"
    db = open_db(path)
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
    for step in range(10, 51, 10):
        record_evaluation(
            db,
            "rh-7b",
            step,
            success_rate=40 + step / 2,
            episodes=128,
            temperature=0.4,
            task_types={"pick": 50.0 + step / 10, "heat": 25.0},
            train_success_rate=30.0 + step,
        )
    retract(db, "rh-7b", step=30, reason="evaluated on the training games")
    return path


def test_report_to_is_parsed_like_trls(tmp_path):
    assert parse_trackers("tensorboard,trackio") == ("tensorboard", "trackio")
    assert parse_trackers("none") == ()
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--report-to",
            "bogus",
            "--steps",
            "1",
        ],
    )
    assert (
        result.exit_code == 2
        and "--report-to 'bogus': use one or more of tensorboard, trackio, wandb" in result.stderr
    )
    assert parse_trackers("wandb,tensorboard") == ("wandb", "tensorboard")


def test_the_observer_writes_metrics_lines_as_they_come_and_forwards_to_the_publisher(tmp_path):
    calls = []

    class Publisher:
        def started(self, run, run_dir):
            calls.append("started")

        def evaluated(self, step):
            calls.append(f"evaluated {step}")

        def progress(self):
            return "pushed step-1"

        def finished(self, status, last_step, checkpoint):
            calls.append(f"finished {status}")

    observer = ReportingObserver(("tensorboard",), inner=Publisher())
    observer.started("r", tmp_path)
    metrics = tmp_path / "metrics.jsonl"
    with metrics.open("w") as handle:
        handle.write(
            json.dumps({"step": 1, "wall_time": 1.7e9, "actor/kl": 0.5, "rollout_sha256": "ab"})
            + "\n"
        )
        handle.write('{"step": 2, "actor/kl": 0.2')  # a line still being written
    assert observer.progress() == "pushed step-1"
    with metrics.open("a") as handle:
        handle.write(', "val/success_rate": 0.25}\n')
    observer.evaluated(2)
    observer.finished("finished", 2, None)
    assert calls == ["started", "evaluated 2", "finished finished"]
    scalars = tensorboard_scalars(tmp_path / "tensorboard")
    assert scalars["actor/kl"] == pytest.approx({1: 0.5, 2: 0.2}) and scalars[
        "val/success_rate"
    ] == {2: 0.25}


def test_export_to_tensorboard_and_csv_writes_the_standing_curve_once(ingested_db, tmp_path):
    out = tmp_path / "tb"
    for _ in range(2):  # exporting again replaces the earlier export
        result = runner.invoke(
            app,
            [
                "--db",
                str(ingested_db),
                "export",
                "--to",
                "tensorboard",
                "rh-7b",
                "--out",
                str(out),
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"] == [
        {"run": "rh-7b", "points": 4, "written_to": str(out / "rh-7b")}
    ]
    assert len(list((out / "rh-7b").glob("events.out.tfevents.*"))) == 1 and sorted(
        os.listdir(out)
    ) == ["rh-7b"]
    scalars = tensorboard_scalars(out / "rh-7b")
    standing = {row["step"]: row for row in run_evaluations(open_db(ingested_db), "rh-7b")}
    assert sorted(scalars["val/success_rate"]) == [
        10,
        20,
        40,
        50,
    ]  # the retracted step 30 is left out
    for step, value in scalars["val/success_rate"].items():
        assert value == pytest.approx(standing[step]["success_rate"] / 100)
    assert scalars["val/pick_and_place_success_rate"][50] == pytest.approx(0.55)
    assert scalars["episode/success_rate"][10] == pytest.approx(0.40)
    result = runner.invoke(
        app, ["--db", str(ingested_db), "export", "--to", "csv", "rh-7b", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "rh-7b.csv").open()))
    assert [int(row["step"]) for row in rows] == [10, 20, 40, 50]
    assert [float(row["val/success_rate"]) for row in rows] == [
        standing[s]["success_rate"] / 100 for s in (10, 20, 40, 50)
    ]


def test_export_refuses_an_unknown_tracker_or_run(ingested_db, tmp_path):
    bad = runner.invoke(app, ["--db", str(ingested_db), "export", "--to", "bogus", "rh-7b"])
    assert bad.exit_code == 2 and "use one of tensorboard, trackio, wandb, csv" in bad.stderr
    missing = runner.invoke(
        app, ["--db", str(ingested_db), "export", "--to", "csv", "nope", "--out", str(tmp_path)]
    )
    assert missing.exit_code == 3 and "nope" in missing.stderr and not list(tmp_path.glob("*.csv"))


@pytest.mark.slow
def test_export_to_trackio_is_read_back_by_trackio(ingested_db, tmp_path):
    trackio_dir = tmp_path / "trackio"
    for _ in range(2):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ccpo_cli",
                "--db",
                str(ingested_db),
                "export",
                "--to",
                "trackio",
                "rh-7b",
                "--project",
                "paper",
                "--json",
            ],
            capture_output=True,
            text=True,
            env=_env(trackio_dir),
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert (
            json.loads(done.stdout)["runs"][0]["points"] == 4
        )  # trackio's own lines went to stderr
    logs = trackio_logs(trackio_dir, "paper", "rh-7b")
    assert [row["step"] for row in logs] == [10, 20, 40, 50]  # one copy after two exports
    assert [row["val/success_rate"] for row in logs] == pytest.approx([0.45, 0.50, 0.60, 0.65])


@pytest.mark.slow
def test_train_reports_to_tensorboard_and_trackio_with_the_held_out_curve(tmp_path):
    trackio_dir = tmp_path / "trackio"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ccpo_cli",
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--run",
            "live",
            "--steps",
            "2",
            "--tasks",
            "1",
            "--group",
            "2",
            "--eval-every",
            "1",
            "--eval-games",
            "2",
            "--max-steps",
            "2",
            "--workers",
            "0",
            "--report-to",
            "tensorboard,trackio,wandb",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={key: value for key, value in _env(trackio_dir).items() if key != "WANDB_MODE"},
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    db = open_db(tmp_path / "runs.db")
    recorded = {row["step"]: row for row in run_evaluations(db, "live")}
    run_dir = next(tmp_path.rglob("live/metrics.jsonl")).parent
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    # Step 0, the untrained evaluation, is the first line (issue 41: it was missing).
    assert [line["step"] for line in lines] == [0, 1, 2] and sorted(recorded) == [0, 1, 2]
    for line in lines:  # the held-out keys, as ingest reads them, on every evaluated step
        assert line["val/success_rate"] == pytest.approx(
            recorded[line["step"]]["success_rate"] / 100
        )
        assert line["val/episodes"] == recorded[line["step"]]["episodes"] == 2
    curve = {step: recorded[step]["success_rate"] / 100 for step in (0, 1, 2)}
    scalars = tensorboard_scalars(run_dir / "tensorboard")
    assert scalars["val/success_rate"] == pytest.approx(curve)
    assert set(scalars["actor/kl"]) == {1, 2}
    logs = trackio_logs(trackio_dir, "ccpo", "live")
    assert {row["step"]: row["val/success_rate"] for row in logs} == pytest.approx(curve)
    (offline,) = (run_dir / "wandb").glob("offline-run-*")  # WANDB_MODE unset: offline
    history = wandb_history(offline)
    assert history["val/success_rate"] == pytest.approx(curve)
    assert history["actor/kl"] == {line["step"]: line["actor/kl"] for line in lines[1:]}
    assert wandb_run_record(offline).display_name == "live"
    # Every number of every line is in runs.db's metrics table, at the line it was written to.
    from ccpo_cli.store.metrics import metric_series

    for key in ("actor/kl", "actor/pg_loss", "actor/entropy", "actor/grad_norm", "timing/step_s"):
        series = metric_series(db, "live", key)
        assert {p["step"]: p["value"] for p in series} == {
            line["step"]: line[key] for line in lines[1:]
        }
        assert [p["source_line"] for p in series] == [2, 3]
    assert metric_series(db, "live", "val/success_rate")[0]["step"] == 0


VERL_AGENT_LOG = REAL_LOGS / "jonp07_grpo_run_alfworld.txt"
# verl-agent's names of the loss, the KL, the entropy and the gradient norm.
TRAINING_KEYS = ("actor/pg_loss", "actor/kl_loss", "actor/entropy_loss", "actor/grad_norm")


@pytest.mark.slow
def test_a_verl_agent_logs_training_scalars_are_exported_to_tensorboard_and_wandb_equal(tmp_path):
    from ccpo_cli.store.metrics import metric_series

    db_path = tmp_path / "runs.db"
    ingest = runner.invoke(app, ["--db", str(db_path), "ingest", str(VERL_AGENT_LOG), "--run", "j"])
    assert ingest.exit_code == 0, ingest.output
    db = open_db(db_path)
    recorded = {
        key: {p["step"]: p["value"] for p in metric_series(db, "j", key)} for key in TRAINING_KEYS
    }
    assert all(sorted(series) == list(range(1, 151)) for series in recorded.values())
    out = tmp_path / "export"
    for _ in range(2):  # a second export replaces the first
        for tracker in ("tensorboard", "wandb"):
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "ccpo_cli",
                    "--db",
                    str(db_path),
                    "export",
                    "--to",
                    tracker,
                    "j",
                    "--out",
                    str(out),
                    "--json",
                ],
                capture_output=True,
                text=True,
                env={key: value for key, value in _env(tmp_path).items() if key != "WANDB_MODE"},
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
    scalars = tensorboard_scalars(out / "j")
    (offline,) = (out / "wandb").glob("offline-run-*")
    history = wandb_history(offline)
    standing = {row["step"]: row["success_rate"] / 100 for row in run_evaluations(db, "j")}
    for key, series in recorded.items():
        assert history[key] == series  # wandb keeps the float64 as logged
        assert scalars[key] == pytest.approx(series, rel=1e-6)  # TensorBoard's float32
    assert history["val/success_rate"] == pytest.approx(standing) and len(standing) == 31
    assert wandb_run_record(offline).project == "ccpo"
    # Ready for `wandb sync`: its own dry run finds the run (a loopback URL: nothing leaves).
    wandb_cli = Path(sys.executable).with_name("wandb")
    dry = subprocess.run(
        [str(wandb_cli), "sync", "--dry-run", str(offline)],
        capture_output=True,
        text=True,
        env={**os.environ, "WANDB_BASE_URL": "http://127.0.0.1:9", "WANDB_API_KEY": "x" * 40},
        timeout=120,
    )
    assert dry.returncode == 0 and "Would sync 1 run" in dry.stdout + dry.stderr, dry.stderr


def test_a_step_line_says_where_the_run_is_and_when():
    from ccpo_cli.backends.local.trainer import step_line

    metrics = {
        "train/success_rate": 50.0,
        "train/episode_length": 12.0,
        "actor/pg_loss": -0.0123,
        "actor/kl": 0.0042,
        "actor/grad_norm": 0.75,
        "advantage/mean": 0.01,
        "advantage/std": 0.9,
        "actor/entropy": 1.2,
        "actor/clip_fraction": 0.1,
    }
    line = step_line("rh-seed0", 37, 200, metrics, 2.5, {"step": 30, "success": 62.5}, 90.0)
    assert line.startswith("step   37/200 ")
    for part in (
        "2.5 s/step",
        "ETA 6.8 min",
        "held-out 62.5%@30",
        "loss -0.012",
        "kl 0.0042",
        "grad 0.75",
        "adv +0.01±0.90",
    ):
        assert part in line, part
    assert re.search(r"\[rh-seed0 \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\]$", line)
    assert "held-out -" in step_line("r", 1, 2, metrics, 1.0, None, 0.0)


def test_the_all_extra_installs_every_tracker_and_the_verl_env_never_installs_it():
    """The README's `.[all]` can use every --report-to choice (issue 41: trackio was left out);
    the verl-agent environment, whose hub<1 pin trackio's hub>=1.10 breaks, installs its own
    extras only."""
    import tomllib

    from ccpo_cli.report.trackers import LIVE_TRACKERS, TRACKER_EXTRAS

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    (line,) = extras["all"]
    included = set(line.split("[", 1)[1].rstrip("]").split(","))
    assert {TRACKER_EXTRAS[tracker] for tracker in LIVE_TRACKERS} <= included
    assert all(TRACKER_EXTRAS[tracker] in extras for tracker in LIVE_TRACKERS)
    installs = re.findall(r"\$REPO\[([^\]]*)\]", (ROOT / "scripts" / "verl_env.sh").read_text())
    assert installs and all(
        not {"all", "trackio", "wandb"} & set(names.split(",")) for names in installs
    )
