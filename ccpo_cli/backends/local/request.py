"""`ccpo train --backend local` as one typed request: which arm, which seeds, which options.

The CLI parses the command line into a `LocalTrainRequest` and calls `train_local`; this module
turns it into one `TrainConfig` and one `train_arm` call per seed (or, with `dry_run`, into the
runs it would start).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.arms import Arm
from ccpo_cli.backends import run_header, seed_run_name
from ccpo_cli.backends.local.config import TrainConfig, resume_base
from ccpo_cli.backends.observer import StepProgress, TrainingObserver
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.extras import require_extra
from ccpo_cli.vocabulary import LOCAL

BACKEND = LOCAL
# The request's fields that are `TrainConfig` fields of the same name (None: the config's default).
_CONFIG_FIELDS = (
    "steps",
    "tasks",
    "group",
    "eval_every",
    "max_steps",
    "eval_games",
    "eval_from",
    "workers",
    "dump_batches",
    "time_budget_s",
)


@dataclass(frozen=True)
class LocalTrainRequest:
    """What `ccpo train --backend local` was asked; None means the trainer's default."""

    arm: Arm
    seeds: tuple[int, ...]  # empty with `resume`: the seed the resumed run recorded
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
    # Each step's progress, for a terminal's bar (None: each step is a log line).
    progress: Callable[[StepProgress], None] | None = None

    def run_name(self, seed: int) -> str:
        """--run (with -seedN for several seeds); else, resuming, the name the folder records;
        else ARM-seedN."""
        if self.run is None and self.resume is not None:
            from ccpo_cli.backends.local.ownership import read_identity

            identity = read_identity(self.resume) if self.resume.is_dir() else None
            if identity is not None:
                return identity.run
        return seed_run_name(self.run, seed, len(self.seeds) > 1) or f"{self.arm.name}-seed{seed}"

    def given_options(self) -> dict[str, Any]:
        """The options given on the command line (what a dry run shows)."""
        return {
            name: getattr(self, name) for name in _CONFIG_FIELDS if getattr(self, name) is not None
        }

    def base_config(self) -> TrainConfig:
        """What an option left out means: the trainer's default, or, resuming, what the run
        recorded in its folder (a resume continues the run as it was set up)."""
        if self.resume is not None:
            recorded = _recorded_train_config(self.resume)
            if recorded is not None:
                return recorded
        return TrainConfig()

    def train_seeds(self) -> tuple[int, ...]:
        return self.seeds or (self.base_config().seed,)

    def train_config(self, seed: int) -> TrainConfig:
        """The `TrainConfig` of the run of `seed`: the base config with the options given."""
        return dataclasses.replace(self.base_config(), seed=seed, **self.given_options())

    def check(self) -> None:
        """Refuse a resume that could not be one continuation (before anything starts)."""
        if self.resume is None:
            return
        if len(self.seeds) > 1:
            raise UsageError("--resume continues one run: give one --seed, not --seeds")
        if not self.resume.is_dir():
            raise InvalidInput(
                f"--resume {self.resume}: no such run folder (nothing was started; check the path)"
            )


def _recorded_train_config(folder: Path) -> TrainConfig | None:
    """The config a run folder's config.json records; None when it has none that can be read."""
    import json

    try:
        document = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        train = document["train"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(train, dict):
        return None
    try:
        return resume_base(train)
    except (TypeError, ValueError):
        return None


def train_local(request: LocalTrainRequest, log: Callable[[str], None]) -> list[dict[str, Any]]:
    """Train each seed in turn (or, for a dry run, describe the runs); one summary per run."""
    request.check()
    runs = []
    resume = None if request.resume is None else str(request.resume)
    seeds = request.train_seeds()
    for index, seed in enumerate(seeds, start=1):
        name = request.run_name(seed)
        config = request.train_config(seed)
        identity = {
            "run": name,
            "backend": BACKEND,
            "arm": request.arm.name,
            "fingerprint": request.arm.fingerprint,
            "seed": seed,
        }
        if request.dry_run:
            runs.append(
                {
                    **identity,
                    "options": request.given_options(),
                    "resume": resume,
                    "config": config.as_dict(),
                }
            )
            continue
        if len(seeds) > 1:  # a header per run, so a multi-seed log says where each run starts
            log(run_header(name, request.arm.name, seed, f"{index} of {len(seeds)}"))
        runs.append(identity | _train_run(request, name, config, log))
    return runs


def _train_run(
    request: LocalTrainRequest, name: str, config: TrainConfig, log: Callable[[str], None]
) -> dict[str, Any]:
    """Train one seed's run; what its summary adds to the run's identity."""
    require_extra("local", "torch", what="ccpo train --backend local")
    from ccpo_cli.backends.local.trainer import train_arm  # torch only when training locally

    result = train_arm(
        request.arm,
        name,
        request.db_path,
        config,
        resume=request.resume is not None,
        run_dir=request.resume,
        log=log,
        observer=request.observer,
        progress=request.progress,
    )
    return {
        "run": result.run,
        "run_dir": str(result.run_dir),
        "last_step": result.last_step,
        "train_wall_s": result.train_wall_s,
        "evaluations": result.evaluations,
        "step1_rollout_hash": result.step1_rollout_hash,
    }
