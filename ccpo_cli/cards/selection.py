"""Which runs a card sets beside its own, and the arm each of them trained.

A card describes one trained run. It compares that run's arm (its comparison unit: every seed of
the same arm fingerprint, base model, backend, benchmark and protocol) with the other arms in the
same setting whose runs pass the isolation check against it, and it shows the reference runs
(oracle, random, evaluated checkpoints) of that setting's benchmark. Arms and references are read
from the runs' recorded identities (`store.identity`), never from the arm registry by name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlite_utils

from ccpo_cli import store
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.identity import (
    FLAGS_NOT_RECORDED,
    ArmIdentity,
    RunIdentity,
    all_identities,
    unit_differences,
)
from ccpo_cli.vocabulary import LOCAL

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import Comparison

# The local CPU backend (`ccpo train --backend local`) trains a small torch policy from scratch.
LOCAL_BACKEND = LOCAL


def compare(db: sqlite_utils.Database, runs: list[str], window_start: int | None) -> Comparison:
    from ccpo_cli.report.compare import compare_runs

    return compare_runs(db, runs, window_start=window_start)


def card_identity(
    db: sqlite_utils.Database, run: str
) -> tuple[RunIdentity, dict[str, RunIdentity]]:
    """The run's identity (refused when a card cannot describe it) and every run's."""
    identities = all_identities(db)
    row = store.get_run(db, run)
    name = row["name"]
    if row.get("retracted"):  # `ccpo runs retract RUN`: its results are no longer claimed
        retracted = row["retracted"]
        raise InvalidInput(
            f"run {name!r} was retracted ({retracted['reason']}; {retracted['retracted_by']}, "
            f"{retracted['recorded_at']}): a card does not describe a retracted run"
        )
    identity = identities[name]
    if identity.is_reference:
        raise InvalidInput(
            f"run {name!r} only evaluated an agent ({identity.agent or 'agent not recorded'}): it is a reference "
            "run, which `ccpo compare` shows beside the arms; a model card describes a trained run"
        )
    if identity.arm is None:
        raise InvalidInput(f"run {name!r} records no arm; ingest it with --arm")
    return identity, identities


def isolated_comparison(
    db: sqlite_utils.Database,
    run: str,
    window_start: int | None,
    *,
    identities: dict[str, RunIdentity] | None = None,
) -> tuple[Comparison, dict[str, list[str]]]:
    """The comparison over `run`, every other seed of its arm (always kept), the other
    arms of the same setting whose runs do not fail the isolation check against them, and the
    reference runs of its benchmark; plus the runs left out with what excluded them. An arm whose
    check is only unverifiable stays in, and the card says what was not recorded."""
    if identities is None:
        identity, identities = card_identity(db, run)
    else:
        identity = identities[store.get_run(db, run)["name"]]
    with_evaluations = {row["name"] for row in store.list_runs(db) if row.get("n_evaluations")}
    own_unit, setting = identity.unit, identity.unit.setting()
    own = [
        identity.run,
        *(
            name
            for name, other in identities.items()
            if name != identity.run and not other.is_reference and other.unit == own_unit
        ),
    ]
    others: dict[Any, list[str]] = defaultdict(list)
    excluded: dict[str, list[str]] = {}
    references = []
    for name, other in identities.items():
        if name in own or name not in with_evaluations:
            continue
        if other.is_reference:
            if other.benchmark == identity.benchmark:
                references.append(name)
        elif other.unit.setting() == setting:
            others[other.unit].append(name)
        elif other.benchmark == identity.benchmark:
            excluded[name] = unit_differences(other, identity)
    candidates = [name for names in others.values() for name in names]
    everything = compare(db, [*own, *candidates, *references], window_start)
    if not others or everything.isolation["verdict"] != "fails":
        return everything, excluded
    included = []
    for names in others.values():
        pair = compare(db, [*own, *names], window_start)
        if pair.isolation["verdict"] != "fails":
            included.extend(names)
        else:
            excluded.update({name: list(pair.isolation["differences"]) for name in names})
    return compare(db, [*own, *included, *references], window_start), excluded


def config_of(run_row: Mapping[str, Any]) -> dict:
    config = run_row.get("config")
    return config if isinstance(config, dict) else {}


def trained_from_scratch(identity: RunIdentity) -> bool:
    """A run of the local CPU backend: a small policy trained from scratch, no Hub base model."""
    return identity.backend == LOCAL_BACKEND


@dataclass(frozen=True)
class ResolvedArm:
    name: str  # the arm file's name
    label: str  # the arm's own short title, e.g. "CCPO return-hard"
    unit_label: (
        str  # the comparison's label of its unit (the name, its overrides, what sets it apart)
    )
    flags: dict[str, Any]
    fingerprint: str | None
    inert: dict[str, str]  # flag -> why it cannot change this arm's advantages
    overrides: dict[str, Any]
    flags_source: str
    contradictions: dict[str, tuple[Any, Any]]  # flag -> (the run's log printed, the arm file says)
    recorded_fingerprint: str | None


def resolve_arm(arm: ArmIdentity, unit_label: str | None = None) -> ResolvedArm:
    """What a card states about an arm, from the flags the run recorded (or the arm file that
    computes its recorded fingerprint); inert flags are derived from those flags."""
    from ccpo_cli import arms

    flags = dict(arm.flags or {})
    typed = (
        arms.arm_from_flags(arm.name, flags, arm.description, arm.overrides) if arm.flags else None
    )
    inert = arms.inert_flags(typed) if typed is not None else {}
    label = (arm.description or arm.name).split(":")[0].strip() or arm.name
    if arm.overrides:
        label = f"{label} with {', '.join(f'{key}={value}' for key, value in sorted(arm.overrides.items()))}"
    return ResolvedArm(
        arm.name,
        label,
        unit_label or arm.label,
        flags,
        arm.fingerprint,
        inert,
        dict(arm.overrides),
        arm.flags_source if arm.flags else FLAGS_NOT_RECORDED,
        dict(arm.contradictions),
        arm.recorded_fingerprint,
    )
