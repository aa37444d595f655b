"""Readers for every metrics format `ccpo ingest` understands, one module each.

`read_events(path, fmt, stats)` picks the reader (`detect` for "auto") and returns it as a
generator of `MetricRecord` / `Skipped` / `Cleaned` / `IncompleteTail` (see `base`, where
the readers' record types and bounds live and are imported from).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.readers.base import ReadEvent, ReadStats
from ccpo_cli.store.readers.console import read_console
from ccpo_cli.store.readers.csv_table import read_csv
from ccpo_cli.store.readers.detect import detect_format
from ccpo_cli.store.readers.jsonl import read_json_lines
from ccpo_cli.store.readers.tb_events import read_tensorboard
from ccpo_cli.store.readers.wandb_run import read_wandb
from ccpo_cli.vocabulary import (
    AUTO,
    CCPO_JSONL,
    CONSOLE,
    CSV,
    INGEST_FOLDER_FORMATS,
    INGEST_FORMATS,
    TENSORBOARD,
    VERL_FILE,
    WANDB,
)

FORMATS = INGEST_FORMATS
FOLDER_FORMATS = INGEST_FOLDER_FORMATS

__all__ = ["FORMATS", "detect_format", "read_events"]


def read_events(
    path: Path,
    fmt: str,
    stats: ReadStats,
    *,
    metric: str | None = None,
    notes: list[str] | None = None,
    source_run: str | None = None,
) -> tuple[str, Iterator[ReadEvent]]:
    """(the format read, its events). `metric` names the scalar of a single-scalar CSV and
    `source_run` the run of a CSV holding several; `notes` collects what a reader decided on
    the user's behalf (percent columns)."""
    if fmt == AUTO:
        fmt = detect_format(path)
    if path.is_dir() and fmt not in FOLDER_FORMATS:
        raise InvalidInput(f"{path}: a folder; --format {fmt} reads a file")
    if fmt == CONSOLE:
        return fmt, read_console(path, stats)
    if fmt in (CCPO_JSONL, VERL_FILE):
        return fmt, read_json_lines(path, stats, fmt)
    if fmt == CSV:
        return fmt, read_csv(path, stats, metric, notes, source_run)
    if fmt == TENSORBOARD:
        return fmt, read_tensorboard(path, stats)
    if fmt == WANDB:
        return fmt, read_wandb(path, stats)
    raise InvalidInput(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
