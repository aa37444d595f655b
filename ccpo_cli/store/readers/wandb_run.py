"""A wandb run folder, read offline (no wandb package, no network).

A local run folder (`wandb/run-<date>-<id>/`, or its `files/` folder) keeps the console in
`files/output.log`; older wandb versions also keep the full-precision history in
`files/wandb-history.jsonl` (one flat JSON object per logged step, the step under `_step`),
which is preferred when present. Newer versions keep history only inside the binary
`run-<id>.wandb` file: for those, ingest `files/output.log` or export the history from
wandb.ai (docs/runs-db.md). A file of the folder that is a symbolic link out of it is refused,
not followed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.readers.base import ReadEvent, ReadStats, refuse_link_out_of
from ccpo_cli.store.readers.console import read_console
from ccpo_cli.store.readers.jsonl import read_json_lines

HISTORY = "wandb-history.jsonl"
CONSOLE = "output.log"


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
        raise InvalidInput(f"{path}: not a wandb run folder (no files/{HISTORY} or files/{CONSOLE})")
    if source.name == CONSOLE:
        yield from read_console(source, stats)
    else:
        yield from read_json_lines(source, stats, "ccpo", step_key="_step")
