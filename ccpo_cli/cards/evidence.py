"""What a card's numbers rest on: the evaluation protocol, one evaluation's noise, and a
digest of the evaluation rows read."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import sqlite_utils

from ccpo_cli import store
from ccpo_cli.store.identity import EPISODES_RECORDED, EvaluationProtocol


def evaluation_protocol(protocol: EvaluationProtocol, window: Mapping[str, Any]) -> dict[str, Any]:
    """Episodes, temperature and split of the evaluations a card's window averages: the run's
    recorded protocol (store.identity), with how the episode count is known."""
    return {
        "episodes": protocol.episodes,
        "episodes_basis": protocol.episodes_basis,
        "temperature": protocol.temperature,
        "split": protocol.split,
        "split_assumed": protocol.split_assumed,
        "turn_limit": protocol.turn_limit,
        "mixed": bool(window.get("protocol_mixed")),
        "left_out": len(window.get("left_out_evaluation_ids") or []),
    }


def single_evaluation_noise(interval: Mapping[str, Any] | None, protocol: EvaluationProtocol) -> dict[str, Any]:
    """The comparison's single-evaluation interval, with the method spelled out for the card."""
    if not interval:
        reason = ("the episodes per evaluation are not recorded" if not protocol.episodes
                  else "no window mean to evaluate it at")
        return {"half_width": None, "method": reason, "episodes": protocol.episodes}
    basis = interval.get("episodes_basis") or EPISODES_RECORDED
    episodes = f"{interval['episodes']} episodes" + ("" if basis == EPISODES_RECORDED else f" ({basis})")
    return {
        "half_width": interval["half_width"],
        "low": interval["low"],
        "high": interval["high"],
        "episodes": interval["episodes"],
        "episodes_basis": basis,
        "confidence": interval["confidence"],
        "method": (
            f"half-width of the {interval['confidence']:.0%} Wilson score interval for one evaluation of "
            f"{episodes} at the window mean of {interval['at']:.1f}%"
        ),
    }


def named_checkpoint(db: sqlite_utils.Database, run: str, wanted_step: int | None, given: int | None) -> int | None:
    """The checkpoint step a card may name: the one a publish sends (`given`), else `wanted_step`
    only when a checkpoint or publication record of the run names that step, else None."""
    if given is not None:
        return given
    if wanted_step is None:
        return None
    recorded = {row["step"] for row in store.run_checkpoints(db, run)}
    recorded |= {row["checkpoint_step"] for row in store.run_publications(db, run) if row["checkpoint_step"] is not None}
    return wanted_step if wanted_step in recorded else None


def evidence_hash(db: sqlite_utils.Database, run_names: list[str]) -> str:
    """A digest of the evaluation rows the card reads, so a reader can tell two cards built from
    the same evidence apart from cards built after new evaluations arrived."""
    digest = hashlib.sha256()
    for name in sorted(run_names):
        digest.update(name.encode())
        for row in store.run_evaluations(db, name, split=None):
            digest.update(str(row["content_hash"]).encode())
    return digest.hexdigest()[:16]
