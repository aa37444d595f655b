"""TensorBoard event files (`events.out.tfevents.*`), a file or a run folder, read with
TensorBoard's own `EventAccumulator` (the `tensorboard` package, an optional dependency).

verl's tensorboard logger writes every metric as a scalar at the global step; scalars of one
step become one record. Event files hold no lines, so records carry none. A folder is walked
without following symbolic links to folders, and an event file that is a link out of the
folder refuses it (EventAccumulator would read it).
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from ccpo_cli.errors import InvalidInput
from ccpo_cli.extras import require_extra
from ccpo_cli.store.readers.base import MetricRecord, ReadEvent, ReadStats, refuse_link_out_of

EVENT_FILE_MARK = "tfevents"


def event_files(folder: Path) -> list[Path]:
    found = []
    for directory, _, names in os.walk(folder, followlinks=False):
        for name in names:
            if EVENT_FILE_MARK in name:
                path = refuse_link_out_of(folder, Path(directory) / name)
                if path.is_file():
                    found.append(path)
    return sorted(found)


def _run_folder(path: Path) -> Path:
    """The one folder (or file) to read: a run folder holds event files directly; a parent of
    several runs is refused, naming them."""
    if path.is_file():
        return path
    folders = sorted({p.parent for p in event_files(path)})
    if not folders:
        raise InvalidInput(
            f"{path}: no TensorBoard event files (events.out.tfevents.*) in this folder"
        )
    if len(folders) > 1:
        names = ", ".join(str(f.relative_to(path)) or "." for f in folders[:5])
        raise InvalidInput(
            f"{path}: event files of {len(folders)} runs ({names}); ingest one run folder at a time"
        )
    return folders[0]


def read_tensorboard(path: Path, stats: ReadStats) -> Iterator[ReadEvent]:
    require_extra("tensorboard", "tensorboard", what=f"{path}: reading TensorBoard event files")
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    source = _run_folder(path)
    accumulator = event_accumulator.EventAccumulator(
        str(source), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
    )
    try:
        accumulator.Reload()
    except Exception as error:  # noqa: BLE001 - the library raises several types for a damaged file
        raise InvalidInput(
            f"{path}: not a readable TensorBoard event file ({type(error).__name__}: {error})"
        ) from None
    tags = accumulator.Tags()
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for tag in tags.get(event_accumulator.SCALARS, []):
        for event in accumulator.Scalars(tag):
            by_step[event.step][tag] = float(event.value)
    for tag in tags.get(event_accumulator.TENSORS, []):
        for event in accumulator.Tensors(tag):
            value = tensor_util.make_ndarray(event.tensor_proto)
            if value.size == 1 and value.dtype.kind in "fiu":
                by_step[event.step][tag] = float(value.reshape(()))
    if not by_step:
        raise InvalidInput(
            f"{path}: no scalars in these TensorBoard event files (empty, damaged or not event files)"
        )
    for step in sorted(by_step):
        if step >= 0:
            yield MetricRecord(step, by_step[step])
