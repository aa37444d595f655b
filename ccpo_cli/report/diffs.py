"""`ccpo runs diff A B` and `ccpo arms diff A B`: exactly what differs, field by field.

A run is compared by its recorded identity (store.identity: arm, fingerprint, base model,
backend, benchmark, seed, protocol), its protocol facts and its training config, flattened to
dotted keys; an arm by its resolved flags, each marked when it is inert in that arm (its value
changes no advantage there). Nothing that agrees is printed; a key one side lacks shows as
"not recorded".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

NOT_RECORDED = "not recorded"
# Per-run names and paths differ between any two runs and say nothing of the experiment.
_RUN_SPECIFIC = ("run_dir", "run", "name", "metrics_file", "worker_environment.CCPO_RUN", "resumes")


@dataclass(frozen=True)
class Difference:
    field: str
    first: Any
    second: Any
    note: str = ""


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {dotted.key: leaf}; lists stay whole leaves."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: value} if prefix else {}


def _same(first: Any, second: Any) -> bool:
    return json.dumps(first, sort_keys=True, default=str) == json.dumps(
        second, sort_keys=True, default=str
    )


def _differences(
    first: Mapping[str, Any], second: Mapping[str, Any], prefix: str
) -> list[Difference]:
    found = []
    for key in sorted(set(first) | set(second)):
        a, b = first.get(key, NOT_RECORDED), second.get(key, NOT_RECORDED)
        if not _same(a, b):
            found.append(Difference(f"{prefix}{key}", a, b))
    return found


def run_differences(first: Mapping[str, Any], second: Mapping[str, Any]) -> list[Difference]:
    """Two runs' {"identity", "facts", "config"} (identity as `RunIdentity.as_dict()`)."""

    def identity(entry: Mapping[str, Any]) -> dict[str, Any]:
        recorded = dict(entry["identity"])
        arm = recorded.pop("arm") or {}
        flat = {
            key: value
            for key, value in flatten(recorded).items()
            if key not in ("run", "uid", "host") and not key.startswith("facts")
        }
        flat.update({"arm": arm.get("label"), "arm_fingerprint": arm.get("fingerprint")})
        return flat

    found = _differences(identity(first), identity(second), "")
    found += _differences(first.get("facts") or {}, second.get("facts") or {}, "facts.")
    configs = [
        {
            key: value
            for key, value in flatten(entry.get("config") or {}).items()
            if not any(key == skip or key.startswith(f"{skip}.") for skip in _RUN_SPECIFIC)
        }
        for entry in (first, second)
    ]
    found += _differences(configs[0], configs[1], "config.")
    return found


def arm_differences(
    first_flags: Mapping[str, Any],
    second_flags: Mapping[str, Any],
    first_inert: Mapping[str, str],
    second_inert: Mapping[str, str],
) -> list[Difference]:
    """The resolved flags that differ; a flag inert in both arms is marked as such (it changes
    no advantage), one inert in one arm says which."""
    found = []
    for difference in _differences(first_flags, second_flags, ""):
        inert = [
            side
            for side, flags in (("first", first_inert), ("second", second_inert))
            if difference.field in flags
        ]
        note = (
            "inert in both" if len(inert) == 2 else f"inert in the {inert[0]} arm" if inert else ""
        )
        found.append(Difference(difference.field, difference.first, difference.second, note))
    return found


__all__ = ["Difference", "arm_differences", "flatten", "run_differences"]
