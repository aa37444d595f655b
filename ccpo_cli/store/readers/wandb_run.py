"""A wandb run folder, read offline (no wandb package, no network).

A local run folder (`wandb/run-<date>-<id>/`, or its `files/` folder) keeps the console in
`files/output.log`; older wandb versions also keep the full-precision history in
`files/wandb-history.jsonl` (one flat JSON object per logged step, the step under `_step`),
which is preferred when present. Newer versions keep history only inside the binary
`run-<id>.wandb` file: for those, ingest `files/output.log` or export the history from
wandb.ai (docs/runs-db.md). A file of the folder that is a symbolic link out of it is refused,
not followed.

`wandb-summary.json` (a `.json` file beside them) is the run's summary: one object with the
latest value of every key and `_step`, the last step logged. A validation value in it was
measured at some earlier validation step the summary does not name, so its record is marked
`summary` and ingest places it (store/ingest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.readers.base import (
    BadRecord,
    MetricRecord,
    ReadEvent,
    ReadStats,
    Skipped,
    refuse_link_out_of,
    step_number,
)
from ccpo_cli.store.readers.console import read_console
from ccpo_cli.store.readers.jsonl import read_json_lines

HISTORY = "wandb-history.jsonl"
CONSOLE = "output.log"
SUMMARY_SUFFIX = ".json"  # wandb-summary.json; the history is JSON lines (.jsonl)
# A summary is one object of a few hundred keys; a larger file is not one.
MAX_SUMMARY_BYTES = 16 * 1024 * 1024


def _files_folder(folder: Path) -> Path:
    return folder / "files" if (folder / "files").is_dir() else folder


def wandb_source(folder: Path) -> Path | None:
    """The file of a wandb run folder that holds its metrics, or None if it is not one."""
    files = _files_folder(folder)
    for name in (HISTORY, CONSOLE):
        candidate = files / name
        if candidate.is_file():
            return refuse_link_out_of(folder, candidate)
    return None


def read_wandb(path: Path, stats: ReadStats) -> Iterator[ReadEvent]:
    source = path if path.is_file() else wandb_source(path)
    if source is None:
        raise InvalidInput(
            f"{path}: not a wandb run folder (no files/{HISTORY} or files/{CONSOLE})"
        )
    if source.name == CONSOLE:
        yield from read_console(source, stats)
    elif source.suffix == SUMMARY_SUFFIX:
        yield from read_summary(source, stats)
    else:
        yield from read_json_lines(source, stats, "ccpo", step_key="_step")


def read_summary(path: Path, stats: ReadStats) -> Iterator[ReadEvent]:
    """A wandb-summary.json as one `summary` record at its `_step`."""
    if path.stat().st_size > MAX_SUMMARY_BYTES:
        yield Skipped(
            None,
            f"{path.name}: larger than a wandb summary ({MAX_SUMMARY_BYTES // (1024 * 1024)} MiB); not read",
        )
        return
    text = path.read_bytes().decode("utf-8", errors="replace")
    stats.lines = text.count("\n") + 1
    if stats.progress is not None:
        stats.progress(len(text))
    try:
        summary = json.loads(text)
    except (ValueError, RecursionError) as error:
        yield Skipped(
            1, f"not a wandb summary: not one JSON object ({getattr(error, 'msg', error)})"
        )
        return
    if not isinstance(summary, dict) or "_step" not in summary:
        yield Skipped(1, "not a wandb summary: no '_step'")
        return
    try:
        step = step_number(summary["_step"])
    except BadRecord as error:
        yield Skipped(1, str(error))
        return
    metrics = {key: value for key, value in summary.items() if not key.startswith("_")}
    yield MetricRecord(step, metrics, 1, summary=True)
