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
    """The comparison document over `run`, every other seed of its arm (replicates, always kept),
    and every other arm whose runs do not fail the isolation check against them; plus the runs
    left out with the differences that excluded them. An arm whose check is only unverifiable
    stays in, and the card says what was not recorded."""
    rows = [row for row in store.list_runs(db) if row.get("n_evaluations") or row["name"] == run]
    arm_of = {row["name"]: row.get("arm") or f"(run {row['name']})" for row in rows}
    own = [name for name in arm_of if arm_of[name] == arm_of[run]]
    own = [run, *(name for name in own if name != run)]
    others: dict[str, list[str]] = {}
    for name, arm in arm_of.items():
        if arm != arm_of[run]:
            others.setdefault(arm, []).append(name)
    everything = compare(db, [*own, *(name for names in others.values() for name in names)], window_start)
    if not others or everything["isolation"]["verdict"] != "fails":
        return everything, {}
    included, excluded = [], {}
    for names in others.values():
        pair = compare(db, [*own, *names], window_start)
        if pair["isolation"]["verdict"] != "fails":
            included.extend(names)
        else:
            excluded.update({name: list(pair["isolation"]["differences"]) for name in names})
    return compare(db, [*own, *included], window_start), excluded


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
    flags = arm.flags()
    label = (arm.description or name).split(":")[0].strip() or name
    return ResolvedArm(name, label, flags, run_row.get("arm_fingerprint") or arm.fingerprint, arms.inert_flags(arm))
