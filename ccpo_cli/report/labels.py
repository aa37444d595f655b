"""Short labels of the comparison units, for tables, plots and the `label` keys of compare --json.

A unit's full name (`ArmSummary.name`, `arms[].arm`, from `store.identity.unit_labels`) spells out every field that
sets it apart and can run to 150 characters: a table of such names shows nothing else. The short
label is the arm (name and `--set` overrides) plus, abbreviated, only the identity fields whose
values differ between the units present (`return-hard · Qwen2.5-7B-Instruct · verl`); the legend
(`legend_rows`) gives each label's full identity. `unit_key` names a unit by its identity alone,
so it does not change with what else is in the database.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import ArmSummary

SEPARATOR = " · "
NOT_RECORDED = "not recorded"
# The identity fields of a unit besides the arm, in label order, with their abbreviation.
LABEL_FIELDS = (
    "base_model",
    "backend",
    "benchmark",
    "split",
    "temperature",
    "episodes",
    "turn_limit",
)


def identity_values(arm: ArmSummary) -> dict[str, Any]:
    """The unit's identity fields (LABEL_FIELDS)."""
    protocol = arm.protocol
    return {
        "base_model": arm.identity.base_model,
        "backend": arm.identity.backend,
        "benchmark": arm.identity.benchmark,
        **{key: protocol[key] for key in ("split", "temperature", "episodes", "turn_limit")},
    }


def unit_key(arm: ArmSummary) -> str:
    """12 hex digits of the unit's identity (fingerprint or name, and LABEL_FIELDS)."""
    identity = {"arm": arm.arm_fingerprint or arm.arm_stable or arm.name, **identity_values(arm)}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[
        :12
    ]


def _abbreviated(name: str, value: Any) -> str:
    if value is None:
        return f"{name.replace('_', ' ')} {NOT_RECORDED}"
    if name == "base_model":
        return str(value).rsplit("/", 1)[-1]  # the organisation is in the legend
    if name == "temperature":
        return f"T={value:g}" if isinstance(value, (int, float)) else f"T={value}"
    if name == "episodes":
        return f"{value} eps"
    if name == "turn_limit":
        return f"{value} turns"
    return str(value)


def short_labels(arms: Sequence[ArmSummary]) -> list[str]:
    """One short label per `arms[]` entry, in order, each distinct."""
    values = [identity_values(arm) for arm in arms]
    differing = [
        name
        for name in LABEL_FIELDS
        if len({json.dumps(row[name], default=str) for row in values}) > 1
    ]
    labels = []
    for arm, row in zip(arms, values):
        base = arm.arm_stable or arm.name or NOT_RECORDED
        labels.append(
            SEPARATOR.join([base, *(_abbreviated(name, row[name]) for name in differing)])
        )
    # Units that still share a label differ in what the label leaves out (the arm file's flags
    # under one name): the fingerprint tells them apart.
    for label in {label for label in labels if labels.count(label) > 1}:
        for index in [i for i, other in enumerate(labels) if other == label]:
            fingerprint = arms[index].arm_fingerprint
            labels[index] = (
                f"{label}{SEPARATOR}{fingerprint[:8] if fingerprint else unit_key(arms[index])[:8]}"
            )
    return labels


def needs_legend(arms: Sequence[ArmSummary]) -> bool:
    """Whether a label says more than the arm: then the table needs the legend of identities."""
    return any(arm.label != (arm.arm_stable or arm.name) for arm in arms)


def legend_rows(arms: Sequence[ArmSummary]) -> list[dict[str, Any]]:
    """Per unit: its short label, the arm, its fingerprint and every identity field in full."""
    return [
        {
            "label": arm.label,
            "arm": arm.arm_stable,
            "arm_fingerprint": arm.arm_fingerprint,
            **identity_values(arm),
            "unit_key": arm.unit_key,
        }
        for arm in arms
    ]


__all__ = [
    "LABEL_FIELDS",
    "SEPARATOR",
    "identity_values",
    "legend_rows",
    "needs_legend",
    "short_labels",
    "unit_key",
]
