"""JSON-lines metrics: ccpo's flat records, verl's `file` logger, wandb's history file.

* `ccpo`: ``{"step": 5, "val/success_rate": 0.8, ...}``
* `verl-file`: ``{"step": 5, "data": {"val/success_rate": 0.8, ...}}``
* wandb history: flat like `ccpo`, the step under ``_step``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ccpo_cli.store.readers.base import (
    BadRecord,
    IncompleteTail,
    MetricRecord,
    ReadEvent,
    ReadStats,
    Skipped,
    step_number,
)
from ccpo_cli.store.readers.lines import Line, text_lines
from ccpo_cli.vocabulary import VERL_FILE


def read_json_lines(
    path: Path, stats: ReadStats, shape: str, step_key: str = "step"
) -> Iterator[ReadEvent]:
    """`shape` is "ccpo" (flat) or "verl-file" (metrics under "data")."""
    for item in text_lines(path, stats):
        if not isinstance(item, Line):
            yield item
            continue
        try:
            obj = json.loads(item.text)
        except RecursionError:
            yield Skipped(item.number, "JSON nested too deeply to read")
            continue
        except ValueError as error:
            if not item.terminated:
                yield IncompleteTail(
                    item.number
                )  # still being written; the next ingest picks it up
                continue
            yield Skipped(item.number, f"not valid JSON ({getattr(error, 'msg', error)})")
            continue
        try:
            yield MetricRecord(*_record(obj, shape, step_key), line=item.number)
        except BadRecord as error:
            yield Skipped(item.number, str(error))


def _record(obj: Any, shape: str, step_key: str) -> tuple[int, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise BadRecord(f"expected a JSON object, got {type(obj).__name__}")
    if step_key not in obj:
        raise BadRecord(f"missing field {step_key!r}")
    step = step_number(obj[step_key])
    if shape == VERL_FILE:
        metrics = obj.get("data")
        if not isinstance(metrics, dict):
            raise BadRecord("field 'data' must be an object (verl file logger format)")
        return step, metrics
    if isinstance(obj.get("data"), dict) and not any(key.startswith("val/") for key in obj):
        raise BadRecord(
            "metrics nested under 'data' (verl file logger format); use --format verl-file or auto"
        )
    return step, {key: value for key, value in obj.items() if key != step_key}
