"""A dataclass's fields as a JSON document's keys: said once, in the order they are declared.

The typed objects of the store (`RunIdentity`, `Resolution`, `IngestReport`, ...) give their
JSON documents with the fields in declaration order; an `as_dict` names only what it changes
(a nested object given as its own document, a field left out, a value derived), so a field
added to the class reaches the document without being written twice.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any


def field_values(
    obj: Any, *, leave_out: frozenset[str] = frozenset(), through: str | None = None
) -> dict[str, Any]:
    """{field name: value} of a dataclass instance, in declaration order, values as they are
    (shallow: unlike `dataclasses.asdict`, a nested object or tuple is not converted); with
    `through`, only the fields declared up to that one (the rest are given otherwise)."""
    values: dict[str, Any] = {}
    for spec in fields(obj):
        if spec.name not in leave_out:
            values[spec.name] = getattr(obj, spec.name)
        if spec.name == through:
            break
    return values
