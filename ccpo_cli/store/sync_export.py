"""A database's runs as `ccpo sync` rows: chunks of one table of one run, and parquet parts.

`export_chunks` reads the rows of runs per table (`sync_format.TABLES`), CHUNK_ROWS at a time
so memory stays flat whatever the run's size; with a dataset it leaves out what `sync_items`
knows to be there already. `write_parts` writes them as one part per run and table under a
dataset path unique without coordination (`part_path`). A Ray task returns the chunks
themselves (checkpoint rows included), which the driver merges (sync_merge.merge_chunks).
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.names import check_run_name, host_label
from ccpo_cli.store import metrics, sync_corrections
from ccpo_cli.store.sync_corrections import TABLES as CORRECTION_TABLES
from ccpo_cli.store.sync_format import (
    CHUNK_ROWS,
    EPISODE_FIELDS,
    PART_COLUMNS,
    SOURCE_TABLES,
    TABLES,
    item_key,
    known_items,
    part_schemas,
    pyarrow_modules,
    run_export_row,
)


@dataclass(frozen=True)
class Chunk:
    """Up to CHUNK_ROWS rows of one table of one run, as they appear in a part."""

    table: str
    run_uid: str
    run_name: str
    rows: list[dict[str, Any]]


def _evaluation_rows(
    db: sqlite_utils.Database, uid: str, evaluations: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    ids = [row["id"] for row in evaluations]
    marks = ", ".join("?" for _ in ids)
    types: dict[int, list[dict[str, Any]]] = {identifier: [] for identifier in ids}
    for row in db.query(
        f"SELECT * FROM task_type_results WHERE evaluation_id IN ({marks}) "
        "ORDER BY evaluation_id, task_type",
        ids,
    ):
        types[row["evaluation_id"]].append(
            {key: row[key] for key in ("task_type", "episodes", "successes", "success_rate")}
        )
    episodes: dict[int, list[dict[str, Any]]] = {identifier: [] for identifier in ids}
    for row in db.query(
        f"SELECT * FROM episodes WHERE evaluation_id IN ({marks}) "
        "ORDER BY evaluation_id, episode_index",
        ids,
    ):
        episodes[row["evaluation_id"]].append({key: row[key] for key in (*EPISODE_FIELDS, "extra")})
    return [
        dict(
            {key: row[key] for key in PART_COLUMNS["evaluations"]},
            run_uid=uid,
            task_types=types[row["id"]],
            episode_rows=episodes[row["id"]],
        )
        for row in evaluations
    ]


def _table_rows(
    db: sqlite_utils.Database, table: str, run: dict[str, Any]
) -> Iterator[list[dict[str, Any]]]:
    """The rows of one table of one run in part form, CHUNK_ROWS at a time."""
    uid = run["uid"]
    if table == "runs":
        yield [run_export_row(run)]
        return
    if table in CORRECTION_TABLES:
        yield from sync_corrections.export_rows(db, table, run)
        return
    if table == metrics.SYNC_TABLE:
        yield from metrics.export_rows(db, run, CHUNK_ROWS)
        return
    source = SOURCE_TABLES.get(table, table)
    last_id = 0
    while True:
        batch = list(
            db[source].rows_where(
                "run_id = ? AND id > ?", [run["id"], last_id], order_by="id", limit=CHUNK_ROWS
            )
        )
        if not batch:
            return
        last_id = batch[-1]["id"]
        if table == "evaluations":
            yield _evaluation_rows(db, uid, batch)
        else:
            columns = PART_COLUMNS[table]
            yield [dict({key: row[key] for key in columns}, run_uid=uid) for row in batch]


def _runs(db: sqlite_utils.Database, run_ids: Iterable[int] | None) -> Iterator[dict[str, Any]]:
    if run_ids is None:
        yield from db.table("runs").rows_where(order_by="id")
        return
    for identifier in run_ids:
        row = db.table("runs").get(identifier)
        if row["uid"] is None:
            raise InvalidInput(f"run {row['name']!r} has no global id; it cannot be shared")
        yield row


def export_chunks(
    db: sqlite_utils.Database,
    run_ids: Iterable[int] | None = None,
    *,
    repo_id: str | None = None,
    checkpoints: bool = False,
) -> Iterator[Chunk]:
    """The rows of these runs (every run when None), run by run and table by table (`TABLES`).

    With `repo_id`, only rows not yet known to be in that dataset: never pushed from here and
    never merged from it. `checkpoints` adds the checkpoint rows, which name files on this
    machine: for a Ray task's return to a driver that shares the files' filesystem or at least
    their paths, never for a dataset."""
    for run in _runs(db, run_ids):
        for table in TABLES + (("checkpoints",) if checkpoints else ()):
            for rows in _table_rows(db, table, run):
                if repo_id is not None:
                    known = known_items(db, repo_id, [item_key(table, row) for row in rows])
                    rows = [row for row in rows if item_key(table, row) not in known]
                if rows:
                    yield Chunk(table, run["uid"], run["name"], rows)


@dataclass(frozen=True)
class PartFile:
    """One part written for a push: where it goes in the dataset and where it is here."""

    path_in_repo: str
    local_path: Path
    table: str
    run_uid: str
    rows: int
    size_bytes: int


def part_path(host: str, run_name: str, table: str) -> str:
    """`data/HOST/RUN/TABLE-MILLISECONDS-UUID.parquet`: unique without coordination."""
    return (
        f"data/{host_label(host)}/{check_run_name(run_name, 'a run name')}/"
        f"{table}-{int(time.time() * 1000):013d}-{uuid.uuid4().hex}.parquet"
    )


def _write_part(
    pa: Any, pq: Any, schema: Any, chunks: Iterator[Chunk], local: Path, host: str
) -> PartFile:
    """One parquet part of the chunks of one table of one run, at `local`."""
    first = next(chunks)
    path_in_repo = part_path(host, first.run_name, first.table)
    rows = 0
    with pq.ParquetWriter(str(local), schema) as writer:
        for chunk in itertools.chain([first], chunks):
            writer.write_table(pa.Table.from_pylist(chunk.rows, schema=schema))
            rows += len(chunk.rows)
    return PartFile(path_in_repo, local, first.table, first.run_uid, rows, local.stat().st_size)


def write_parts(
    db: sqlite_utils.Database,
    folder: Path,
    host: str,
    *,
    repo_id: str | None,
    run_ids: Iterable[int] | None = None,
) -> list[PartFile]:
    """Write the rows `export_chunks` gives as parquet parts in `folder` (local file names are
    numbers; the dataset path is `part_path`). One part per run and table."""
    # pyarrow is imported lazily and untyped: its modules and schemas are Any here.
    pa, pq = pyarrow_modules()
    schemas = part_schemas()
    folder.mkdir(parents=True, exist_ok=True)
    parts: list[PartFile] = []
    chunks = export_chunks(db, run_ids, repo_id=repo_id)
    # export_chunks gives a run's chunks table by table: each group is one part.
    for (_, table), group in itertools.groupby(chunks, key=lambda c: (c.run_uid, c.table)):
        local = folder / f"part-{len(parts):06d}.parquet"
        parts.append(_write_part(pa, pq, schemas[table], group, local, host))
    return parts
