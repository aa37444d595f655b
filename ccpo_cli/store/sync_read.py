"""A downloaded `ccpo sync` part read within bounds, and the checks every synced value passes.

A part comes from a dataset anyone with write access may have edited, so nothing in it is
trusted: its table and format are read from its own metadata and must match its file name,
its rows, pages, values and decoded size are bounded before any row is made (a 21 KB part once
inflated to 2.6 GB), and every decoded text and list is bounded as it is read. A synced time
is parsed as a time and refused past CLOCK_SKEW_S ahead of this clock (`synced_time`), a step
past MAX_STEP or the run's recorded steps (`check_step`); the merge (sync_merge.py,
sync_runs.py) applies them row by row.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.sync_format import (
    PART_FORMAT,
    TABLES,
    part_schemas,
    part_table,
    pyarrow_modules,
)

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
    chunks = [
        metadata.row_group(group).column(column)
        for group in range(metadata.num_row_groups)
        for column in range(metadata.num_columns)
    ]
    pages = sum(chunk.total_uncompressed_size for chunk in chunks)
    if pages > MAX_UNCOMPRESSED_BYTES:
        raise InvalidInput(
            f"{path_in_repo}: {pages >> 20} MiB uncompressed, over the {MAX_UNCOMPRESSED_BYTES >> 20} MiB "
            "a part may hold; refused"
        )
    # Run-length and dictionary encodings store a repeated value once: the count of values is
    # what decoding makes, and the metadata states it per column chunk.
    values = sum(chunk.num_values for chunk in chunks)
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
    pa, _ = pyarrow_modules()
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
    pa, pq = pyarrow_modules()
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
    pa, pq = pyarrow_modules()
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
    expected = part_schemas()[table]
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


# How far in the future a synced time may lie (another machine's clock running ahead): beyond
# it the row is refused, so a forged `9999-...` never wins "newer" for good.
CLOCK_SKEW_S = 3600.0


def synced_time(value: Any, what: str, where: str) -> datetime.datetime:
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


# No run ccpo records has more steps than this: a step past it is not a step (a forged 2^62).
MAX_STEP = 10_000_000


def check_step(value: Any, recorded: int | None, what: str, where: str) -> None:
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
