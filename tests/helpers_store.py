"""Metrics files for the store tests and the store benchmark, written in the three formats
ccpo ingests (ccpo flat JSONL, verl file logger JSONL, verl console log as Ray prints it)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np

from ccpo_cli.task_types import VERL_METRIC_NAMES

WINDOW_STEPS = list(range(70, 120, 5))  # 70, 75, ..., 115: ten evaluations
ANSI_BLUE = "\x1b[36m"
ANSI_RESET = "\x1b[0m"


def window_rates(mean: float = 83.5, sd: float = 6.5, n: int = 10, seed: int = 7) -> list[float]:
    """n success rates (percent) whose sample mean and sd are exactly `mean` and `sd`."""
    draws = np.random.default_rng(seed).normal(size=n)
    standardised = (draws - draws.mean()) / draws.std(ddof=1)
    return [float(mean + sd * z) for z in standardised]


def training_series(
    rates_by_step: dict[int, float],
    total_steps: int,
    *,
    decimals: int | None = None,
    seed: int = 0,
) -> list[dict]:
    """One metrics dict per training step 0..total_steps (verl names, rates as fractions).

    Steps in `rates_by_step` carry a held-out evaluation (overall percent given; per-type
    rates and mean turns derived deterministically). `decimals` rounds every value as
    verl's console logger does (3).
    """
    rng = random.Random(seed)

    def value(number: float) -> float:
        return round(number, decimals) if decimals is not None else number

    rows = []
    for step in range(total_steps + 1):
        metrics = {
            "actor/entropy": value(0.5 + rng.random() / 10),
            "actor/pg_loss": value(-rng.random() / 100),
            "episode/success_rate": value(min(1.0, 0.3 + step / 160)),
            "timing_s/step": value(100 + rng.random()),
        }
        if step in rates_by_step:
            overall = rates_by_step[step] / 100
            metrics["val/success_rate"] = value(overall)
            for index, name in enumerate(VERL_METRIC_NAMES.values()):
                metrics[f"val/{name}_success_rate"] = value(
                    min(1.0, max(0.0, overall + (index - 2.5) / 50))
                )
            metrics["val/episode_length/mean"] = value(40 - step / 5)
        rows.append({"step": step, "metrics": metrics})
    return rows


def write_ccpo(rows: list[dict], path: Path, *, wall_time0: float = 1.7e9) -> Path:
    with path.open("w") as handle:
        for row in rows:
            flat = {"step": row["step"], "wall_time": wall_time0 + 60 * row["step"]}
            flat.update(
                {
                    key: (None if isinstance(v, float) and math.isnan(v) else v)
                    for key, v in row["metrics"].items()
                }
            )
            handle.write(json.dumps(flat, sort_keys=True) + "\n")
    return path


def write_verl_file(rows: list[dict], path: Path) -> Path:
    with path.open("w") as handle:
        for row in rows:
            handle.write(json.dumps({"step": row["step"], "data": row["metrics"]}) + "\n")
    return path


def console_line(step: int, metrics: dict, *, decimals: int | None = 3) -> str:
    parts = [f"step:{step}"]
    for key, number in metrics.items():
        parts.append(
            f"{key}:{number:.{decimals}f}" if decimals is not None else f"{key}:{number!r}"
        )
    return " - ".join(parts)


def write_console(
    rows: list[dict], path: Path, *, decimals: int | None = 3, wrap: int = 150, pid: int = 4242
) -> Path:
    """A Ray worker log: prefixed, coloured, wrapped at `wrap` characters, with the noise
    (progress bars, validation pretty-prints) that surrounds the metrics lines."""
    prefix = f"{ANSI_BLUE}(TaskRunner pid={pid}){ANSI_RESET} "
    lines = [
        f"{prefix}Using LocalLogger is deprecated.",
        f"{prefix}Initial validation metrics: {{'val/success_rate': np.float64(0.0),",
        f"{prefix}  'val/pick_and_place_success_rate': np.float64(0.0)}}",
    ]
    for row in rows:
        text = console_line(row["step"], row["metrics"], decimals=decimals)
        pieces = [text[i : i + wrap] for i in range(0, len(text), wrap)]
        lines.extend(prefix + piece for piece in pieces)
        lines.append(
            f"{prefix}Training Progress:  {row['step']}%|#   | {row['step']}/150 [00:10<01:00]"
        )
    path.write_text("\n".join(lines) + "\n")
    return path


WRITERS = {"ccpo": write_ccpo, "verl-file": write_verl_file, "console": write_console}


def acceptance_rows(decimals: int | None = None) -> list[dict]:
    """The seed card's run: evaluations every 5 steps, window 70..115 with mean 83.5 and sd 6.5."""
    rates = {step: 30 + step / 2 for step in range(0, 70, 5)}
    rates.update(dict(zip(WINDOW_STEPS, window_rates())))
    return training_series(rates, 119, decimals=decimals)


def db_content(db) -> dict:
    """The recorded facts of a database, without ids, times and provenance, for comparing
    databases filled from different files."""
    evaluations = db.execute(
        "SELECT runs.name, step, split, episodes, successes, success_rate, mean_turns, temperature, "
        "eval_seed, train_success_rate, content_hash, evaluations.id FROM evaluations "
        "JOIN runs ON runs.id = run_id ORDER BY runs.name, step"
    ).fetchall()
    types = db.execute(
        "SELECT runs.name, evaluations.step, task_type, t.episodes, t.successes, t.success_rate "
        "FROM task_type_results t JOIN evaluations ON evaluations.id = t.evaluation_id "
        "JOIN runs ON runs.id = evaluations.run_id ORDER BY 1, 2, 3"
    ).fetchall()
    runs = db.execute(
        "SELECT name, arm, arm_fingerprint, seed, base_model, last_step FROM runs ORDER BY name"
    ).fetchall()
    return {"evaluations": [row[:-1] for row in evaluations], "task_types": types, "runs": runs}
