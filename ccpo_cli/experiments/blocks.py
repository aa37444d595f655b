"""One seed block of a matrix: the runs of one seed (a shared warm-up, then every arm), trained
one after the other into one runs database, with their folders under one root.

A block is a frozen value that travels as it is to a Ray worker (ray_blocks.py): it holds the
resolved arms and each run's whole training configuration, so the worker trains exactly what the
driver planned. `train_block` is the one place a matrix calls the trainer; it returns what each
run cost in CPU seconds (the trainer's process and its rollout workers), the measure of a
matrix's cost that other jobs on the machine do not change.
"""

from __future__ import annotations

import resource
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ccpo_cli.errors import InvalidInput

if TYPE_CHECKING:
    from ccpo_cli.arms import Arm
    from ccpo_cli.backends.local.config import TrainConfig


@dataclass(frozen=True)
class MatrixArm:
    """One arm of a matrix as its runs are named and trained: `label` names its runs
    (PREFIX-LABEL-seedN), `arm` is the resolved arm (an arm file's, with any flags set on top),
    `stream` its training-noise replicate (`TrainConfig.rollout_stream`: 0 the ordinary run; an
    A/A control's twin has another). Two labels may hold one arm only on different streams."""

    label: str
    arm: Arm
    stream: int = 0

    @property
    def described(self) -> str:
        """`gigpo-flip = gigpo [step_advantage_w=-1.0]`, `gigpo-b = gigpo (rollout stream 1)`."""
        parts = [self.arm.name]
        if self.arm.overrides:
            parts.append(
                "[" + ", ".join(f"{key}={value}" for key, value in self.arm.overrides) + "]"
            )
        if self.stream:
            parts.append(f"(rollout stream {self.stream})")
        text = " ".join(parts)
        return text if text == self.label else f"{self.label} = {text}"


def run_name(prefix: str, arm: str, seed: int) -> str:
    return f"{prefix}-{arm}-seed{seed}"


def warmup_run_name(prefix: str, arm: str, seed: int) -> str:
    return f"{prefix}-warmup-{arm}-seed{seed}"


@dataclass(frozen=True)
class BlockRun:
    """One run of a block: its arm, name and whole configuration; `compared` is False for the
    shared warm-up, which is trained for the arms to fork from and never compared."""

    arm: Arm
    name: str
    config: TrainConfig
    compared: bool


@dataclass(frozen=True)
class Block:
    """The runs of one seed. `recipe` is the matrix's configuration for this seed (seed and first
    evaluated step set); `warm_start` K > 0 trains `warmup_arm` alone for K steps and forks every
    arm's run from its step-K checkpoint."""

    seed: int
    prefix: str
    arms: tuple[MatrixArm, ...]
    recipe: TrainConfig
    warm_start: int
    run_root: str  # the folder holding the run folders (ccpo-runs/ next to the runs database)
    warmup_arm: MatrixArm | None = None  # who trains the warm-up (None: the first arm)

    @property
    def run_names(self) -> list[str]:
        """The compared runs, one per arm, in arm order."""
        return [run_name(self.prefix, arm.label, self.seed) for arm in self.arms]

    @property
    def trains_warmup(self) -> MatrixArm | None:
        """The arm that trains this seed's warm-up (None without a warm start)."""
        return (self.warmup_arm or self.arms[0]) if self.warm_start else None

    def run_dir(self, name: str) -> Path:
        return Path(self.run_root) / name

    def runs(self) -> list[BlockRun]:
        """Every run in training order: the warm-up first when there is one."""
        from ccpo_cli.backends.local.checkpoints import checkpoint_path

        planned: list[BlockRun] = []
        start_from = None
        first = self.trains_warmup
        if first is not None:
            name = warmup_run_name(self.prefix, first.label, self.seed)
            # No evaluations, so no panel subset either (as the warm-ups of earlier matrices recorded).
            warmup = replace(
                self.recipe,
                steps=self.warm_start,
                eval_every=0,
                eval_from=0,
                eval_games=None,
                start_from=None,
                rollout_stream=first.stream,
            )
            planned.append(BlockRun(first.arm, name, warmup, compared=False))
            start_from = str(checkpoint_path(self.run_dir(name), self.warm_start))
        planned.extend(
            BlockRun(
                arm.arm,
                run_name(self.prefix, arm.label, self.seed),
                replace(self.recipe, start_from=start_from, rollout_stream=arm.stream),
                compared=True,
            )
            for arm in self.arms
        )
        return planned


@dataclass(frozen=True)
class BlockDone:
    """A finished block, the node it ran on (None when it ran in this process), and the CPU
    seconds each of its runs took to train here (runs found finished cost nothing)."""

    block: Block
    node: str | None
    run_cpu_s: dict[str, float] | None = None

    @property
    def cpu_s(self) -> float | None:
        return None if self.run_cpu_s is None else sum(self.run_cpu_s.values())


def run_finished(db, name: str) -> bool:
    from ccpo_cli.store import get_run

    try:
        return get_run(db, name).get("status") == "finished"
    except InvalidInput:
        return False


def _train(
    run: BlockRun, db_path: str | Path, run_dir: Path, log: Callable[[str], None] | None
) -> None:
    """The matrix's only call of the local trainer (it resumes a run stopped half-way)."""
    from ccpo_cli.backends.local.trainer import train_arm

    # A run stopped half-way continues from its folder; a run not started yet begins in it.
    train_arm(
        run.arm, run.name, db_path, run.config, resume=run_dir.is_dir(), run_dir=run_dir, log=log
    )


def cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (a run's rollout workers
    end with the run), user and system."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def train_block(
    block: Block,
    db_path: str | Path,
    *,
    log: Callable[[str], None] | None = None,
    on_run: Callable[[int], None] | None = None,
    announce: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Train the runs of `block` that are not finished yet into `db_path`, and return the CPU
    seconds each took (0 for a run found finished). `on_run(k)` is called after the k-th
    compared run (1-based) is done, trained or found finished; `announce` gets a header line
    before each run that trains (and `log` gets it too, ahead of that run's own lines)."""
    from ccpo_cli.backends import run_header
    from ccpo_cli.store import open_db

    db = open_db(db_path)
    compared = 0
    spent: dict[str, float] = {}
    runs = block.runs()
    count = sum(run.compared for run in runs)
    for run in runs:
        before = cpu_seconds()
        if not run_finished(db, run.name):
            # A header per run, so a matrix log says where each run starts.
            place = (
                f"{compared + 1} of {count} in its block" if run.compared else "the block's warm-up"
            )
            header = run_header(run.name, run.arm.name, block.seed, place)
            for sink in {id(sink): sink for sink in (announce, log) if sink is not None}.values():
                sink(header)
            _train(run, db_path, block.run_dir(run.name), log)
        spent[run.name] = cpu_seconds() - before
        if run.compared:
            compared += 1
            if on_run is not None:
                on_run(compared)
    return spent
