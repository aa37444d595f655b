"""Local-policy checkpoints: where they live, how they are written (atomically) and read back,
and which ones a run keeps. Where a checkpoint lives needs no torch (a matrix plans its forks'
start checkpoints without it); writing and reading one import torch when they run."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccpo_cli.arms import Arm
from ccpo_cli.backends.local.config import TrainConfig
from ccpo_cli.errors import CcpoError, InvalidInput

if TYPE_CHECKING:
    from ccpo_cli.backends.local.policy import CommandScorer

CHECKPOINT_FORMAT = "ccpo-local-policy/1"
CHECKPOINT_KEEP = 2  # newest ones kept, besides the best-evaluated one


def default_run_dir(db_path: str | Path, run_name: str) -> Path:
    return Path(db_path).resolve().parent / "ccpo-runs" / run_name


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / "checkpoints" / f"step-{step:06d}.pt"


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = sorted((run_dir / "checkpoints").glob("step-*.pt"))
    return found[-1] if found else None


def checkpoints_to_remove(
    found: list[Path], best_step: int | None, keep_newest: int = CHECKPOINT_KEEP
) -> list[Path]:
    """All checkpoints but the newest few and the best-evaluated step's, which an interim card
    names as the one it publishes and so must stay on disk."""
    found = sorted(found)
    newest = found[-keep_newest:] if keep_newest > 0 else []
    best_name = None if best_step is None else checkpoint_path(Path(), best_step).name
    return [path for path in found if path not in newest and path.name != best_name]


def save_checkpoint(
    path: Path,
    model: CommandScorer,
    optimizer,
    step: int,
    arm: Arm,
    config: TrainConfig,
    train_wall_s: float,
    step1_rollout_hash: str | None = None,
) -> None:
    # One partial file per writer: two processes never write into the same one.
    partial = path.with_suffix(f".{os.getpid()}.partial")
    document = {
        "format": CHECKPOINT_FORMAT,
        "step": step,
        "arm": arm.name,
        "arm_fingerprint": arm.fingerprint,
        "model_config": model.config,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "config": config.as_dict(),
        "train_wall_s": train_wall_s,
        # A run forked from this checkpoint inherits the rollouts of its step 1.
        "step1_rollout_hash": step1_rollout_hash,
    }
    import torch

    try:
        path.parent.mkdir(exist_ok=True)  # never the run folder itself: a removed one stays removed
        torch.save(document, partial)
        partial.replace(path)  # a crash never leaves a half-written checkpoint under the real name
    except (OSError, RuntimeError) as error:  # torch reports a full disk as a RuntimeError
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        raise CcpoError(
            f"could not write checkpoint {path} ({error}); free disk space and continue with --resume {path.parent.parent}"
        ) from None


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint file's saved document, or InvalidInput when it is missing or not ours."""
    if not path.is_file():
        raise InvalidInput(f"{path}: no such checkpoint")
    try:
        import torch

        saved = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # torch raises several types for a damaged file
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise InvalidInput(f"{path}: not a ccpo local-policy checkpoint ({reason})") from None
    if not isinstance(saved, dict) or saved.get("format") != CHECKPOINT_FORMAT:
        raise InvalidInput(f"{path}: not a ccpo local-policy checkpoint")
    return saved


def load_policy(checkpoint: str | Path) -> tuple[CommandScorer, dict[str, Any]]:
    """The policy saved in a checkpoint file (or the latest one under a run folder)."""
    path = Path(checkpoint)
    if path.is_dir():
        found = latest_checkpoint(path) or latest_checkpoint(path.parent)
        if found is None:
            raise InvalidInput(f"{path}: no checkpoints/step-*.pt in this folder")
        path = found
    saved = read_checkpoint(path)
    from ccpo_cli.backends.local.policy import CommandScorer

    model = CommandScorer(**saved["model_config"])
    model.load_state_dict(saved["model"])
    model.eval()
    return model, saved
