"""Reading back an offline wandb run as wandb itself stores it, for the tracker tests.

wandb 0.31 keeps an offline run's history in `run-<id>.wandb`, the transaction log `wandb sync`
uploads: wandb's header (`:W&B`, magic, version), then LevelDB log blocks whose records are
wandb's own `Record` protocol buffers (`wandb.proto.wandb_internal_pb2`). The Python
`DataStore` reader of older wandb is gone (wandb-core reads the file now), so the framing is
read here, as LevelDB documents it, and every record is decoded by wandb's own message type.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

BLOCK = 32 * 1024
HEADER = 7  # wandb's file header, and each LevelDB record header: crc32c, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def transaction_log(folder: Path) -> Path:
    """The one `.wandb` file of an offline run folder."""
    (found,) = sorted(Path(folder).glob("run-*.wandb"))
    return found


def records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a wandb transaction log"
    found, pending, position = [], b"", HEADER
    while position + HEADER <= len(data):
        left = BLOCK - position % BLOCK
        if left < HEADER:  # the block's trailer is padding
            position += left
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + HEADER])
        position += HEADER
        if kind == 0 and length == 0:
            position += left - HEADER
            continue
        chunk = data[position : position + length]
        position += length
        if kind == FULL:
            found.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            found.append(pending + chunk)
    decoded = []
    for raw in found:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        decoded.append(record)
    return decoded


def wandb_history(folder: Path) -> dict[str, dict[int, float]]:
    """{key: {step: value}} of every history row the run logged (wandb's own `_` keys left out)."""
    history: dict[str, dict[int, float]] = {}
    for record in records(transaction_log(folder)):
        if record.WhichOneof("record_type") != "history":
            continue
        step = record.history.step.num
        for item in record.history.item:
            key = item.key or "/".join(item.nested_key)
            if not key.startswith("_"):
                history.setdefault(key, {})[step] = json.loads(item.value_json)
    return history


def wandb_run_record(folder: Path):
    """The run record (project, name, id, config) of an offline run."""
    return next(record.run for record in records(transaction_log(folder)) if record.HasField("run"))
