"""Which runs a card sets beside its own, and the arm each run trained.

A card compares its run with the runs that pass the isolation check against it (the same
numbers `ccpo compare --json` prints, from `ccpo_cli.report.compare.compare_runs`); the arm of
each run is resolved by the arm registry with the overrides the run recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ccpo_cli import store
from ccpo_cli.errors import CcpoError, InvalidInput

# The local CPU backend (`ccpo train --backend local`) trains a small torch policy from scratch.
LOCAL_BACKEND = "local"


def compare(db: sqlite_utils.Database, runs: list[str], window_start: int) -> dict:
    from ccpo_cli.report.compare import compare_runs

    return compare_runs(db, runs, window_start=window_start)


def isolated_comparison(db: sqlite_utils.Database, run: str, window_start: int) -> tuple[dict, dict[str, list[str]]]:
    """The comparison document over `run` and every run that passes the isolation check
    against it, plus the runs left out with the differences that excluded them."""
    names = [row["name"] for row in store.list_runs(db) if row.get("n_evaluations")]
    others = [name for name in names if name != run]
    if not others:
        return compare(db, [run], window_start), {}
    everything = compare(db, [run, *others], window_start)
    if everything["isolation"]["estimator_only"]:
        return everything, {}
    included, excluded = [], {}
    for other in others:
        pair = compare(db, [run, other], window_start)
        if pair["isolation"]["estimator_only"]:
            included.append(other)
        else:
            excluded[other] = list(pair["isolation"]["differences"])
    return compare(db, [run, *included], window_start), excluded


def config_of(run_row: Mapping[str, Any]) -> dict:
    config = run_row.get("config")
    return config if isinstance(config, dict) else {}


def trained_from_scratch(run_row: Mapping[str, Any]) -> bool:
    """A run of the local CPU backend: a small policy trained from scratch, no Hub base model."""
    backend = run_row.get("backend") or config_of(run_row).get("backend")
    return backend == LOCAL_BACKEND


@dataclass(frozen=True)
class ResolvedArm:
    name: str
    label: str  # the arm's own short title, e.g. "CCPO return-hard"
    flags: dict[str, Any]
    fingerprint: str | None
    inert: dict[str, str]  # flag -> why it cannot change this arm's advantages


def resolve_arm(run_row: Mapping[str, Any]) -> ResolvedArm:
    """The arm a run recorded, resolved by the arm registry with the overrides the run recorded;
    the fingerprint the run recorded wins (it is what ran)."""
    name = run_row.get("arm")
    if not name:
        raise InvalidInput(f"run {run_row.get('name')!r} records no arm; ingest it with --arm")
    config = config_of(run_row)
    overrides = config.get("arm_overrides") or None
    from ccpo_cli import arms

    try:
        arm = arms.load_arm(name, overrides=overrides)
    except CcpoError:
        # An arm this version of ccpo does not know: fall back to what the run recorded.
        flags = dict(config.get("arm_flags") or {})
        return ResolvedArm(name, name, flags, run_row.get("arm_fingerprint"), {})
    flags = arm.flags() if callable(arm.flags) else dict(arm.flags)
    label = (arm.description or name).split(":")[0].strip() or name
    return ResolvedArm(name, label, flags, run_row.get("arm_fingerprint") or arm.fingerprint, arms.inert_flags(arm))
