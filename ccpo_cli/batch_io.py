"""Rollout batches and advantage results on disk (.json or .npz, same key names; see
docs/estimators.md §1.1 and §6).

The estimators never touch files; this module is the only place that does for them.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.estimators.batch import BATCH_KEYS, RolloutBatch
from ccpo_cli.estimators.compute import AdvantageResult

SCHEMA_VERSION = 1
SUFFIXES = (".json", ".npz")
_PER_ROW_PREFIX = "per_row."


def _suffix(path: Path, purpose: str, error: type = UsageError) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise error(f"{path}: {purpose} must end in .json or .npz")
    return suffix


def load_batch(path: Path | str) -> RolloutBatch:
    """Read and validate a batch; InvalidInput (one line, naming file, key and row) on any problem."""
    path = Path(path)
    suffix = _suffix(path, "a batch file", InvalidInput)
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file")
    if suffix == ".json":
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise InvalidInput(f"{path}: line {error.lineno}: not valid JSON ({error.msg})") from None
        except UnicodeDecodeError:
            raise InvalidInput(f"{path}: not UTF-8 text") from None
    else:
        if not zipfile.is_zipfile(path):
            raise InvalidInput(f"{path}: not a readable .npz archive")
        try:
            with np.load(path, allow_pickle=False) as archive:
                data = {key: archive[key] for key in archive.files if key in BATCH_KEYS}
        except ValueError as error:
            raise InvalidInput(f"{path}: cannot read arrays ({error}); store strings as unicode arrays") from None
        except (OSError, zipfile.BadZipFile, EOFError):
            raise InvalidInput(f"{path}: not a readable .npz archive") from None
    return RolloutBatch.from_mapping(data, source=str(path))


def save_batch(batch: RolloutBatch, path: Path | str) -> Path:
    """Write a batch in the batch schema (docs/estimators.md §1.1) (.json lists or .npz arrays)."""
    path = Path(path)
    mapping = batch.as_mapping()
    if _suffix(path, "a batch file") == ".json":
        document = {key: _plain(value) for key, value in mapping.items()}
        path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    else:
        arrays = {key: (value.astype(str) if value.dtype == object else value) for key, value in mapping.items()}
        np.savez(path, **arrays)
    return path


def _plain(value: Any) -> Any:
    """JSON-ready Python values; NaN and infinities become null."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def result_document(result: AdvantageResult) -> dict[str, Any]:
    """The `ccpo estimate` output document (docs/estimators.md §6), rows in the input order."""
    arm = result.arm
    return {
        "arm": arm.name,
        "fingerprint": arm.fingerprint,
        "overrides": dict(arm.overrides),
        "advantages": result.advantages,
        "per_row": dict(result.per_row),
    }


def write_result(result: AdvantageResult, path: Path | str) -> Path:
    """Save the estimate document as .json (with schema_version) or .npz (meta as a JSON string)."""
    path = Path(path)
    document = result_document(result)
    if _suffix(path, "the output file") == ".json":
        body = {"schema_version": SCHEMA_VERSION}
        body.update({key: _plain(value) if not isinstance(value, dict) else {k: _plain(v) for k, v in value.items()} for key, value in document.items()})
        path.write_text(json.dumps(body, allow_nan=False) + "\n", encoding="utf-8")
    else:
        meta = {"schema_version": SCHEMA_VERSION, "arm": document["arm"], "fingerprint": document["fingerprint"], "overrides": document["overrides"]}
        arrays = {f"{_PER_ROW_PREFIX}{key}": value for key, value in result.per_row.items()}
        np.savez(
            path,
            advantages=result.advantages,
            arm=np.array(document["arm"]),
            fingerprint=np.array(document["fingerprint"]),
            meta=np.array(json.dumps(meta)),
            **arrays,
        )
    return path


def read_result(path: Path | str) -> dict[str, Any]:
    """An estimate document back from .json or .npz (per_row as arrays for .npz)."""
    path = Path(path)
    if _suffix(path, "a result file") == ".json":
        return json.loads(path.read_text(encoding="utf-8"))
    with np.load(path, allow_pickle=False) as archive:
        meta = json.loads(str(archive["meta"]))
        meta["advantages"] = archive["advantages"]
        meta["per_row"] = {key[len(_PER_ROW_PREFIX):]: archive[key] for key in archive.files if key.startswith(_PER_ROW_PREFIX)}
    return meta
