"""Per-step CSV exports: one row per step, one column per metric.

Understood layouts:
* a wide table (`step,val/success_rate,val/pick_and_place_success_rate,...`), as written by
  pandas or a TensorBoard scalars export; the step column may be `step`, `Step`, `_step` or
  `global_step`;
* wandb's panel export: `Step,<run> - val/success_rate,<run> - val/success_rate__MIN,...`
  (the `__MIN`/`__MAX` band columns are ignored);
* TensorBoard's single-scalar download, `Wall time,Step,Value`, whose metric is named by
  `--metric` or by the file name TensorBoard gives it (`...tag-val_success_rate.csv`);
* a long table, one scalar per row (`step,tag,value`, tbparse's layout), in `csv_long`.

Empty cells are metrics not logged at that step. Success-rate columns may hold fractions or
percent: a column whose values go above 1 is read as percent (and said so). A column that is
none of the metrics ingest records and holds text (a `source_log` path, a note) is ignored and
named in the report; a recorded metric's column with a text cell skips that row, as before.

Width is bounded: a header of more than MAX_CSV_COLUMNS columns refuses the file before any
per-column structure is built (its cells are counted, not split), and a wider data row is
skipped; memory then does not grow with the width beyond that bound.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.readers.base import (
    BadRecord,
    MetricRecord,
    ReadEvent,
    ReadStats,
    Skipped,
    step_number,
)
from ccpo_cli.store.readers.csv_long import is_long_header, read_long
from ccpo_cli.store.readers.lines import Line, text_lines
from ccpo_cli.store.readers.metric_names import KNOWN_KEYS, RATE_KEYS, known_metric_from_tag

STEP_COLUMNS = ("step", "_step", "global_step", "trainer/global_step")
# verl-agent logs a few hundred metrics; a wandb panel export of many runs a few thousand columns.
MAX_CSV_COLUMNS = 10_000
_QUOTE_OR_COMMA = re.compile(r'[",]')
# A step column among the cells of a header too wide to split.
_STEP_CELL = re.compile(
    r'(?:^|,)\s*"?(?:' + "|".join(map(re.escape, STEP_COLUMNS)) + r')"?\s*(?:,|$)', re.IGNORECASE
)
_SINGLE_SCALAR = ("wall time", "step", "value")
_BAND_SUFFIX = re.compile(r"__(MIN|MAX)$")
_TAG_IN_FILE_NAME = re.compile(r"tag-(?P<tag>.+)\.csv$", re.IGNORECASE)


class CsvRow(NamedTuple):
    """One non-blank line of a CSV file, split: its line number and its cells. A class of its
    own (not a bare tuple) so that it is told apart from the read events `_rows` passes on."""

    number: int
    cells: list[str]


def cell_count(text: str, limit: int = MAX_CSV_COLUMNS) -> int:
    """The cells of one CSV line, counted without splitting it; the count stops at limit + 1."""
    if '"' not in text:
        return min(text.count(",") + 1, limit + 1)
    count, quoted = 1, False
    for match in _QUOTE_OR_COMMA.finditer(text):
        if match.group() == '"':
            quoted = not quoted  # a doubled quote inside a quoted cell toggles twice
        elif not quoted:
            count += 1
            if count > limit:
                break
    return count


def is_csv_header(text: str) -> bool:
    if cell_count(text) > MAX_CSV_COLUMNS:
        return _STEP_CELL.search(text) is not None  # too wide to split; read_csv refuses it
    cells = _cells(text)
    return len(cells) >= 2 and any(cell.strip().lower() in STEP_COLUMNS for cell in cells)


def _cells(text: str) -> list[str]:
    try:
        return next(csv.reader([text]), [])
    except csv.Error:
        return []


def _columns(
    path: Path, header: list[str], metric: str | None, source_run: str | None
) -> tuple[int, dict[int, str]]:
    """The step column's index and {column index: metric name}."""
    names = [cell.strip() for cell in header]
    if [name.lower() for name in names] == list(_SINGLE_SCALAR):
        tag = metric
        if tag is None:
            match = _TAG_IN_FILE_NAME.search(path.name)
            tag = known_metric_from_tag(match.group("tag")) if match else None
        if tag is None:
            raise InvalidInput(
                f"{path}: a single-scalar TensorBoard export (Wall time,Step,Value) without its metric name; "
                "pass --metric (e.g. --metric val/success_rate)"
            )
        return 1, {2: tag}
    step_index = next(i for i, name in enumerate(names) if name.lower() in STEP_COLUMNS)
    columns: dict[int, str] = {}
    runs: set[str] = set()
    for index, name in enumerate(names):
        if index == step_index or not name or _BAND_SUFFIX.search(name) or name.startswith("_"):
            continue
        run, separator, key = name.rpartition(" - ")
        if separator:
            runs.add(run)
            if source_run is not None and run != source_run:
                continue
        columns[index] = key if separator else name
    if source_run is not None and source_run not in runs:
        raise InvalidInput(
            f"{path}: no columns of run {source_run!r} (runs here: {', '.join(sorted(runs)) or 'none named'})"
        )
    if len(runs) > 1 and source_run is None:
        raise InvalidInput(
            f"{path}: columns from {len(runs)} runs ({', '.join(sorted(runs))}); pick one with --source-run "
            "or export one run per file"
        )
    return step_index, columns


def _rows(path: Path, stats: ReadStats | None) -> Iterator[CsvRow | ReadEvent]:
    """(line number, cells) of every non-blank line; the first one (the header) wider than
    MAX_CSV_COLUMNS refuses the file, a wider data row is skipped, both before splitting."""
    header_seen = False
    for item in text_lines(path, stats):
        if not isinstance(item, Line):
            yield item
            continue
        if cell_count(item.text) > MAX_CSV_COLUMNS:
            if not header_seen:
                raise InvalidInput(
                    f"{path}:{item.number}: a CSV header of more than {MAX_CSV_COLUMNS:,} columns; a per-step "
                    "export has one column per metric (export fewer metrics or one run per file)"
                )
            yield Skipped(item.number, f"row of more than {MAX_CSV_COLUMNS:,} cells")
            continue
        header_seen = True
        yield CsvRow(item.number, _cells(item.text))


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _survey_columns(path: Path, columns: dict[int, str]) -> tuple[dict[int, float], dict[int, str]]:
    """A first pass over the rows: ({column: largest value} of the success-rate columns that
    hold percent, {column: a text cell} of the columns ingest does not record that hold text)."""
    largest: dict[int, float] = {}
    text: dict[int, str] = {}
    rates = {index for index, key in columns.items() if key in RATE_KEYS}
    others = {index for index, key in columns.items() if key not in KNOWN_KEYS}
    rows = _rows(path, None)
    next((row for row in rows if isinstance(row, CsvRow)), None)  # the header
    for row in rows:
        if not isinstance(row, CsvRow):
            continue
        cells = row.cells
        for index in rates:
            value = _number(cells[index]) if index < len(cells) else None
            if value is not None:
                largest[index] = max(largest.get(index, value), value)
        for index in others - text.keys():
            cell = cells[index].strip() if index < len(cells) else ""
            if cell and _number(cell) is None:
                text[index] = cell
    percent = {index: value for index, value in largest.items() if 1.0 < value <= 100.0}
    return percent, text


def read_csv(
    path: Path,
    stats: ReadStats,
    metric: str | None = None,
    notes: list[str] | None = None,
    source_run: str | None = None,
) -> Iterator[ReadEvent]:
    rows = _rows(path, stats)
    header: CsvRow | None = None
    for row in rows:
        if isinstance(row, CsvRow):
            header = row
            break
        yield row
    if header is None or not any(cell.strip().lower() in STEP_COLUMNS for cell in header.cells):
        raise InvalidInput(
            f"{path}: no CSV header with a step column (one of {', '.join(STEP_COLUMNS)})"
        )
    if is_long_header(header.cells):
        yield from read_long(path, rows, header.cells, source_run)
        return
    step_index, columns = _columns(path, header.cells, metric, source_run)
    percent, text = _survey_columns(path, columns)
    for index, value in percent.items():
        if notes is not None:
            notes.append(
                f"{path}: column {columns[index]!r} read as percent (values up to {value:g})"
            )
    if text:
        if notes is not None:
            named = "; ".join(
                f"{columns[index]!r} (e.g. {cell[:40]!r})"
                for index, cell in sorted(text.items())[:10]
            )
            more = f"; and {len(text) - 10} more" if len(text) > 10 else ""
            notes.append(f"{path}: {len(text)} text column(s) ignored (not numbers): {named}{more}")
        columns = {index: key for index, key in columns.items() if index not in text}
    for row in rows:
        if not isinstance(row, CsvRow):
            yield row
            continue
        number, cells = row
        try:
            yield MetricRecord(*_record(cells, step_index, columns, percent), line=number)
        except BadRecord as error:
            yield Skipped(number, str(error))


def _record(
    cells: list[str], step_index: int, columns: dict[int, str], percent: dict[int, float]
) -> tuple[int, dict[str, Any]]:
    if len(cells) <= step_index:
        raise BadRecord("row has no step cell (cut short?)")
    try:
        step = step_number(float(cells[step_index]))
    except ValueError:
        raise BadRecord(f"step cell {cells[step_index][:40]!r} is not a number") from None
    metrics: dict[str, Any] = {}
    for index, key in columns.items():
        cell = cells[index].strip() if index < len(cells) else ""
        if not cell:
            continue
        try:
            value = float(cell)
        except ValueError:
            raise BadRecord(f"column {key!r}: {cell[:40]!r} is not a number") from None
        metrics[key] = value / 100.0 if index in percent else value
    return step, metrics
