"""`--format auto`: which reader a file or folder needs, decided by its content.

Folders: a wandb run folder, else a TensorBoard run folder. Files: a name with `tfevents` is
a TensorBoard event file; otherwise whole lines are read (never a fixed-size prefix) until one
decides: a JSON object with a `data` object is verl's file logger, one with `step` ccpo's
JSONL, one with only `_step` wandb's history; a header with a step column is a CSV export; a
`step:N` line is verl's console. Blank lines, a byte-order mark, NUL bytes and undecodable
or cut JSON lines are passed over.
"""

from __future__ import annotations

import json
from pathlib import Path

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.readers.console import ANSI, RAY_PREFIX, STEP_START
from ccpo_cli.store.readers.csv_table import is_csv_header
from ccpo_cli.store.readers.lines import Line, read_lines
from ccpo_cli.store.readers.tb_events import EVENT_FILE_MARK, event_files
from ccpo_cli.store.readers.wandb_run import MAX_SUMMARY_BYTES, SUMMARY_SUFFIX, wandb_source

# A console log may print this many lines of setup before its first metrics line.
MAX_LINES_TO_DECIDE = 200_000


def detect_format(path: Path) -> str:
    if path.is_dir():
        if wandb_source(path) is not None:
            return "wandb"
        if event_files(path):
            return "tensorboard"
        raise InvalidInput(
            f"{path}: not a regular file, nor a wandb run folder (files/output.log) or a TensorBoard run folder"
        )
    if EVENT_FILE_MARK in path.name:
        return "tensorboard"
    if path.suffix == SUMMARY_SUFFIX and _summary_object(path):
        return "wandb"
    return _detect_text(path)


def _summary_object(path: Path) -> bool:
    """Whether a .json file is one object with wandb's `_step` and `_runtime` (a run summary)."""
    if path.stat().st_size > MAX_SUMMARY_BYTES:
        return False
    try:
        obj = json.loads(path.read_bytes().decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and "_step" in obj and "_runtime" in obj


def _detect_text(path: Path) -> str:
    seen_text = seen_json = False
    for item in read_lines(path):
        if not isinstance(item, Line):
            continue
        text = ANSI.sub("", item.text).strip()
        if not text:
            continue
        if not seen_text and is_csv_header(text):
            return "csv"
        seen_text = True
        if text.startswith("{"):
            seen_json = True
            kind = _json_kind(text)
            if kind is not None:
                return kind
        else:
            prefix = RAY_PREFIX.match(text)
            if STEP_START.match(text[prefix.end() :] if prefix else text):
                return "console"
        if item.number >= MAX_LINES_TO_DECIDE:
            break
    if not seen_text:
        raise InvalidInput(
            f"{path}: no text in the file (only blank lines or binary content); no metrics to ingest"
        )
    return "ccpo" if seen_json else "console"


def _json_kind(text: str) -> str | None:
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None  # a cut or garbled line decides nothing; the next one may
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("data"), dict):
        return "verl-file"
    if "step" in obj:
        return "ccpo"
    if "_step" in obj:
        return "wandb"
    return None
