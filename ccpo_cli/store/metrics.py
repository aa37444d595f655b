"""Every scalar a run logged, at every step: the `metrics` table of runs.db.

Evaluations hold what compare and the cards read (success rates at validation steps); this
table holds the rest of what a log says, in long format (run, name, step, value, source file
and line): loss, KL, entropy, gradient norm, response length, step time, the training success
rate of every step. Ingest fills it from every format it reads (`scalar_values` of each
record), the local trainer from each step's metrics, and `ccpo sync` carries it (`export_rows`,
`merge_row`). It is append-only with the evaluations' idempotence: a value already recorded
for the run, name and step adds nothing, from whatever file; another value is kept beside it,
and the first recorded stands (`metric_series`, the `metric_steps` view). compare and the
cards never read it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import inserted_id, utc_now
from ccpo_cli.store.records import run_id

# The table `ccpo sync` carries (a part per run, as for the other tables).
SYNC_TABLE = "metrics"
# Keys a logger adds about itself, not the run: wandb's `_step`, `_runtime`, `_timestamp`.
_LOGGER_PREFIX = "_"
# A name longer than this is not a metric name (a garbled line); it is left out.
MAX_NAME_CHARS = 512
# Names offered when a --metric is not recorded.
SUGGESTED = 12


def scalar_values(metrics: Mapping[str, Any]) -> Iterator[tuple[str, float]]:
    """(name, value) of every number in one step's record: ints and floats (NaN and infinities
    included, as logged), never booleans, text or the logger's own `_` keys."""
    for name, value in metrics.items():
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and isinstance(name, str)
            and name
            and not name.startswith(_LOGGER_PREFIX)
            and len(name) <= MAX_NAME_CHARS
        ):
            yield name, float(value)


@dataclass
class MetricCounts:
    """What recording scalars did: new rows, and values already recorded (duplicates)."""

    new: int = 0
    duplicates: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"new": self.new, "duplicates": self.duplicates}


def _stored(value: float) -> float | None:
    # SQLite stores NaN as NULL; the index and the readers read NULL back as NaN.
    return None if math.isnan(value) else value


def source_id(db: sqlite_utils.Database, run: int, source_file: str | None) -> int | None:
    """The id naming `source_file` for the run (created on first use); None for no file."""
    if source_file is None:
        return None
    row = next(
        db.table("metric_sources").rows_where(
            "run_id = ? AND source_file = ?", [run, source_file], select="id", limit=1
        ),
        None,
    )
    if row is not None:
        return int(row["id"])
    return inserted_id(
        db.table("metric_sources").insert(
            {"run_id": run, "source_file": source_file, "recorded_at": utc_now()}
        )
    )


class MetricWriter:
    """Records the scalars of one run from one source file, step by step (`write`), inside the
    caller's transaction; the names' ids are looked up once each."""

    def __init__(self, db: sqlite_utils.Database, run: str | int, source_file: str | None):
        self.db = db
        self.run = run if isinstance(run, int) else run_id(db, run)
        self.source = source_id(db, self.run, source_file)
        self.counts = MetricCounts()
        self._names: dict[str, int] = {}

    def _name_id(self, name: str) -> int:
        known = self._names.get(name)
        if known is None:
            self.db.execute("INSERT OR IGNORE INTO metric_names (name) VALUES (?)", [name])
            known = self.db.execute(
                "SELECT id FROM metric_names WHERE name = ?", [name]
            ).fetchone()[0]
            self._names[name] = known
        return known

    def write(self, step: int, values: Iterable[tuple[str, float]], line: int | None) -> None:
        """One step's scalars (from `scalar_values`); a value the run already has for that name
        and step is a duplicate and adds nothing."""
        rows = [
            (self.run, self._name_id(name), step, _stored(value), self.source, line)
            for name, value in values
        ]
        if not rows:
            return
        before = self.db.conn.total_changes
        self.db.conn.executemany(
            "INSERT OR IGNORE INTO metrics (run_id, name_id, step, value, source_id, source_line) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
        new = self.db.conn.total_changes - before
        self.counts.new += new
        self.counts.duplicates += len(rows) - new


def record_metrics(
    db: sqlite_utils.Database,
    run: str | int,
    step: int,
    values: Iterable[tuple[str, float]],
    *,
    source_file: str | None = None,
    source_line: int | None = None,
) -> MetricCounts:
    """Record one step's scalars (from `scalar_values`) for the run: `MetricWriter` for one."""
    writer = MetricWriter(db, run, source_file)
    writer.write(step, values, source_line)
    return writer.counts


def _value(stored: float | None) -> float:
    return math.nan if stored is None else float(stored)


def metric_names(db: sqlite_utils.Database, run: str | int) -> list[str]:
    """The names of every scalar recorded for the run, sorted."""
    identifier = run_id(db, run)
    return [
        row["name"]
        for row in db.query(
            "SELECT name FROM metric_names WHERE id IN "
            "(SELECT DISTINCT name_id FROM metrics WHERE run_id = ?) ORDER BY name",
            [identifier],
        )
    ]


def metric_series(db: sqlite_utils.Database, run: str | int, name: str) -> list[dict[str, Any]]:
    """One point per step of the scalar `name` of the run, the value recorded first (a later
    different value of the same step is counted in `other_values`), with its source file and
    line. InvalidInput naming the recorded names when the run has none of that name."""
    identifier = run_id(db, run)
    points: dict[int, dict[str, Any]] = {}
    for row in db.query(
        "SELECT m.step, m.value, m.source_line, s.source_file FROM metrics AS m "
        "LEFT JOIN metric_sources AS s ON s.id = m.source_id "
        "WHERE m.run_id = ? AND m.name_id = (SELECT id FROM metric_names WHERE name = ?) "
        "ORDER BY m.step, m.id",
        [identifier, name],
    ):
        point = points.get(row["step"])
        if point is not None:
            point["other_values"] += 1
            continue
        points[row["step"]] = {
            "step": row["step"],
            "value": _value(row["value"]),
            "source_file": row["source_file"],
            "source_line": row["source_line"],
            "other_values": 0,
        }
    if not points:
        names = metric_names(db, identifier)
        close = [known for known in names if name.lower() in known.lower()] or names
        shown = ", ".join(close[:SUGGESTED]) + (
            f" and {len(close) - SUGGESTED} more" if len(close) > SUGGESTED else ""
        )
        raise InvalidInput(
            f"run {run!r} has no metric {name!r} recorded"
            + (f"; it has {shown}" if names else "; it has no metric recorded")
        )
    return list(points.values())


def metric_series_document(
    db: sqlite_utils.Database, run: str, names: Iterable[str]
) -> dict[str, Any]:
    """`ccpo runs show RUN --metric KEY...`: the run and one series per name (`metric_series`)."""
    return {
        "run": run,
        "series": [
            {"metric": name, "points": metric_series(db, run, name)}
            for name in dict.fromkeys(names)
        ],
    }


def run_metric_steps(db: sqlite_utils.Database, run: str | int) -> dict[int, dict[str, float]]:
    """{step: {name: value}} of every scalar of the run, the first value recorded of each."""
    identifier = run_id(db, run)
    steps: dict[int, dict[str, float]] = {}
    for row in db.query(
        "SELECT m.step, n.name, m.value FROM metrics AS m JOIN metric_names AS n ON n.id = m.name_id "
        "WHERE m.run_id = ? ORDER BY m.step, m.id",
        [identifier],
    ):
        steps.setdefault(row["step"], {}).setdefault(row["name"], _value(row["value"]))
    return steps


# --- ccpo sync: the table's rows in part form -------------------------------------------------

SYNC_COLUMNS = ("name", "step", "value", "source_file", "source_line")


def sync_schema(pa: Any) -> list[tuple[str, Any]]:
    text, integer, real = pa.string(), pa.int64(), pa.float64()
    return [
        ("run_uid", text),
        ("name", text),
        ("step", integer),
        ("value", real),
        ("source_file", text),
        ("source_line", integer),
    ]


def item_parts(row: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two metric rows on two machines the same: name, step and value."""
    value = row["value"]
    return (row["name"], row["step"], None if value is None or math.isnan(value) else value)


def export_rows(
    db: sqlite_utils.Database, run: Mapping[str, Any], chunk_rows: int
) -> Iterator[list[dict[str, Any]]]:
    """The run's metric rows in part form, `chunk_rows` at a time."""
    last_id = 0
    while True:
        batch = list(
            db.query(
                "SELECT m.id, n.name, m.step, m.value, m.source_line, s.source_file FROM metrics AS m "
                "JOIN metric_names AS n ON n.id = m.name_id "
                "LEFT JOIN metric_sources AS s ON s.id = m.source_id "
                "WHERE m.run_id = ? AND m.id > ? ORDER BY m.id LIMIT ?",
                [run["id"], last_id, chunk_rows],
            )
        )
        if not batch:
            return
        last_id = batch[-1]["id"]
        yield [dict({key: row[key] for key in SYNC_COLUMNS}, run_uid=run["uid"]) for row in batch]


def _same_line_recorded(
    db: sqlite_utils.Database,
    run: int,
    name: str,
    step: int,
    source_file: str | None,
    source_line: int | None,
) -> bool:
    if source_file is None or source_line is None:
        return False
    found = db.execute(
        "SELECT 1 FROM metrics AS m JOIN metric_names AS n ON n.id = m.name_id "
        "JOIN metric_sources AS s ON s.id = m.source_id WHERE m.run_id = ? AND n.name = ? "
        "AND m.step = ? AND s.source_file = ? AND m.source_line = ? LIMIT 1",
        [run, name, step, source_file, source_line],
    ).fetchone()
    return found is not None


def merge_row(
    db: sqlite_utils.Database, row: Mapping[str, Any], local: Mapping[str, Any], where: str
) -> str:
    """One metric row of a part merged with the local rules: "new" or "duplicate"."""
    name, step, value = row["name"], row["step"], row["value"]
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS:
        raise InvalidInput(f"{where}: a metric row without a usable name")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise InvalidInput(f"{where}: metric {name!r} at step {step!r}, not a step number")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise InvalidInput(f"{where}: metric {name!r} holds {value!r}, not a number")
    if _same_line_recorded(
        db, int(local["id"]), name, step, row["source_file"], row["source_line"]
    ):
        # The same file's same line read again: a re-executed block (a Ray task run twice)
        # writes its metrics.jsonl again with other clock readings; the first record stands.
        return "duplicate"
    counts = record_metrics(
        db,
        int(local["id"]),
        step,
        [(name, math.nan if value is None else float(value))],
        source_file=row["source_file"],
        source_line=row["source_line"],
    )
    return "new" if counts.new else "duplicate"


__all__ = [
    "SYNC_TABLE",
    "MetricCounts",
    "MetricWriter",
    "export_rows",
    "item_parts",
    "merge_row",
    "metric_names",
    "metric_series",
    "metric_series_document",
    "record_metrics",
    "run_metric_steps",
    "scalar_values",
    "source_id",
    "sync_schema",
]
