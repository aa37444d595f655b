"""What a verl launch needs besides the protocol: credentials its logger needs, arm/model
combinations verl-agent cannot run, and the checkpoint policy with its retention.

Everything here is decided before anything starts, so a launch that would fail hours later in a
Ray worker (wandb asking for a key, a feature-reading arm without a reference model) is refused
with exit 3 and a message that says what to do.
"""

from __future__ import annotations

import netrc
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from ccpo_cli.errors import InvalidInput

WANDB = "wandb"
_WANDB_LOCAL_MODES = {"offline", "disabled", "dryrun"}
LORA_RANK_KEY = "actor_rollout_ref.model.lora_rank"
TRACKER_FILE = "latest_checkpointed_iteration.txt"
KEEP_POLICY = "newest and best-evaluated (held-out success rate, earliest on ties)"


def loggers_of(overrides: Mapping[str, Any]) -> list[str]:
    value = overrides.get("trainer.logger") or []
    return [str(item) for item in (value if isinstance(value, (list, tuple)) else [value])]


def wandb_credentials(environ: Mapping[str, str], home: Path) -> str | None:
    """How wandb would authenticate here (or run without needing to); None when it cannot."""
    mode = environ.get("WANDB_MODE", "").strip().lower()
    if mode in _WANDB_LOCAL_MODES:
        return f"WANDB_MODE={mode}"
    if environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY"
    path = Path(environ.get("NETRC") or home / ".netrc")
    host = (
        urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname or "api.wandb.ai"
    )
    try:
        found = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    return f"{path} ({host})" if found else None


def check_wandb(
    overrides: Mapping[str, Any], host_profile: str, environ: Mapping[str, str], home: Path
) -> None:
    if WANDB not in loggers_of(overrides):
        return
    if wandb_credentials(environ, home) is None:
        raise InvalidInput(
            f"trainer.logger includes wandb (host profile {host_profile!r}) but no wandb credentials were found "
            "(no WANDB_API_KEY, no ~/.netrc entry): run `wandb login` or set WANDB_API_KEY on every node, or set "
            "WANDB_MODE=offline to keep wandb's logs local (ccpo's metrics.jsonl and runs.db do not need wandb)"
        )


def check_lora_with_features(
    overrides: Mapping[str, Any], arm_name: str, uses_features: bool
) -> None:
    """verl-agent with LoRA has no separate reference worker (the actor with adapters off stands in),
    so the reference pass that captures features never runs: refuse rather than fail in a worker."""
    rank = overrides.get(LORA_RANK_KEY, 0) or 0
    if uses_features and int(rank) > 0:
        raise InvalidInput(
            f"arm {arm_name!r} reads reference-model features, which ccpo captures in verl-agent's separate "
            f"reference worker; with LoRA ({LORA_RANK_KEY}={rank}) there is none. Use full fine-tuning "
            "(lora_rank 0) or an arm that reads no features"
        )


def save_every(request_save_every: int | None, test_freq: Any) -> int:
    """Checkpoint interval: --save-every, else every evaluation (trainer.test_freq)."""
    if request_save_every is not None:
        if request_save_every < 1:
            raise InvalidInput(f"--save-every must be at least 1, got {request_save_every}")
        return request_save_every
    return max(int(test_freq), 1)


def _step_of(folder: Path) -> int | None:
    tail = folder.name.removeprefix("global_step_")
    return int(tail) if folder.name.startswith("global_step_") and tail.isdigit() else None


def prune_checkpoints(
    root: Path, best_step: int | None, keep: frozenset[int] = frozenset()
) -> list[Path]:
    """Delete `global_step_N` folders other than the newest complete one, the best-evaluated one,
    those in `keep` (waiting for an upload) and any newer than the tracker (a save in progress);
    returns what was deleted."""
    root = Path(root)
    tracker = root / TRACKER_FILE
    if not tracker.is_file():
        return []
    text = tracker.read_text(encoding="utf-8").strip()
    if not text.isdigit():
        return []
    newest = int(text)
    removed = []
    for folder in sorted(root.glob("global_step_*")):
        step = _step_of(folder)
        if (
            step is None
            or step >= newest
            or step == best_step
            or step in keep
            or not folder.is_dir()
        ):
            continue
        shutil.rmtree(folder)
        removed.append(folder)
    return removed
