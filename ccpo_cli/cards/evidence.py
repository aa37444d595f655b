"""What a card's numbers rest on: the evaluation protocol, one evaluation's noise, and a
digest of the evaluation rows read."""

from __future__ import annotations

import collections
import hashlib
from collections.abc import Mapping
from typing import Any

import sqlite_utils

from ccpo_cli import store
from ccpo_cli.store.facts import VERL_CONFIG_KEYS, VERL_SPLITS, flatten

# Config keys that name the evaluation split, in order of preference, for runs that recorded
# no split fact (store/facts.py maps verl-agent's dataset names to ALFWorld's split names).
SPLIT_KEYS = ("eval_split", "val_split", VERL_CONFIG_KEYS["split"])


def _most_common(values: list[Any]) -> Any:
    present = [value for value in values if value is not None]
    return collections.Counter(present).most_common(1)[0][0] if present else None


def evaluation_protocol(window: Mapping[str, Any], window_evaluations: list[dict],
                        config: Mapping[str, Any]) -> dict[str, Any]:
    """Episodes, temperature and split of the evaluations a card's window averages: the
    window's one protocol, filled from the evaluations and the config where it is silent."""
    flat = flatten(config)
    chosen = window.get("protocol") or {}
    split = chosen.get("split") or next((flat[key] for key in SPLIT_KEYS if flat.get(key) is not None), None)
    return {
        "episodes": chosen.get("episodes") or _most_common([row.get("episodes") for row in window_evaluations]),
        "temperature": chosen.get("temperature") if chosen.get("temperature") is not None
        else _most_common([row.get("temperature") for row in window_evaluations]),
        "split": VERL_SPLITS.get(str(split), split) if split is not None else None,
        "mixed": bool(window.get("protocol_mixed")),
        "left_out": len(window.get("left_out_evaluation_ids") or []),
    }


def single_evaluation_noise(interval: Mapping[str, Any] | None) -> dict[str, Any]:
    """The comparison's single-evaluation interval, with the method spelled out for the card."""
    if not interval:
        return {"half_width": None, "method": "no window mean to evaluate it at"}
    episodes = f"{interval['episodes']} episodes" + (" (assumed: not recorded)" if interval.get("episodes_assumed") else "")
    return {
        "half_width": interval["half_width"],
        "low": interval["low"],
        "high": interval["high"],
        "episodes": interval["episodes"],
        "episodes_assumed": bool(interval.get("episodes_assumed")),
        "confidence": interval["confidence"],
        "method": (
            f"half-width of the {interval['confidence']:.0%} Wilson score interval for one evaluation of "
            f"{episodes} at the window mean of {interval['at']:.1f}%"
        ),
    }


def evidence_hash(db: sqlite_utils.Database, run_names: list[str]) -> str:
    """A digest of the evaluation rows the card reads, so a reader can tell two cards built from
    the same evidence apart from cards built after new evaluations arrived."""
    digest = hashlib.sha256()
    for name in sorted(run_names):
        digest.update(name.encode())
        for row in store.run_evaluations(db, name, split=None):
            digest.update(str(row["content_hash"]).encode())
    return digest.hexdigest()[:16]
