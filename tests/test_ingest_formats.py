"""TensorBoard event files (written here by torch's real SummaryWriter), wandb run folders and
the usual CSV export layouts, each through `ccpo ingest --format auto`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers_store import acceptance_rows, write_console
from torch.utils.tensorboard import SummaryWriter
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db, run_evaluations
from ccpo_cli.task_types import VERL_METRIC_NAMES

runner = CliRunner()


def ingest(db_path: Path, path: Path, *extra: str, code: int = 0):
    result = runner.invoke(app, ["--db", str(db_path), "ingest", str(path), "--run", "r", *extra])
    assert result.exit_code == code, result.output
    return json.loads(result.stdout) if "--json" in extra else result


def stored(db_path: Path) -> dict[int, dict]:
    return {row["step"]: row for row in run_evaluations(open_db(db_path), "r")}


def series() -> dict[int, dict[str, float]]:
    """What a verl-agent run logs: training metrics every step, a validation every 5."""
    steps = {}
    for step in range(21):
        metrics = {"actor/pg_loss": 0.01 * step - 0.1, "episode/success_rate": min(1.0, step / 20)}
        if step % 5 == 0:
            metrics["val/success_rate"] = 0.1 + step / 37
            metrics["val/episode_length/mean"] = 40 - step / 3
            for i, name in enumerate(VERL_METRIC_NAMES.values()):
                metrics[f"val/{name}_success_rate"] = (step + i) / 41
        steps[step] = metrics
    return steps


def write_events(folder: Path, steps: dict[int, dict[str, float]]) -> Path:
    writer = SummaryWriter(log_dir=str(folder))
    for step, metrics in steps.items():
        for key, value in metrics.items():
            writer.add_scalar(key, value, global_step=step)
    writer.close()
    return folder


def assert_validations(
    db_path: Path, steps: dict[int, dict[str, float]], *, as_float32: bool
) -> None:
    cast = (lambda v: float(np.float32(v))) if as_float32 else float
    validations = {step: m for step, m in steps.items() if "val/success_rate" in m}
    rows = stored(db_path)
    assert sorted(rows) == sorted(validations)
    for step, metrics in validations.items():
        row = rows[step]
        assert row["success_rate"] == pytest.approx(
            100 * cast(metrics["val/success_rate"]), abs=1e-9
        )
        assert row["mean_turns"] == pytest.approx(
            cast(metrics["val/episode_length/mean"]), abs=1e-6
        )
        assert row["train_success_rate"] == pytest.approx(
            100 * cast(metrics["episode/success_rate"]), abs=1e-9
        )
        for short, name in VERL_METRIC_NAMES.items():
            expected = 100 * cast(metrics[f"val/{name}_success_rate"])
            assert row["task_types"][short]["success"] == pytest.approx(expected, abs=1e-9)


def test_tensorboard_run_folder_and_single_event_file(tmp_path):
    steps = series()
    folder = write_events(tmp_path / "tb" / "grpo_seed0", steps)
    document = ingest(tmp_path / "a.db", folder, "--json")
    assert (
        document["format"] == "tensorboard" and document["new"] == 5 and document["last_step"] == 20
    )
    assert_validations(tmp_path / "a.db", steps, as_float32=True)
    event_file = next(folder.glob("events.out.tfevents.*"))
    assert ingest(tmp_path / "b.db", event_file, "--json")["new"] == 5
    assert_validations(tmp_path / "b.db", steps, as_float32=True)
    # A parent holding one run is that run; a parent of several is refused, naming them.
    assert ingest(tmp_path / "c.db", tmp_path / "tb", "--json")["new"] == 5
    write_events(tmp_path / "tb" / "grpo_seed1", steps)
    result = ingest(tmp_path / "d.db", tmp_path / "tb", code=3)
    assert (
        "2 runs" in result.output
        and "grpo_seed1" in result.output
        and "Traceback" not in result.output
    )


def test_a_damaged_event_file_is_refused_with_one_line(tmp_path):
    path = tmp_path / "events.out.tfevents.123.host"
    path.write_bytes(b"this is not a TFRecord file at all\n" * 4)
    result = ingest(tmp_path / "t.db", path, code=3)
    assert str(path) in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def wandb_run(tmp_path: Path) -> Path:
    run = tmp_path / "wandb" / "run-20250101_120000-abc123"
    (run / "files").mkdir(parents=True)
    (run / "run-abc123.wandb").write_bytes(b"\x00binary history we do not read")
    (run / "files" / "wandb-summary.json").write_text(
        json.dumps({"_step": 119, "val/success_rate": 0.85})
    )
    write_console(acceptance_rows(3), run / "files" / "output.log")
    return run


def test_wandb_run_folder_reads_the_console_copy(tmp_path):
    run = wandb_run(tmp_path)
    for target, db in ((run, "a.db"), (run / "files", "b.db")):
        document = ingest(tmp_path / db, target, "--json")
        assert (
            document["format"] == "wandb" and document["new"] == 24 and document["last_step"] == 119
        )
    reference = tmp_path / "console.db"
    ingest(reference, run / "files" / "output.log")
    assert stored(tmp_path / "a.db").keys() == stored(reference).keys()
    assert [r["success_rate"] for r in stored(tmp_path / "a.db").values()] == [
        r["success_rate"] for r in stored(reference).values()
    ]


def test_wandb_history_is_preferred_in_full_precision(tmp_path):
    run = wandb_run(tmp_path)
    steps = series()
    with (run / "files" / "wandb-history.jsonl").open("w") as handle:
        for step, metrics in steps.items():
            handle.write(json.dumps({"_step": step, "_runtime": 3.5 * step, **metrics}) + "\n")
    document = ingest(tmp_path / "a.db", run, "--json")
    assert document["format"] == "wandb" and document["new"] == 5
    assert_validations(tmp_path / "a.db", steps, as_float32=False)
    # The history file on its own is recognised by its `_step` key.
    assert (
        ingest(tmp_path / "b.db", run / "files" / "wandb-history.jsonl", "--json")["format"]
        == "wandb"
    )


def write_table(path: Path, header: list[str], rows: list[list]) -> Path:
    path.write_text("\n".join(",".join(map(str, row)) for row in [header, *rows]) + "\n")
    return path


@pytest.mark.parametrize("step_column", ["step", "Step", "_step", "global_step"])
def test_wide_csv_with_per_type_columns_in_percent(tmp_path, step_column):
    steps = series()
    keys = [
        "val/success_rate",
        *(f"val/{n}_success_rate" for n in VERL_METRIC_NAMES.values()),
        "val/episode_length/mean",
        "episode/success_rate",
        "actor/pg_loss",
    ]
    percent = {k for k in keys if k.endswith("success_rate")}
    rows = [
        [step, *("" if k not in m else repr(100 * m[k] if k in percent else m[k]) for k in keys)]
        for step, m in steps.items()
    ]
    path = write_table(tmp_path / "export.csv", [step_column, *keys], rows)
    document = ingest(tmp_path / "t.db", path, "--json")
    assert document["format"] == "csv" and document["new"] == 5
    assert any("read as percent" in w for w in document["warnings"])
    assert_validations(tmp_path / "t.db", steps, as_float32=False)


def test_wandb_panel_export_and_tensorboard_single_scalar_download(tmp_path):
    rates = {0: 0.125, 10: 0.5, 20: 0.8125}
    panel = write_table(
        tmp_path / "wandb_export.csv",
        [
            "Step",
            "grpo-s0 - val/success_rate",
            "grpo-s0 - val/success_rate__MIN",
            "grpo-s0 - val/success_rate__MAX",
        ],
        [[s, r, r - 0.1, r + 0.1] for s, r in rates.items()],
    )
    assert ingest(tmp_path / "a.db", panel, "--json")["new"] == 3
    assert {s: r["success_rate"] for s, r in stored(tmp_path / "a.db").items()} == {
        s: 100 * r for s, r in rates.items()
    }
    scalar = write_table(
        tmp_path / "run-grpo_seed0-tag-val_success_rate.csv",
        ["Wall time", "Step", "Value"],
        [[1.7e9 + s, s, r] for s, r in rates.items()],
    )
    assert ingest(tmp_path / "b.db", scalar, "--json")["new"] == 3
    unnamed = write_table(
        tmp_path / "download.csv", ["Wall time", "Step", "Value"], [[1.7e9, 0, 0.5]]
    )
    assert "--metric" in ingest(tmp_path / "c.db", unnamed, code=3).output
    assert ingest(tmp_path / "c.db", unnamed, "--metric", "val/success_rate", "--json")["new"] == 1
    several = write_table(
        tmp_path / "several.csv",
        ["Step", "a - val/success_rate", "b - val/success_rate"],
        [[0, 0.1, 0.2]],
    )
    assert "export one run" in ingest(tmp_path / "d.db", several, code=3).output


def test_a_three_seed_export_is_read_one_run_at_a_time(tmp_path):
    rates = {seed: {0: 0.125 + seed / 10, 10: 0.5 + seed / 10} for seed in range(3)}
    header = ["Step"] + [
        f"grpo-7b-s{seed} - {key}"
        for seed in range(3)
        for key in ("val/success_rate", "val/success_rate__MIN", "val/success_rate__MAX")
    ]
    rows = [
        [step] + [value for seed in range(3) for value in (rates[seed][step],) * 3]
        for step in (0, 10)
    ]
    panel = write_table(tmp_path / "wandb_export.csv", header, rows)
    assert "--source-run" in ingest(tmp_path / "a.db", panel, code=3).output
    for seed in range(3):
        db = tmp_path / f"s{seed}.db"
        assert ingest(db, panel, "--source-run", f"grpo-7b-s{seed}", "--json")["new"] == 2
        assert {s: r["success_rate"] for s, r in stored(db).items()} == pytest.approx(
            {s: 100 * r for s, r in rates[seed].items()}
        )
    assert (
        "no columns of run"
        in ingest(tmp_path / "x.db", panel, "--source-run", "nope", code=3).output
    )


def test_long_step_tag_value_table_grouped_by_tag(tmp_path):
    steps = series()
    rows = [
        [run, tag, step, repr(value)]
        for run in ("seed0", "seed1")
        for tag in sorted({t for m in steps.values() for t in m})
        for step, metrics in steps.items()
        if tag in metrics
        for value in (metrics[tag],)
    ]
    path = write_table(tmp_path / "scalars.csv", ["dir_name", "tag", "step", "value"], rows)
    assert "--source-run" in ingest(tmp_path / "a.db", path, code=3).output
    document = ingest(tmp_path / "b.db", path, "--source-run", "seed1", "--json")
    assert document["format"] == "csv" and document["new"] == 5
    assert_validations(tmp_path / "b.db", steps, as_float32=False)
