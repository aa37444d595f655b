"""Rows of runs.db as parquet parts, and parts merged back in with the store's own rules.

This is the database side of `ccpo sync` (the Hub side is `ccpo_cli/hub_sync.py`) and of
`ccpo matrix --ray-address` (a Ray task returns the rows of its seed block, and only the driver
writes its runs.db). Rows travel per run and per table: run snapshots, evaluations (with their
per-type results and every episode), recorded conflicts, run facts and publications. Checkpoint
rows stay behind: they name files on the machine that wrote them.

A run is matched by its global id (`runs.uid`, created with the run), never by its name: a
copied database holds the same runs, and two machines' runs with one name are two runs. A run
whose name is already taken here by another id is stored as `NAME@HOST` (HOST: the machine
that created it). Everything else goes through the store's own writers, so the rules are those
of a local write: identical evaluation content is one row, a different result for the same run,
step, split and eval seed is a recorded conflict (both values kept), a fact is kept once per
value. A run snapshot fills in what is missing here; a newer snapshot (by `updated_at`) updates
status, step and settings; `last_step` only moves forward; an identity field (arm, seed, ...)
recorded with another value elsewhere is kept in `sync_run_conflicts` and the local value stands.

What a database knows to be in a dataset is in `sync_items` (item keys: `item_key`), so a push
exports only the rest and merging a part twice changes nothing. Every merged item also records
the dataset commit it was merged from, which `dataset_sources` reads back for a run's card.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.extras import require_extra
from ccpo_cli.names import check_run_name, host_label, qualified_run_name
from ccpo_cli.store import sync_corrections
from ccpo_cli.store.db import inserted_id, utc_now, write_transaction
from ccpo_cli.store.evaluation_content import content_hash, evaluation_content
from ccpo_cli.store.facts import record_facts
from ccpo_cli.store.records import IDENTITY_FIELDS, record_evaluation_outcome
from ccpo_cli.store.sync_corrections import TABLES as CORRECTION_TABLES

PART_FORMAT = "1"
# Merge order: a run before the rows that belong to it, evaluations before the conflicts
# recorded against them.
TABLES = ("runs", "evaluations", "conflicts", "facts", "publications", *CORRECTION_TABLES)
# Rows per parquet row group and per merged batch: memory stays flat whatever the run's size.
CHUNK_ROWS = 256

RUN_COLUMNS = (
    "uid",
    "host",
    "name",
    "kind",
    "arm",
    "arm_fingerprint",
    "arm_flags",
    "arm_overrides",
    "base_model",
    "benchmark",
    "seed",
    "backend",
    "total_steps",
    "last_step",
    "status",
    "hardware",
    "data_order_seed",
    "git_commit",
    "git_dirty",
    "package_versions",
    "config",
    "step1_rollout_hash",
    "created_at",
    "updated_at",
)
_RUN_INTEGERS = {"seed", "total_steps", "last_step", "data_order_seed", "git_dirty"}
# Fixed when the run is made (the step-1 hash once step 1 is done); another value elsewhere is
# a conflict, not an update.
RUN_IDENTITY = (*IDENTITY_FIELDS, "host", "step1_rollout_hash")
# Progress and settings: a newer snapshot replaces them.
RUN_PROGRESS = tuple(
    column
    for column in RUN_COLUMNS
    if column not in {*RUN_IDENTITY, "uid", "name", "last_step", "created_at", "updated_at"}
)
_EPISODE_FIELDS = (
    "episode_index",
    "game_id",
    "task_type",
    "won",
    "turns",
    "invalid_turns",
    "reward",
)


def _pyarrow():
    """pyarrow and its parquet module, or one line saying how to install them."""
    return require_extra("sync", "pyarrow", what="parquet parts"), require_extra(
        "sync", "pyarrow.parquet", what="parquet parts"
    )


def _schemas() -> dict[str, Any]:
    pa, _ = _pyarrow()

    text, integer, real = pa.string(), pa.int64(), pa.float64()
    task_type = pa.struct(
        [("task_type", text), ("episodes", integer), ("successes", integer), ("success_rate", real)]
    )
    episode = pa.struct(
        [
            ("episode_index", integer),
            ("game_id", text),
            ("task_type", text),
            ("won", integer),
            ("turns", integer),
            ("invalid_turns", integer),
            ("reward", real),
            ("extra", text),
        ]
    )
    columns = {
        "runs": [(name, integer if name in _RUN_INTEGERS else text) for name in RUN_COLUMNS],
        "evaluations": [
            ("run_uid", text),
            ("step", integer),
            ("split", text),
            ("episodes", integer),
            ("successes", integer),
            ("success_rate", real),
            ("mean_turns", real),
            ("temperature", real),
            ("eval_seed", integer),
            ("train_success_rate", real),
            ("source_file", text),
            ("source_line", integer),
            ("content_hash", text),
            ("recorded_at", text),
            ("task_types", pa.list_(task_type)),
            ("episode_rows", pa.list_(episode)),
        ],
        "conflicts": [
            ("run_uid", text),
            ("step", integer),
            ("split", text),
            ("eval_seed", integer),
            ("content_hash", text),
            ("content", text),
            ("source_file", text),
            ("source_line", integer),
            ("recorded_at", text),
        ],
        "facts": [
            ("run_uid", text),
            ("key", text),
            ("value", text),
            ("source", text),
            ("recorded_at", text),
        ],
        "publications": [
            ("run_uid", text),
            ("repo_id", text),
            ("revision", text),
            ("commit_id", text),
            ("card_hash", text),
            ("status", text),
            ("checkpoint_step", integer),
            ("url", text),
            ("published_at", text),
        ],
        **sync_corrections.schemas(pa),
    }
    return {
        table: pa.schema(fields, metadata={"ccpo_table": table, "ccpo_part_format": PART_FORMAT})
        for table, fields in columns.items()
    }


# --- item keys: what makes two rows on two machines the same item ---------------------------


def _digest(*parts: Any) -> str:
    return hashlib.sha256(
        json.dumps(parts, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()


def run_snapshot_digest(row: dict[str, Any]) -> str:
    """A run snapshot's digest: every synced column but the name, which is local (NAME@HOST)."""
    return _digest({column: row.get(column) for column in RUN_COLUMNS if column != "name"})


def item_key(table: str, row: dict[str, Any]) -> str:
    """The key of one exported row (the row as in its part), the same on every machine."""
    if table == "runs":
        return f"run:{row['uid']}:{run_snapshot_digest(row)}"
    uid = row["run_uid"]
    if table in ("evaluations", "conflicts"):
        # One result, kept or in conflict: which of two differing results a database keeps
        # depends on which it saw first, and either way the dataset holds both.
        return f"result:{uid}:{row['content_hash']}"
    if table == "facts":
        return f"fact:{uid}:{_digest(row['key'], row['value'])}"
    if table in CORRECTION_TABLES:
        return f"{table}:{uid}:{_digest(*sync_corrections.item_parts(table, row))}"
    return f"publication:{uid}:{_digest(*(row.get(name) for name in ('repo_id', 'revision', 'commit_id', 'card_hash', 'status', 'checkpoint_step', 'url', 'published_at')))}"


# --- export -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Chunk:
    """Up to CHUNK_ROWS rows of one table of one run, as they appear in a part."""

    table: str
    run_uid: str
    run_name: str
    rows: list[dict[str, Any]]


def _known(db: sqlite_utils.Database, repo_id: str, keys: Sequence[str]) -> set[str]:
    if not keys:
        return set()
    marks = ", ".join("?" for _ in keys)
    return {
        row["item_key"]
        for row in db.query(
            f"SELECT item_key FROM sync_items WHERE repo_id = ? AND item_key IN ({marks})",
            [repo_id, *keys],
        )
    }


def _run_export_row(run: dict[str, Any]) -> dict[str, Any]:
    return {column: run[column] for column in RUN_COLUMNS}


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
        episodes[row["evaluation_id"]].append(
            {key: row[key] for key in (*_EPISODE_FIELDS, "extra")}
        )
    columns = (
        "step",
        "split",
        "episodes",
        "successes",
        "success_rate",
        "mean_turns",
        "temperature",
        "eval_seed",
        "train_success_rate",
        "source_file",
        "source_line",
        "content_hash",
        "recorded_at",
    )
    return [
        dict(
            {key: row[key] for key in columns},
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
        yield [_run_export_row(run)]
        return
    if table in CORRECTION_TABLES:
        yield from sync_corrections.export_rows(db, table, run)
        return
    source = {
        "evaluations": "evaluations",
        "conflicts": "conflicts",
        "facts": "run_facts",
        "publications": "publications",
        "checkpoints": "checkpoints",
    }[table]
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
        elif table == "conflicts":
            yield [
                dict(
                    {
                        key: row[key]
                        for key in (
                            "step",
                            "split",
                            "eval_seed",
                            "content_hash",
                            "content",
                            "source_file",
                            "source_line",
                            "recorded_at",
                        )
                    },
                    run_uid=uid,
                )
                for row in batch
            ]
        elif table == "facts":
            yield [
                dict(
                    {key: row[key] for key in ("key", "value", "source", "recorded_at")},
                    run_uid=uid,
                )
                for row in batch
            ]
        elif table == "checkpoints":
            yield [
                dict({key: row[key] for key in _CHECKPOINT_COLUMNS}, run_uid=uid) for row in batch
            ]
        else:
            yield [
                dict(
                    {
                        key: row[key]
                        for key in (
                            "repo_id",
                            "revision",
                            "commit_id",
                            "card_hash",
                            "status",
                            "checkpoint_step",
                            "url",
                            "published_at",
                        )
                    },
                    run_uid=uid,
                )
                for row in batch
            ]


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
                    known = _known(db, repo_id, [item_key(table, row) for row in rows])
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
    pa, pq = _pyarrow()
    schemas = _schemas()
    folder.mkdir(parents=True, exist_ok=True)
    parts: list[PartFile] = []
    # pyarrow is imported lazily (`_pyarrow`) and untyped, so the open writer is Any.
    writer: Any = None
    current: dict[str, Any] | None = None
    rows = 0

    def close() -> None:
        nonlocal writer
        if writer is not None:
            assert current is not None  # a writer is open only for the current part
            writer.close()
            local = Path(current["local"])
            parts.append(
                PartFile(
                    current["path"],
                    local,
                    current["table"],
                    current["uid"],
                    rows,
                    local.stat().st_size,
                )
            )
            writer = None

    for chunk in export_chunks(db, run_ids, repo_id=repo_id):
        if current is None or (current["uid"], current["table"]) != (chunk.run_uid, chunk.table):
            close()
            current = {
                "uid": chunk.run_uid,
                "table": chunk.table,
                "path": part_path(host, chunk.run_name, chunk.table),
                "local": str(folder / f"part-{len(parts):06d}.parquet"),
            }
            writer, rows = pq.ParquetWriter(current["local"], schemas[chunk.table]), 0
        writer.write_table(pa.Table.from_pylist(chunk.rows, schema=schemas[chunk.table]))
        rows += len(chunk.rows)
    close()
    return parts


# --- reading parts ----------------------------------------------------------------------


def part_table(path_in_repo: str) -> str | None:
    """The table a part holds, from its file name (None: not a ccpo part)."""
    name = path_in_repo.rsplit("/", 1)[-1]
    table = name.split("-", 1)[0]
    return table if name.endswith(".parquet") and table in TABLES else None


# Bounds of one part as decoded, whatever its compressed size (a 21 KB part once inflated to
# 2.6 GB): its rows, its pages uncompressed and the values of every column (from the part's own
# metadata, before anything is decoded), what the whole part decodes to (every column counted
# before any row is made: a dictionary-encoded text is counted once per row that refers to it),
# the length of any one text and of any one list.
MAX_PART_ROWS = 1_000_000
MAX_UNCOMPRESSED_BYTES = 256 << 20
MAX_PART_VALUES = 8_000_000  # leaf values of all columns together: a list's items each count
MAX_DECODED_BYTES = 256 << 20
FIXED_VALUE_BYTES = 8  # what one number, or one text's offset, decodes to
MAX_TEXT_CHARS = 1 << 20
MAX_LIST_ITEMS = 100_000
READ_ROWS = 32


def _check_sizes(parquet: Any, path_in_repo: str) -> None:
    metadata = parquet.metadata
    if metadata.num_rows > MAX_PART_ROWS:
        raise InvalidInput(
            f"{path_in_repo}: {metadata.num_rows} rows, over the {MAX_PART_ROWS} a part may hold"
        )
    pages = sum(
        metadata.row_group(group).column(column).total_uncompressed_size
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
    )
    if pages > MAX_UNCOMPRESSED_BYTES:
        raise InvalidInput(
            f"{path_in_repo}: {pages >> 20} MiB uncompressed, over the {MAX_UNCOMPRESSED_BYTES >> 20} MiB "
            "a part may hold; refused"
        )
    # Run-length and dictionary encodings store a repeated value once: the count of values is
    # what decoding makes, and the metadata states it per column chunk.
    values = sum(
        metadata.row_group(group).column(column).num_values
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
    )
    if values > MAX_PART_VALUES:
        raise InvalidInput(
            f"{path_in_repo}: {values} values, over the {MAX_PART_VALUES} a part may hold; refused"
        )


def _text_leaves(schema: Any) -> list[str]:
    """Column paths of the part's text leaves (nested ones included), read as dictionaries."""
    return [
        schema.column(index).path
        for index in range(len(schema))
        if schema.column(index).physical_type == "BYTE_ARRAY"
    ]


def _decoded_text_bytes(array: Any, path_in_repo: str) -> int:
    """What the texts of `array` decode to, counted on its dictionary form (nothing expanded);
    InvalidInput when one text is over MAX_TEXT_CHARS bytes."""
    pa, _ = _pyarrow()
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        return sum(_decoded_text_bytes(chunk, path_in_repo) for chunk in array.chunks)
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.fill_null(pc.binary_length(array.dictionary), 0)
        used = pc.fill_null(pc.take(lengths, array.indices), 0)
        longest, total = pc.max(used).as_py() or 0, pc.sum(used).as_py() or 0
    elif pa.types.is_string(kind) or pa.types.is_binary(kind) or pa.types.is_large_string(kind):
        used = pc.fill_null(pc.binary_length(array), 0)
        longest, total = pc.max(used).as_py() or 0, pc.sum(used).as_py() or 0
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _decoded_text_bytes(array.values, path_in_repo)
    elif pa.types.is_struct(kind):
        return sum(
            _decoded_text_bytes(array.field(index), path_in_repo)
            for index in range(kind.num_fields)
        )
    else:
        return 0
    if longest > MAX_TEXT_CHARS:
        raise InvalidInput(
            f"{path_in_repo}: a text of {longest} bytes, over the {MAX_TEXT_CHARS} a value may hold; "
            "refused"
        )
    return int(total)


def _check_decoded(local_path: Path, names: list[str], path_in_repo: str) -> None:
    """The whole part's decoded size within MAX_DECODED_BYTES, every column counted, before a
    single row is made: numbers from the metadata's value counts, texts on their dictionary
    form, one column of one row group at a time."""
    pa, pq = _pyarrow()
    probe = pq.ParquetFile(local_path)
    parquet = pq.ParquetFile(local_path, read_dictionary=_text_leaves(probe.schema))
    metadata = parquet.metadata
    decoded = FIXED_VALUE_BYTES * sum(
        metadata.row_group(group).column(column).num_values
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
    )
    for group in range(metadata.num_row_groups):
        for name in names:
            decoded += _decoded_text_bytes(
                parquet.read_row_group(group, columns=[name]).column(0), path_in_repo
            )
            if decoded > MAX_DECODED_BYTES:
                raise InvalidInput(
                    f"{path_in_repo}: decodes to more than {MAX_DECODED_BYTES >> 20} MiB; refused"
                )


def _check_values(value: Any, path_in_repo: str, depth: int = 0) -> None:
    """Every text and list of a decoded row within its bound (rows are at most three levels deep)."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT_CHARS:
            raise InvalidInput(
                f"{path_in_repo}: a text of {len(value)} characters, over the {MAX_TEXT_CHARS} a "
                "value may hold; refused"
            )
    elif isinstance(value, dict) and depth < 4:
        for item in value.values():
            _check_values(item, path_in_repo, depth + 1)
    elif isinstance(value, list) and depth < 4:
        if len(value) > MAX_LIST_ITEMS:
            raise InvalidInput(
                f"{path_in_repo}: a list of {len(value)} items, over the {MAX_LIST_ITEMS} a value "
                "may hold; refused"
            )
        for item in value:
            _check_values(item, path_in_repo, depth + 1)


def read_part(local_path: Path, path_in_repo: str) -> tuple[str, Iterator[list[dict[str, Any]]]]:
    """The table and the rows (CHUNK_ROWS at a time) of a downloaded part; InvalidInput naming the
    part when it is not a ccpo part of a format this ccpo reads."""
    pa, pq = _pyarrow()
    try:
        parquet = pq.ParquetFile(local_path)
    except (pa.ArrowException, OSError) as error:
        raise InvalidInput(f"{path_in_repo}: not a readable parquet part ({error})") from None
    metadata = {
        key.decode(): value.decode() for key, value in (parquet.schema_arrow.metadata or {}).items()
    }
    table = metadata.get("ccpo_table")
    if table not in TABLES or table != part_table(path_in_repo):
        raise InvalidInput(f"{path_in_repo}: not a ccpo part (its table is {table!r})")
    if metadata.get("ccpo_part_format") != PART_FORMAT:
        raise InvalidInput(
            f"{path_in_repo}: part format {metadata.get('ccpo_part_format')!r}; this ccpo reads "
            f"format {PART_FORMAT} (upgrade ccpo)"
        )
    expected = _schemas()[table]
    missing = [name for name in expected.names if name not in parquet.schema_arrow.names]
    if missing:
        raise InvalidInput(f"{path_in_repo}: part lacks column(s) {', '.join(missing)}")

    _check_sizes(parquet, path_in_repo)
    try:
        _check_decoded(local_path, expected.names, path_in_repo)
    except (pa.ArrowException, OSError) as error:
        raise InvalidInput(f"{path_in_repo}: damaged parquet part ({error})") from None

    def batches() -> Iterator[list[dict[str, Any]]]:
        try:
            for batch in parquet.iter_batches(batch_size=READ_ROWS, columns=expected.names):
                rows = batch.to_pylist()
                for row in rows:
                    _check_values(row, path_in_repo)
                yield rows
        except (pa.ArrowException, OSError) as error:
            raise InvalidInput(f"{path_in_repo}: damaged parquet part ({error})") from None

    return table, batches()


# --- merge --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """Where merged rows come from: a dataset commit and the part within it."""

    repo_id: str
    commit_id: str
    part: str


@dataclass
class MergeCounts:
    """Per table, how many merged rows were new, the same as a row here, conflicts, ..."""

    by_table: dict[str, Counter] = field(default_factory=dict)

    def add(self, table: str, outcome: str) -> None:
        self.by_table.setdefault(table, Counter())[outcome] += 1

    def update(self, other: MergeCounts) -> None:
        for table, counts in other.by_table.items():
            self.by_table.setdefault(table, Counter()).update(counts)

    def total(self, outcome: str) -> int:
        return sum(counts[outcome] for counts in self.by_table.values())

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {
            table: dict(sorted(counts.items())) for table, counts in sorted(self.by_table.items())
        }


def _local_run(db: sqlite_utils.Database, uid: Any, where: str) -> dict[str, Any]:
    row = next(db.table("runs").rows_where("uid = ?", [uid], limit=1), None)
    if row is None:
        raise InvalidInput(
            f"{where}: rows of run {uid!r}, which neither this database nor the dataset's run "
            "parts hold"
        )
    return row


def _free_name(db: sqlite_utils.Database, name: str, host: str | None, uid: str) -> str:
    def taken(candidate: str) -> bool:
        return (
            next(db.table("runs").rows_where("name = ?", [candidate], limit=1, select="id"), None)
            is not None
        )

    candidates = [
        name,
        qualified_run_name(name, host or "unknown-host"),
        qualified_run_name(name, f"{host_label(host)[:55]}-{uid[:8]}"),
    ]
    for candidate in candidates:
        if not taken(candidate):
            return candidate
    raise InvalidInput(f"run {name!r} of {host}: every name ccpo would give it here is taken")


# How far in the future a synced time may lie (another machine's clock running ahead): beyond
# it the row is refused, so a forged `9999-...` never wins "newer" for good.
CLOCK_SKEW_S = 3600.0


def _time(value: Any, what: str, where: str) -> datetime.datetime:
    """A synced timestamp as a time (compared as times, never as strings)."""
    try:
        when = (
            datetime.datetime.fromisoformat(value)
            if isinstance(value, str) and len(value) <= 40
            else None
        )
    except ValueError:
        when = None
    if when is None:
        raise InvalidInput(f"{where}: {what} {str(value)[:40]!r} is not a time")
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    if when > datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=CLOCK_SKEW_S):
        raise InvalidInput(
            f"{where}: {what} {value} lies in the future (more than {CLOCK_SKEW_S:.0f} s ahead of "
            "this machine's clock)"
        )
    return when


def folder_host(path_in_repo: str | None) -> str | None:
    """The host folder a dataset part sits in (`data/HOST/RUN/...`); None outside a dataset."""
    parts = (path_in_repo or "").split("/")
    return parts[1] if len(parts) >= 4 and parts[0] == "data" else None


# No run ccpo records has more steps than this: a step past it is not a step (a forged 2^62).
MAX_STEP = 10_000_000


def _step_within(value: Any, recorded: int | None, what: str, where: str) -> None:
    """A step a part names must be a step (0 to MAX_STEP) and, when `recorded` is given, one the
    run has reached as recorded here."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_STEP:
        raise InvalidInput(f"{where}: {what} {value!r} is not a step")
    if recorded is not None and value > recorded:
        raise InvalidInput(
            f"{where}: {what} {value} is past the run's recorded steps ({recorded}); refused"
        )


def _merge_run(
    db: sqlite_utils.Database, row: dict[str, Any], where: str, host_folder: str | None = None
) -> tuple[dict[str, Any], str]:
    """A run snapshot. Only a snapshot from the run's own host folder changes a run known here;
    one in another machine's folder changes nothing and is recorded where it differs (in
    `sync_run_conflicts`): a foreign snapshot of this machine's run is a conflict, never a
    replacement. A run not known here is taken from whichever folder holds it."""
    uid = row.get("uid")
    if not isinstance(uid, str) or not 8 <= len(uid) <= 64 or not uid.isalnum():
        raise InvalidInput(f"{where}: a run without a usable global id ({uid!r})")
    name = check_run_name(row.get("name"), f"{where}: run name")
    if not row.get("created_at") or not row.get("updated_at"):
        raise InvalidInput(f"{where}: run {name!r} lacks its created/updated times")
    created, updated = (
        _time(row["created_at"], "created_at", where),
        _time(row["updated_at"], "updated_at", where),
    )
    total = row.get("total_steps")
    if total is not None and (not isinstance(total, int) or isinstance(total, bool) or total < 0):
        raise InvalidInput(f"{where}: run {name!r}: total_steps {total!r} is not a number of steps")
    local = next(db.table("runs").rows_where("uid = ?", [uid], limit=1), None)
    _step_within(row.get("last_step"), None, "last_step", where)
    own = host_folder is None or host_label(row.get("host") or "") == host_folder
    if local is None:
        new = {column: row.get(column) for column in RUN_COLUMNS}
        new["name"] = _free_name(db, name, row.get("host"), uid)
        db.table("runs").insert(new)
        return next(db.table("runs").rows_where("uid = ?", [uid], limit=1)), "new"
    if (
        not own
    ):  # another machine's folder: it changes nothing of the run here, only says where it differs
        differing = [
            column
            for column in (*RUN_IDENTITY, *RUN_PROGRESS, "last_step")
            if row.get(column) is not None and row.get(column) != local[column]
        ]
        for column in differing:
            _field_conflict(db, local, column, row.get(column), where)
        return local, "conflict" if differing else "same"
    changes: dict[str, Any] = {}
    for column in RUN_IDENTITY:
        remote = row.get(column)
        if remote is None or remote == local[column]:
            continue
        if local[column] is None:
            changes[column] = remote
        else:
            _field_conflict(db, local, column, remote, where)
    newer = updated > _local_time(local["updated_at"])
    for column in RUN_PROGRESS:
        remote = row.get(column)
        if remote is not None and remote != local[column] and (local[column] is None or newer):
            changes[column] = remote
    steps = [step for step in (local["last_step"], row.get("last_step")) if step is not None]
    if steps and max(steps) != local["last_step"]:
        changes["last_step"] = max(steps)
    if created < _local_time(local["created_at"], default=created):
        changes["created_at"] = row["created_at"]
    if newer:
        changes["updated_at"] = row["updated_at"]
    if changes:
        db.table("runs").update(local["id"], changes)
        return db.table("runs").get(local["id"]), "updated"
    return local, "same"


def _local_time(value: str | None, default: datetime.datetime | None = None) -> datetime.datetime:
    if not value:
        return default or datetime.datetime.min.replace(tzinfo=datetime.UTC)
    when = datetime.datetime.fromisoformat(value)
    return when if when.tzinfo is not None else when.replace(tzinfo=datetime.UTC)


def _field_conflict(
    db: sqlite_utils.Database, local: dict[str, Any], column: str, remote: Any, where: str
) -> None:
    db.table("sync_run_conflicts").insert(
        {
            "run_id": local["id"],
            "field": column,
            "local_value": str(local[column])[:2000],
            "remote_value": str(remote)[:2000],
            "origin": where,
            "recorded_at": utc_now(),
        },
        ignore=True,
    )


def _episode_argument(episode: dict[str, Any]) -> dict[str, Any]:
    argument = {key: episode[key] for key in _EPISODE_FIELDS}
    if episode.get("extra"):
        extra = json.loads(episode["extra"])
        argument.update({key: value for key, value in extra.items() if key not in argument})
    return argument


def _evaluation_arguments(row: dict[str, Any]) -> dict[str, Any]:
    types = {
        entry["task_type"]: {
            "episodes": entry["episodes"],
            "successes": entry["successes"],
            "success": entry["success_rate"],
        }
        for entry in row.get("task_types") or []
    }
    return {
        "split": row["split"],
        "episodes": row["episodes"],
        "successes": row["successes"],
        "success_rate": row["success_rate"],
        "mean_turns": row["mean_turns"],
        "temperature": row["temperature"],
        "eval_seed": row["eval_seed"],
        "task_types": types,
        "episode_rows": [_episode_argument(episode) for episode in row.get("episode_rows") or []],
    }


def _conflict_arguments(row: dict[str, Any], where: str) -> dict[str, Any]:
    try:
        content = json.loads(row["content"])
    except (TypeError, ValueError):
        raise InvalidInput(f"{where}: a conflict whose content is not JSON") from None
    if not isinstance(content, dict) or content_hash(content) != row["content_hash"]:
        raise InvalidInput(
            f"{where}: a conflict whose content does not match its hash {row['content_hash']}"
        )
    return {
        "split": content.get("split"),
        "episodes": content.get("episodes"),
        "successes": content.get("successes"),
        "success_rate": content.get("success_rate"),
        "mean_turns": content.get("mean_turns"),
        "temperature": content.get("temperature"),
        "eval_seed": content.get("eval_seed"),
        "task_types": content.get("task_types") or {},
        "episode_rows": [
            _episode_argument(episode) for episode in content.get("episodes_rows") or []
        ],
    }


def _merge_evaluation(
    db: sqlite_utils.Database, table: str, row: dict[str, Any], run_id: int, where: str
) -> str:
    run = db.table("runs").get(run_id)
    # Past the steps recorded here (total and last step; only the run's own machine moves them
    # forward) an evaluation is refused: an injected step 7 of a 4-step run once became its best.
    reached = max(
        step for step in (run["total_steps"], run["last_step"], 0) if isinstance(step, int)
    )
    _step_within(row["step"], reached, "an evaluation at step", where)
    _time(row["recorded_at"], "recorded_at", where)
    if table == "evaluations":
        arguments = _evaluation_arguments(row)
        try:
            checked = evaluation_content(row["step"], **arguments).content_hash
        except InvalidInput as error:
            raise InvalidInput(f"{where}: step {row['step']}: {error}") from None
        if checked != row["content_hash"]:
            raise InvalidInput(
                f"{where}: the evaluation of step {row['step']} does not match its content hash "
                f"({row['content_hash']}); the part was altered or written by another ccpo"
            )
        arguments["train_success_rate"] = row["train_success_rate"]
    else:
        arguments = _conflict_arguments(row, where)
    updated_at = db.table("runs").get(run_id)["updated_at"]
    outcome = record_evaluation_outcome(
        db,
        run_id,
        row["step"],
        source_file=row["source_file"],
        source_line=row["source_line"],
        **arguments,
    )
    if outcome.outcome == "new":
        # A merged row is not a change of the run on this machine: its snapshot time stays the
        # one its own machine recorded, so that machine's later snapshots still count as newer.
        db.table("runs").update(run_id, {"updated_at": updated_at})
    return outcome.outcome


def _merge_fact(db: sqlite_utils.Database, row: dict[str, Any], run_id: int, where: str) -> str:
    try:
        value = json.loads(row["value"])
    except (TypeError, ValueError):
        raise InvalidInput(f"{where}: fact {row['key']!r} holds no JSON value") from None
    if (
        next(
            db.table("run_facts").rows_where(
                "run_id = ? AND key = ? AND value = ?", [run_id, row["key"], row["value"]], limit=1
            ),
            None,
        )
        is not None
    ):
        return "duplicate"
    try:
        conflicts = record_facts(db, run_id, {row["key"]: value}, row["source"])
    except InvalidInput as error:
        raise InvalidInput(f"{where}: {error} (written by a newer ccpo?)") from None
    return "conflict" if conflicts else "new"


_CHECKPOINT_COLUMNS = ("step", "path", "sha256", "size_bytes", "created_at")


def _merge_checkpoint(db: sqlite_utils.Database, row: dict[str, Any], run_id: int) -> str:
    """A checkpoint row once per (run, step, path). A retried task writes the file again, and its
    bytes differ (the file records the wall time); the row of the first stands, counted `rewritten`."""
    same = next(
        db.table("checkpoints").rows_where(
            "run_id = ? AND step = ? AND path = ?", [run_id, row["step"], row["path"]], limit=1
        ),
        None,
    )
    if same is None:
        db.table("checkpoints").insert(
            dict({key: row[key] for key in _CHECKPOINT_COLUMNS}, run_id=run_id)
        )
        return "new"
    return "duplicate" if same["sha256"] in (None, row["sha256"]) else "rewritten"


_PUBLICATION_COLUMNS = (
    "repo_id",
    "revision",
    "commit_id",
    "card_hash",
    "status",
    "checkpoint_step",
    "url",
    "published_at",
)


def _merge_publication(db: sqlite_utils.Database, row: dict[str, Any], run_id: int) -> str:
    where = " AND ".join(f"{column} IS ?" for column in _PUBLICATION_COLUMNS)
    values = [row[column] for column in _PUBLICATION_COLUMNS]
    if (
        next(
            db.table("publications").rows_where(
                f"run_id = ? AND {where}", [run_id, *values], limit=1
            ),
            None,
        )
        is not None
    ):
        return "duplicate"
    db.table("publications").insert(dict(zip(_PUBLICATION_COLUMNS, values), run_id=run_id))
    return "new"


def merge_rows(
    db: sqlite_utils.Database,
    table: str,
    rows: Iterable[dict[str, Any]],
    *,
    where: str,
    origin: Origin | None = None,
    counts: MergeCounts | None = None,
) -> MergeCounts:
    """Merge rows of one table (in part form) into the database, in one transaction.

    With an `origin`, every row is also recorded as being in that dataset (`sync_items`)."""
    counts = counts if counts is not None else MergeCounts()
    with write_transaction(db):
        for row in rows:
            try:
                _merge_one(db, table, row, where, origin, counts)
            except (TypeError, ValueError, KeyError, AttributeError) as error:
                # A row of the right columns holding something else (hand-made or damaged): refused,
                # and the transaction leaves nothing of the part behind.
                raise InvalidInput(
                    f"{where}: a row of {table} that ccpo cannot read ({type(error).__name__}: "
                    f"{' '.join(str(error).split())[:200]})"
                ) from None
    return counts


def _merge_one(
    db: sqlite_utils.Database,
    table: str,
    row: dict[str, Any],
    where: str,
    origin: Origin | None,
    counts: MergeCounts,
) -> None:
    derived_key = None
    if table == "runs":
        before = next(db.table("runs").rows_where("uid = ?", [row.get("uid")], limit=1), None)
        local, outcome = _merge_run(db, row, where, folder_host(origin.part if origin else None))
        # A run that held nothing unpushed is, once merged, what the dataset itself gives:
        # its merged snapshot need not be pushed back. One with local changes still is.
        if (
            origin is not None
            and outcome == "updated"
            and before is not None  # always so: only a run already here is updated
            and _known(db, origin.repo_id, [item_key("runs", _run_export_row(before))])
        ):
            derived_key = item_key("runs", _run_export_row(local))
    else:
        local = _local_run(db, row.get("run_uid"), where)
        if table in ("evaluations", "conflicts"):
            outcome = _merge_evaluation(db, table, row, local["id"], where)
        elif table == "facts":
            outcome = _merge_fact(db, row, local["id"], where)
        elif table == "checkpoints" and origin is None:
            outcome = _merge_checkpoint(db, row, local["id"])
        elif table == "publications":
            outcome = _merge_publication(db, row, local["id"])
        elif table in CORRECTION_TABLES:
            outcome = sync_corrections.merge_row(db, table, row, local, where)
        else:
            raise InvalidInput(f"{where}: rows of table {table!r}, which ccpo does not merge here")
    counts.add(table, outcome)
    if origin is not None:
        db.table("sync_items").insert_all(
            (
                {
                    "repo_id": origin.repo_id,
                    "item_key": key,
                    "run_id": local["id"],
                    "direction": "pull",
                    "commit_id": origin.commit_id,
                    "part": origin.part,
                    "recorded_at": utc_now(),
                }
                for key in (item_key(table, row), derived_key)
                if key is not None
            ),
            ignore=True,
        )


def merge_chunks(db: sqlite_utils.Database, chunks: Iterable[Chunk], *, where: str) -> MergeCounts:
    """Merge exported chunks (a Ray task's records, checkpoints included) in `TABLES` order, all
    in one transaction."""
    order = (*TABLES, "checkpoints")
    ordered = sorted(chunks, key=lambda chunk: order.index(chunk.table))
    counts = MergeCounts()
    with write_transaction(db):
        for chunk in ordered:
            merge_rows(db, chunk.table, chunk.rows, where=where, counts=counts)
    return counts


# --- sync bookkeeping ---------------------------------------------------------------------


def part_already_merged(
    db: sqlite_utils.Database, repo_id: str, path_in_repo: str, blob_id: str | None
) -> bool:
    row = next(
        db.table("sync_parts").rows_where(
            "repo_id = ? AND path = ?", [repo_id, path_in_repo], limit=1
        ),
        None,
    )
    return row is not None and (blob_id is None or row["blob_id"] in (None, blob_id))


def merge_part(
    db: sqlite_utils.Database,
    local_path: Path,
    path_in_repo: str,
    origin: Origin,
    *,
    blob_id: str | None = None,
    size_bytes: int | None = None,
) -> MergeCounts:
    """Merge one downloaded part and note it as merged, all in one transaction (a pull stopped
    half-way keeps the parts it finished, and the next pull goes on from there)."""
    table, batches = read_part(local_path, path_in_repo)
    counts = MergeCounts()
    with write_transaction(db):
        for rows in batches:
            merge_rows(db, table, rows, where=path_in_repo, origin=origin, counts=counts)
        db.table("sync_parts").insert(
            {
                "repo_id": origin.repo_id,
                "path": path_in_repo,
                "blob_id": blob_id,
                "size_bytes": size_bytes,
                "direction": "pull",
                "commit_id": origin.commit_id,
                "recorded_at": utc_now(),
            },
            replace=True,
        )
    return counts


def record_refused_part(
    db: sqlite_utils.Database, origin: Origin, *, blob_id: str | None, size_bytes: int | None
) -> None:
    """Note a part a pull refused (direction `refused`): later pulls skip it, nothing of it is merged."""
    with write_transaction(db):
        db.table("sync_parts").insert(
            {
                "repo_id": origin.repo_id,
                "path": origin.part,
                "blob_id": blob_id,
                "size_bytes": size_bytes,
                "direction": "refused",
                "commit_id": origin.commit_id,
                "recorded_at": utc_now(),
            },
            replace=True,
        )


def mark_pushed(
    db: sqlite_utils.Database, repo_id: str, commit_id: str, parts: Sequence[PartFile]
) -> int:
    """After the dataset commit `commit_id` holds `parts`: their rows are known to be there
    (the next push leaves them out). Returns the number of rows marked."""
    marked = 0
    with write_transaction(db):
        for part in parts:
            _, batches = read_part(part.local_path, part.path_in_repo)
            for rows in batches:
                uids = {row["uid"] if part.table == "runs" else row["run_uid"] for row in rows}
                local = {
                    row["uid"]: row["id"]
                    for row in db.query(
                        f"SELECT id, uid FROM runs WHERE uid IN ({', '.join('?' for _ in uids)})",
                        list(uids),
                    )
                }
                db.table("sync_items").insert_all(
                    (
                        {
                            "repo_id": repo_id,
                            "item_key": item_key(part.table, row),
                            "run_id": local.get(
                                row["uid"] if part.table == "runs" else row["run_uid"]
                            ),
                            "direction": "push",
                            "commit_id": commit_id,
                            "part": part.path_in_repo,
                            "recorded_at": utc_now(),
                        }
                        for row in rows
                    ),
                    ignore=True,
                )
                marked += len(rows)
            db.table("sync_parts").insert(
                {
                    "repo_id": repo_id,
                    "path": part.path_in_repo,
                    "blob_id": None,
                    "size_bytes": part.size_bytes,
                    "direction": "push",
                    "commit_id": commit_id,
                    "recorded_at": utc_now(),
                },
                replace=True,
            )
    return marked


def log_sync(
    db: sqlite_utils.Database,
    repo_id: str,
    direction: str,
    commit_id: str | None,
    *,
    revision: str | None,
    parts: int,
    counts: MergeCounts | None = None,
    rows: int = 0,
) -> int:
    """Record one push or pull with the dataset commit it made or was built from."""
    with write_transaction(db):
        row = {
            "repo_id": repo_id,
            "direction": direction,
            "commit_id": commit_id,
            "revision": revision,
            "parts": parts,
            "rows_new": counts.total("new") if counts else rows,
            "rows_duplicate": (counts.total("duplicate") + counts.total("same")) if counts else 0,
            "rows_conflict": counts.total("conflict") if counts else 0,
            "recorded_at": utc_now(),
        }
        return inserted_id(db.table("sync_log").insert(row))


def sync_history(db: sqlite_utils.Database, repo_id: str | None = None) -> list[dict[str, Any]]:
    """Every push and pull (of one dataset, or all), oldest first."""
    where, values = ("repo_id = ?", [repo_id]) if repo_id else (None, [])
    return list(db.table("sync_log").rows_where(where, values, order_by="id"))


def dataset_sources(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """The dataset commits a run's pulled rows were merged from: [{"repo_id", "commit_id",
    "rows", "first_merged_at"}], oldest first. Empty for a run whose rows are all local."""
    return list(
        db.query(
            "SELECT repo_id, commit_id, COUNT(*) AS rows, MIN(recorded_at) AS first_merged_at FROM sync_items "
            "WHERE run_id = ? AND direction = 'pull' GROUP BY repo_id, commit_id ORDER BY first_merged_at",
            [run_id],
        )
    )


def run_field_conflicts(db: sqlite_utils.Database, run_id: int) -> list[dict[str, Any]]:
    """Identity fields of a run that another machine recorded with another value."""
    return list(db.table("sync_run_conflicts").rows_where("run_id = ?", [run_id], order_by="id"))
