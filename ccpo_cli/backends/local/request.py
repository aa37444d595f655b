"""`ccpo train --backend local` as one typed request: which arm, which seeds, which options.

The CLI parses the command line into a `LocalTrainRequest` and calls `train_local`; this module
turns it into one `train_arm` call per seed (or, with `dry_run`, into the runs it would start).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.arms import Arm
from ccpo_cli.backends import seed_run_name
from ccpo_cli.backends.observer import TrainingObserver

BACKEND = "local"


@dataclass(frozen=True)
class LocalTrainRequest:
    """What `ccpo train --backend local` was asked; None means the trainer's default."""

    arm: Arm
    seeds: tuple[int, ...]
    db_path: Path
    run: str | None = None
    resume: Path | None = None  # the run folder to continue
    dry_run: bool = False
    steps: int | None = None
    tasks: int | None = None
    group: int | None = None
    eval_every: int | None = None
    max_steps: int | None = None  # turn limit per episode
    eval_games: int | None = None
    eval_from: int | None = None
    workers: int | None = None
    dump_batches: bool | None = None
    time_budget_s: float | None = None
    # Told of each run's start, evaluations and end (the Hub publisher of --push-to-hub).
    observer: TrainingObserver | None = None

    def run_name(self, seed: int) -> str:
        return seed_run_name(self.run, seed, len(self.seeds) > 1) or f"{self.arm.name}-seed{seed}"

    def train_options(self) -> dict[str, Any]:
        """The options given, as `train_arm` keywords."""
        given = {
            "steps": self.steps, "tasks": self.tasks, "group": self.group, "eval_every": self.eval_every,
            "max_steps": self.max_steps, "eval_games": self.eval_games, "eval_from": self.eval_from,
            "workers": self.workers,
            "dump_batches": self.dump_batches, "time_budget_s": self.time_budget_s,
        }
        return {key: value for key, value in given.items() if value is not None}


def train_local(request: LocalTrainRequest, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Train each seed in turn (or, for a dry run, describe the runs); one summary per run."""
    from ccpo_cli.backends.local.trainer import train_arm  # torch only when training locally

    runs = []
    resume = None if request.resume is None else str(request.resume)
    for seed in request.seeds:
        name = request.run_name(seed)
        identity = {"run": name, "backend": BACKEND, "arm": request.arm.name,
                    "fingerprint": request.arm.fingerprint, "seed": seed}
        if request.dry_run:
            runs.append({**identity, "options": request.train_options(), "resume": resume})
            continue
        result = train_arm(request.arm, name, request.db_path, seed=seed, resume=request.resume is not None,
                           run_dir=request.resume, log=log, observer=request.observer, **request.train_options())
        runs.append({
            **identity, "run": result.run, "run_dir": str(result.run_dir), "last_step": result.last_step,
            "train_wall_s": result.train_wall_s, "evaluations": result.evaluations,
            "step1_rollout_hash": result.step1_rollout_hash,
        })
    return runs
