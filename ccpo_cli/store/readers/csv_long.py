"""Long CSV exports, one scalar per row: `step,tag,value` (tbparse's `SummaryReader(...).scalars`
written with pandas), with a `dir_name` or `run` column when it holds several runs.

Rows come in any order (tbparse groups them by tag), so a step's metrics are gathered before
they are yielded: every tag, as every scalar goes to runs.db's metrics table, so memory grows
with the file's values (one float each, the tag names shared).
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.readers.base import (
    BadRecord,
    MetricRecord,
    ReadEvent,
    Skipped,
    step_number,
)
from ccpo_cli.store.readers.metric_names import RATE_KEYS

RUN_COLUMNS = ("dir_name", "run")


def is_long_header(cells: list[str]) -> bool:
    names = {cell.strip().lower() for cell in cells}
    return {"step", "tag", "value"} <= names


def read_long(path: Path, rows, header: list[str], source_run: str | None) -> Iterator[ReadEvent]:
    names = [cell.strip().lower() for cell in header]
    step_at, tag_at, value_at = names.index("step"), names.index("tag"), names.index("value")
    run_at = next((names.index(name) for name in RUN_COLUMNS if name in names), None)
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    first_line: dict[int, int] = {}
    runs: set[str] = set()
    for row in rows:
        if not isinstance(row, tuple):
            yield row
            continue
        number, cells = row
        try:
            if len(cells) <= max(step_at, tag_at, value_at):
                raise BadRecord("row cut short")
            if run_at is not None and run_at < len(cells):
                runs.add(cells[run_at])
                if source_run is not None and cells[run_at] != source_run:
                    continue
            tag = sys.intern(cells[tag_at].strip())
            step = step_number(float(cells[step_at]))
            by_step[step][tag] = float(cells[value_at])
            first_line.setdefault(step, number)
        except (BadRecord, ValueError) as error:
            yield Skipped(number, str(error))
    if source_run is None and len(runs) > 1:
        raise InvalidInput(
            f"{path}: rows from {len(runs)} runs ({', '.join(sorted(runs)[:5])}); pick one with --source-run"
        )
    if source_run is not None and source_run not in runs:
        raise InvalidInput(f"{path}: no rows of run {source_run!r}")
    percent = {tag for tag in RATE_KEYS if any(m.get(tag, 0.0) > 1.0 for m in by_step.values())}
    for step in sorted(by_step):
        metrics = {
            tag: value / 100.0 if tag in percent else value for tag, value in by_step[step].items()
        }
        yield MetricRecord(step, metrics, first_line[step])
