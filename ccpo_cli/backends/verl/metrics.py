"""The run's own metrics file: one flat JSON object per step, appended and flushed per line.

verl-agent's console logger prints inside the Ray TaskRunner actor and its file logger (PyPI
verl only) truncates on resume, so the toolkit owns the record: `{"step": N, "wall_time": t,
"<metric>": number-or-null, ...}` with sorted keys. NaN and infinities become null; values that
are not numbers are kept as strings. The launcher ingests this file into runs.db while the run
goes on, and `ccpo ingest --format ccpo` reads it afterwards.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def _number_or_text(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:  # numpy / torch scalars
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        number = float(value)
        return number if math.isfinite(number) else None
    if value is None:
        return None
    return str(value)


def flat_record(
    step: int, metrics: Mapping[str, Any], wall_time: float | None = None
) -> dict[str, Any]:
    """The JSON object written for one step (keys sorted; `step` and `wall_time` reserved)."""
    record: dict[str, Any] = {
        "step": int(step),
        "wall_time": time.time() if wall_time is None else float(wall_time),
    }
    for key in sorted(metrics):
        if key in ("step", "wall_time"):
            continue
        record[str(key)] = _number_or_text(metrics[key])
    return record


class MetricsSink:
    """Appends flat step records to one file; safe to share between threads of one process."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.Lock()

    def log(
        self, step: int, metrics: Mapping[str, Any], wall_time: float | None = None
    ) -> dict[str, Any]:
        record = flat_record(step, metrics, wall_time)
        line = json.dumps(record, sort_keys=False, allow_nan=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Append mode: a resumed run continues the file instead of truncating it.
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
                handle.flush()
        return record


def last_logged_step(path: str | os.PathLike[str]) -> int | None:
    """The highest step in a metrics file (None if empty or absent); a torn last line is ignored."""
    highest: int | None = None
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        try:
            step = int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
        highest = step if highest is None else max(highest, step)
    return highest


def mirror_tracking_to_sink(tracking_class: type, sink: MetricsSink) -> bool:
    """Make every `Tracking.log(data, step)` call also append to `sink` (idempotent).

    verl's `Tracking` only accepts its built-in backend names, so the sink is attached by
    wrapping the method in the worker where `fit()` runs rather than as a new backend.
    """
    original = tracking_class.log
    if getattr(original, "_ccpo_sink", None) is not None:
        return False

    def log(self, data, step, *args, **kwargs):
        result = original(self, data, step, *args, **kwargs)
        sink.log(step, data)
        return result

    log._ccpo_sink = sink  # type: ignore[attr-defined]
    log.__wrapped__ = original  # type: ignore[attr-defined]
    tracking_class.log = log
    return True
