"""What a card's numbers rest on: the evaluation protocol, one evaluation's noise, and a
digest of the evaluation rows read."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import sqlite_utils

from ccpo_cli import store
from ccpo_cli.report.window import Window
from ccpo_cli.store.identity import EPISODES_RECORDED, EvaluationProtocol


def evaluation_protocol(protocol: EvaluationProtocol, window: Window) -> dict[str, Any]:
    """Episodes, temperature and split of the evaluations a card's window averages: the run's
    recorded protocol (store.identity), with how the episode count is known."""
    return {
        "episodes": protocol.episodes,
        "episodes_basis": protocol.episodes_basis,
        # Pooled by a recorded count the inference divides but cannot confirm (a sub-multiple).
        "pooled_episodes": protocol.pooled_episodes,
        "episodes_uncertain": protocol.episodes_uncertain,
        "temperature": protocol.temperature,
        "split": protocol.split,
        "split_assumed": protocol.split_assumed,
        "turn_limit": protocol.turn_limit,
        "mixed": window.protocol_mixed,
        "left_out": len(window.left_out_evaluation_ids),
    }


def single_evaluation_noise(
    interval: Mapping[str, Any] | None, protocol: EvaluationProtocol
) -> dict[str, Any]:
    """The comparison's single-evaluation interval, with the method spelled out for the card."""
    if not interval:
        reason = (
            "the episodes per evaluation are not recorded"
            if not protocol.episodes
            else "no window mean to evaluate it at"
        )
        return {"half_width": None, "method": reason, "episodes": protocol.episodes}
    basis = interval.get("episodes_basis") or EPISODES_RECORDED
    episodes = f"{interval['episodes']} episodes" + (
        "" if basis == EPISODES_RECORDED else f" ({basis})"
    )
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


def named_checkpoint(
    db: sqlite_utils.Database,
    run: str,
    wanted_step: int | None,
    given: int | None,
    repo_id: str | None = None,
    sending: bool = False,
) -> int | None:
    """The checkpoint step a card may name as "published here": the one a publish sends and has
    landed before the card is committed (`given`), else `wanted_step` only when an upload of
    that step is recorded as landed (a publication with a commit, or a done outbox entry) in
    `repo_id` (any repository when None). A checkpoint saved on disk is not one published: the
    card says it publishes the numbers only. `sending`: this publish uploads a checkpoint
    (`--checkpoint` without a step) before it commits the card, so the step the run recorded a
    checkpoint at is the one it sends; the card is staged again after the upload lands."""
    if given is not None:
        return given
    if wanted_step is None:
        return None
    if sending and wanted_step in {row["step"] for row in store.run_checkpoints(db, run)}:
        return wanted_step
    return wanted_step if wanted_step in landed_checkpoint_steps(db, run, repo_id) else None


def landed_checkpoint_steps(
    db: sqlite_utils.Database, run: str, repo_id: str | None = None
) -> set[int]:
    """Steps whose checkpoint upload runs.db records as landed on the Hub (in `repo_id`)."""
    from ccpo_cli.store.outbox import entries

    steps = {
        int(row["checkpoint_step"])
        for row in store.run_publications(db, run)
        if row["checkpoint_step"] is not None
        and row["commit_id"]
        and (repo_id is None or row["repo_id"] == repo_id)
    }
    steps |= {
        entry.step
        for entry in entries(db, run, repo_id, state="done")
        if entry.kind == "checkpoint" and entry.commit_id
    }
    return steps


def evidence_hash(db: sqlite_utils.Database, run_names: list[str]) -> str:
    """A digest of the evaluation rows the card reads, so a reader can tell two cards built from
    the same evidence apart from cards built after new evaluations arrived."""
    digest = hashlib.sha256()
    for name in sorted(run_names):
        digest.update(name.encode())
        for row in store.run_evaluations(db, name, split=None):
            digest.update(str(row["content_hash"]).encode())
    return digest.hexdigest()[:16]
