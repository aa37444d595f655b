"""A matrix read back for the testbed: each run's per-game outcomes and CPU seconds.

This module owns the testbed's loader, the one part of the testbed that reads runs.db and the
runs' `metrics.jsonl`: every evaluation of a run as its per-game outcomes (`RunData`), every
training step's and evaluation's CPU seconds, and the runs of one matrix prefix with their
warm-ups (`MatrixData`). It is apart from the statistics (testbed.py) and the cost
(testbed_cost.py) so that those stay pure functions of this data, testable without a database.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ccpo_cli.experiments.blocks import run_name


@dataclass
class RunData:
    """One run as the testbed reads it. `evaluations`: step -> {game id: won}; `step_cpu_s` /
    `eval_cpu_s`: step -> CPU seconds of that training step / evaluation (absent where the run
    did not record it); `start_step`: the step it forked at (0 from scratch)."""

    name: str
    seed: int | None
    stream: int
    start_step: int
    start_from: str | None
    evaluations: dict[int, dict[str, bool]]
    step_cpu_s: dict[int, float] = field(default_factory=dict)
    eval_cpu_s: dict[int, float] = field(default_factory=dict)
    step_decisions: dict[int, int] = field(default_factory=dict)
    eval_turns: dict[int, int] = field(default_factory=dict)
    start_arm: str | None = None  # the arm that trained the checkpoint it forked from

    def window_mean(self, steps: Iterable[int], games: set[str] | None = None) -> float | None:
        """Mean success (points) over the evaluations at `steps`, each over `games` (all: None)."""
        rates = []
        for step in steps:
            outcomes = self.evaluations.get(step)
            if outcomes is None:
                return None
            kept = [won for game, won in outcomes.items() if games is None or game in games]
            if not kept:
                return None
            rates.append(100.0 * sum(kept) / len(kept))
        return statistics.fmean(rates) if rates else None


def load_run(db, name: str) -> RunData:
    """A run of runs.db with its evaluations' episodes and its metrics file's CPU seconds."""
    from ccpo_cli.store import get_run, run_evaluations
    from ccpo_cli.store.queries import evaluation_episodes

    run = get_run(db, name)
    config = run.get("config") or {}
    train = config.get("train") or {}
    evaluations: dict[int, dict[str, bool]] = {}
    eval_turns: dict[int, int] = {}
    for evaluation in run_evaluations(db, name):
        episodes = evaluation_episodes(db, evaluation["id"])
        evaluations[int(evaluation["step"])] = {
            row["game_id"]: bool(row["won"]) for row in episodes
        }
        eval_turns[int(evaluation["step"])] = sum(int(row["turns"] or 0) for row in episodes)
    data = RunData(
        name,
        run.get("seed"),
        int(train.get("rollout_stream") or 0),
        int((config.get("start") or {}).get("step") or 0),
        train.get("start_from"),
        evaluations,
        eval_turns=eval_turns,
        start_arm=(config.get("start") or {}).get("arm"),
    )
    folder = config.get("run_dir")
    metrics = Path(folder) / "metrics.jsonl" if folder else None
    if metrics is not None and metrics.is_file():
        for line in metrics.read_text().splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            step = row.get("step")
            if not isinstance(step, int):
                continue
            if "cpu/step_s" in row:
                data.step_cpu_s[step] = float(row["cpu/step_s"])
            if "eval/cpu_s" in row:
                data.eval_cpu_s[step] = float(row["eval/cpu_s"])
            if "train/decisions" in row:
                data.step_decisions[step] = int(row["train/decisions"])
    return data


def warmup_name_of(run: RunData) -> str | None:
    """The warm-up run a fork started from (its folder's name is the run's name)."""
    return None if not run.start_from else Path(run.start_from).parent.parent.name


@dataclass
class MatrixData:
    """The runs of one matrix prefix: runs[label][seed], and the warm-ups by name."""

    prefix: str
    runs: dict[str, dict[int, RunData]]
    warmups: dict[str, RunData]

    def seeds(self, *labels: str) -> list[int]:
        """Seeds every one of `labels` ran, in order."""
        sets = [set(self.runs.get(label, {})) for label in labels]
        return sorted(set.intersection(*sets)) if sets else []

    def warmup_of(self, label: str, seed: int) -> RunData | None:
        name = warmup_name_of(self.runs[label][seed])
        return None if name is None else self.warmups.get(name)


def load_matrix(db, prefix: str, labels: Sequence[str], seeds: Iterable[int]) -> MatrixData:
    """Every run PREFIX-LABEL-seedN that runs.db holds (finished or not), and their warm-ups."""
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.store import get_run

    runs: dict[str, dict[int, RunData]] = defaultdict(dict)
    warmups: dict[str, RunData] = {}
    for seed in seeds:
        for label in labels:
            name = run_name(prefix, label, seed)
            try:
                status = get_run(db, name)["status"]
            except InvalidInput:
                continue
            if status != "finished":
                continue
            data = load_run(db, name)
            runs[label][seed] = data
            warm = warmup_name_of(data)
            if warm is not None and warm not in warmups:
                try:
                    warmups[warm] = load_run(db, warm)
                except InvalidInput:
                    pass
    return MatrixData(prefix, dict(runs), warmups)
