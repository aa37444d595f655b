"""One seed block of a matrix: the runs of one seed (a shared warm-up, then every arm), trained
one after the other into one runs database, with their folders under one root.

A block is a frozen value that travels as it is to a Ray worker (ray_blocks.py): it holds the
resolved arms and each run's whole training configuration, so the worker trains exactly what the
driver planned. `train_block` is the one place a matrix calls the trainer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ccpo_cli.errors import InvalidInput

if TYPE_CHECKING:
    from ccpo_cli.arms import Arm
    from ccpo_cli.backends.local.config import TrainConfig


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
    evaluated step set); `warm_start` K > 0 trains the first arm alone for K steps and forks
    every arm's run from its step-K checkpoint."""

    seed: int
    prefix: str
    arms: tuple[Arm, ...]
    recipe: TrainConfig
    warm_start: int
    run_root: str  # the folder holding the run folders (ccpo-runs/ next to the runs database)

    @property
    def run_names(self) -> list[str]:
        """The compared runs, one per arm, in arm order."""
        return [run_name(self.prefix, arm.name, self.seed) for arm in self.arms]

    def run_dir(self, name: str) -> Path:
        return Path(self.run_root) / name

    def runs(self) -> list[BlockRun]:
        """Every run in training order: the warm-up first when there is one."""
        from ccpo_cli.backends.local.checkpoints import checkpoint_path

        planned: list[BlockRun] = []
        start_from = None
        if self.warm_start:
            first = self.arms[0]
            name = warmup_run_name(self.prefix, first.name, self.seed)
            # No evaluations, so no panel subset either (as the warm-ups of earlier matrices recorded).
            warmup = replace(self.recipe, steps=self.warm_start, eval_every=0, eval_from=0, eval_games=None,
                             start_from=None)
            planned.append(BlockRun(first, name, warmup, compared=False))
            start_from = str(checkpoint_path(self.run_dir(name), self.warm_start))
        planned.extend(BlockRun(arm, run_name(self.prefix, arm.name, self.seed), replace(self.recipe, start_from=start_from),
                                compared=True) for arm in self.arms)
        return planned


@dataclass(frozen=True)
class BlockDone:
    """A finished block, and the node it ran on (None when it ran in this process)."""

    block: Block
    node: str | None


def run_finished(db, name: str) -> bool:
    from ccpo_cli.store import get_run

    try:
        return get_run(db, name).get("status") == "finished"
    except InvalidInput:
        return False


def _train(run: BlockRun, db_path: str | Path, run_dir: Path, log: Callable[[str], None] | None) -> None:
    """The matrix's only call of the local trainer (it resumes a run stopped half-way)."""
    from ccpo_cli.backends.local.trainer import train_arm

    # A run stopped half-way continues from its folder; a run not started yet begins in it.
    train_arm(run.arm, run.name, db_path, run.config, resume=run_dir.is_dir(), run_dir=run_dir, log=log)


def train_block(block: Block, db_path: str | Path, *, log: Callable[[str], None] | None = None,
                on_run: Callable[[int], None] | None = None) -> None:
    """Train the runs of `block` that are not finished yet into `db_path`. `on_run(k)` is called
    after the k-th compared run (1-based) is done, trained or found finished."""
    from ccpo_cli.store import open_db

    db = open_db(db_path)
    compared = 0
    for run in block.runs():
        if not run_finished(db, run.name):
            _train(run, db_path, block.run_dir(run.name), log)
        if run.compared:
            compared += 1
            if on_run is not None:
                on_run(compared)
