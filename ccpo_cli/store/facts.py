"""Protocol facts of a run: flattened configuration keys and the explicit names they map to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as {"dotted.key": value} (mappings only; lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat
