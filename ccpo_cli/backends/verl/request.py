"""`ccpo train --backend verl` as one typed request: which arm, which seeds, which cluster.

The CLI parses the command line into a `VerlTrainRequest` and calls `train_verl`, which builds
one launch per seed (`launcher.build_launch`), then either writes the run folders (dry run) or
starts each launch and follows it, ingesting its metrics into runs.db.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.arms import Arm
from ccpo_cli.backends import run_header, seed_run_name
from ccpo_cli.backends.observer import TrainingObserver
from ccpo_cli.backends.verl.follow import start
from ccpo_cli.backends.verl.launcher import VerlLaunch, VerlLaunchRequest, build_launch
from ccpo_cli.backends.verl.run_folder import refuse_silent_continuation, render_run_script
from ccpo_cli.errors import CcpoError, UsageError

# The request's fields that a seed's launch request takes as they are, under the same name.
_LAUNCH_FIELDS = (
    "arm",
    "model",
    "gpus",
    "nnodes",
    "steps",
    "tasks",
    "group",
    "eval_every",
    "ray_address",
    "verl_agent",
    "resume",
    "host_profile",
    "save_every",
)


@dataclass(frozen=True)
class VerlTrainRequest:
    """What `ccpo train --backend verl` was asked; None means the protocol's value."""

    arm: Arm
    seeds: tuple[int, ...]
    db_path: Path
    model: str | None = None
    gpus: int | None = None
    nnodes: int = 1
    run: str | None = None
    resume: Path | None = None
    dry_run: bool = False
    steps: int | None = None
    tasks: int | None = None
    group: int | None = None
    eval_every: int | None = None
    max_steps: int | None = None  # env.max_steps, the turn limit per episode
    ray_address: str | None = None
    verl_agent: Path | None = None
    host_profile: str = "reference"
    save_every: int | None = None  # trainer.save_freq; None: at every evaluation
    # Told of each launch's start, ingested evaluations and end (the Hub publisher of --push-to-hub).
    observer: TrainingObserver | None = None

    @property
    def runs_root(self) -> Path:
        return Path(self.db_path).resolve().parent / "ccpo-runs"

    def launch_request(self, seed: int) -> VerlLaunchRequest:
        if not self.model:
            raise UsageError(
                "--backend verl needs --model (a Hugging Face model id or path), e.g. --model Qwen/Qwen2.5-7B-Instruct"
            )
        if self.gpus is None:
            raise UsageError("--backend verl needs --gpus (GPUs per node)")
        return VerlLaunchRequest(
            run=seed_run_name(self.run, seed, len(self.seeds) > 1),
            seed=seed,
            max_env_steps=self.max_steps,
            runs_root=self.runs_root,
            **{name: getattr(self, name) for name in _LAUNCH_FIELDS},
        )


@dataclass(frozen=True)
class VerlTrainResult:
    launches: list[VerlLaunch]
    runs: list[
        dict[str, Any]
    ]  # dry run: each launch's config document; else run, folder, exit code
    scripts: list[str] = field(
        default_factory=list
    )  # dry run: each launch's run.sh, as it would be written


def train_verl(request: VerlTrainRequest, log: Callable[[str], None]) -> VerlTrainResult:
    """Build every seed's launch first (so a bad option starts nothing), then start them; a dry
    run writes nothing and returns what each run folder would hold."""
    launches = [build_launch(request.launch_request(seed)) for seed in request.seeds]
    if request.dry_run:
        for launch in launches:
            refuse_silent_continuation(launch)  # what the real launch would refuse, refused now
        log(
            f"dry run: nothing written or started ({len(launches)} launch(es) under {request.runs_root})"
        )
        return VerlTrainResult(
            launches,
            [launch.config_document() for launch in launches],
            [render_run_script(launch) for launch in launches],
        )
    from ccpo_cli.store import open_db

    db = open_db(request.db_path)
    results = []
    for index, launch in enumerate(launches, start=1):
        if len(launches) > 1:  # a header per run, so a multi-seed log says where each run starts
            place = f"{index} of {len(launches)}"
            log(run_header(launch.run, request.arm.name, launch.request.seed, place))
        code = start(launch, db, log=log, observer=request.observer)
        results.append({"run": launch.run, "run_dir": str(launch.run_dir), "exit_code": code})
        if code != 0:
            raise CcpoError(
                f"run {launch.run}: verl-agent exited with code {code}; see {launch.run_dir / 'train.log'}"
            )
    return VerlTrainResult(launches, results)
