"""Rollout batches and advantage results on disk (.json or .npz, same key names; see
docs/estimators.md §1.1 and §6).

The estimators never touch files; this module is the only place that does for them, and the
only reader and writer of batch files anywhere: `ccpo estimate`'s input, the batches the CPU
trainer dumps (`--dump-batches`, with the advantages it trained with) and the testbed's
diagnostics of those dumps all go through `save_batch` and `load_batch` / `load_dumped_batch`.

Reading is bounded before anything is allocated: a batch file holds at most MAX_BATCH_BYTES of
data (a JSON file's size; the sum of the arrays an .npz's own headers declare, checked before a
byte is decompressed). Values must be real numbers (no complex dtypes), rewards and features
at most MAX_ABS_VALUE in size (so squares and sums stay finite in float32), and `step_index`
below 2^31.
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ccpo_cli.errors import CcpoError, InvalidInput, UsageError
from ccpo_cli.estimators.batch import BATCH_KEYS, RolloutBatch
from ccpo_cli.estimators.compute import AdvantageResult

SCHEMA_VERSION = 1
SUFFIXES = (".json", ".npz")
_PER_ROW_PREFIX = "per_row."
MAX_BATCH_BYTES = 256 * 1024 * 1024
MAX_ABS_VALUE = 1e9
MAX_STEP_INDEX = 2**31 - 1
# Beside the batch keys, a dumped training batch holds the per-row advantages it was trained
# with, so `ccpo estimate` on the same file can be checked against them.
TRAINED_ADVANTAGES = "advantages"
_STORED_KEYS = BATCH_KEYS + (TRAINED_ADVANTAGES,)


def _suffix(path: Path, purpose: str, error: type = UsageError) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise error(f"{path}: {purpose} must end in .json or .npz")
    return suffix


def load_batch(path: Path | str) -> RolloutBatch:
    """Read and validate a batch; InvalidInput (one line, naming file, key and row) on any problem."""
    return load_dumped_batch(path)[0]


def load_dumped_batch(path: Path | str) -> tuple[RolloutBatch, np.ndarray | None]:
    """A batch and the per-row advantages stored beside it (None when the file holds none), read
    and checked as `load_batch` does."""
    path = Path(path)
    suffix = _suffix(path, "a batch file", InvalidInput)
    if not path.is_file():
        raise InvalidInput(f"{path}: no such file")
    if suffix == ".json":
        if path.stat().st_size > MAX_BATCH_BYTES:
            raise InvalidInput(
                f"{path}: {path.stat().st_size} bytes; a batch file holds at most {MAX_BATCH_BYTES}"
            )
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise InvalidInput(
                f"{path}: line {error.lineno}: not valid JSON ({error.msg})"
            ) from None
        except UnicodeDecodeError:
            raise InvalidInput(f"{path}: not UTF-8 text") from None
        except RecursionError:
            raise InvalidInput(f"{path}: JSON nested too deeply to be a batch") from None
    else:
        if not zipfile.is_zipfile(path):
            raise InvalidInput(f"{path}: not a readable .npz archive")
        try:
            _check_npz_headers(path)
            with np.load(path, allow_pickle=False) as archive:
                data = {key: archive[key] for key in archive.files if key in _STORED_KEYS}
        except ValueError as error:
            raise InvalidInput(
                f"{path}: cannot read arrays ({error}); store strings as unicode arrays"
            ) from None
        except (OSError, zipfile.BadZipFile, EOFError):
            raise InvalidInput(f"{path}: not a readable .npz archive") from None
    trained = None
    if isinstance(data, dict):
        _check_step_index(data, str(path))
        trained = data.pop(TRAINED_ADVANTAGES, None)
    batch = RolloutBatch.from_mapping(data, source=str(path))
    _check_magnitudes(batch, str(path))
    return batch, _trained_advantages(trained, batch.n_rows, str(path))


def _trained_advantages(raw: Any, n_rows: int, source: str) -> np.ndarray | None:
    if raw is None:
        return None
    try:
        values = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidInput(f"{source}: key '{TRAINED_ADVANTAGES}': not numbers") from None
    if values.shape != (n_rows,):
        raise InvalidInput(
            f"{source}: key '{TRAINED_ADVANTAGES}': expected one value per row ({n_rows}), "
            f"got shape {values.shape}"
        )
    return values


def _check_npz_headers(path: Path) -> None:
    """Refuse, from the .npy headers alone, arrays that are too large or not real numbers/text."""
    total = 0
    with zipfile.ZipFile(path) as archive:
        for member in archive.infolist():
            key = member.filename.removesuffix(".npy")
            if key not in _STORED_KEYS:
                continue
            with archive.open(member) as stream:
                version = np.lib.format.read_magic(stream)
                read_header = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read_header(stream)
            if dtype.kind == "c":
                raise InvalidInput(
                    f"{path}: key '{key}': complex values ({dtype}); a batch holds real numbers"
                )
            if dtype.hasobject or dtype.kind == "V":
                raise InvalidInput(f"{path}: key '{key}': dtype {dtype} is not numbers or text")
            elements = math.prod(int(size) for size in shape)
            total += elements * dtype.itemsize
            if total > MAX_BATCH_BYTES:
                raise InvalidInput(
                    f"{path}: key '{key}': shape {tuple(shape)} of {dtype} makes the batch larger "
                    f"than {MAX_BATCH_BYTES} bytes (the limit), refused before reading"
                )


def _check_step_index(data: dict, source: str) -> None:
    raw = data.get("step_index")
    if raw is None:
        return
    values = raw.tolist() if isinstance(raw, np.ndarray) and raw.dtype.kind in "iuf" else raw
    if not isinstance(values, list):
        return
    for row, value in enumerate(values):
        if (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and math.isfinite(value)
            and abs(value) > MAX_STEP_INDEX
        ):
            raise InvalidInput(
                f"{source}: key 'step_index', row {row}: {value!r} is out of range "
                f"(|step_index| <= {MAX_STEP_INDEX})"
            )


def _check_magnitudes(batch: RolloutBatch, source: str) -> None:
    for key in ("env_reward", "episode_reward", "phi_feats"):
        values = getattr(batch, key)
        if values is None or values.size == 0:
            continue
        too_big = np.abs(values) > MAX_ABS_VALUE
        if too_big.any():
            row = int(np.argwhere(too_big)[0][0])
            value = float(values[row][too_big[row]][0]) if values.ndim > 1 else float(values[row])
            raise InvalidInput(
                f"{source}: key '{key}', row {row}: {value!r} is out of range "
                f"(|value| <= {MAX_ABS_VALUE:g})"
            )


def save_batch(
    batch: RolloutBatch, path: Path | str, *, advantages: np.ndarray | None = None
) -> Path:
    """Write a batch in the batch schema (docs/estimators.md §1.1) (.json lists or compressed
    .npz arrays), with `advantages` (one per row, what a trainer trained with) beside it when
    given; `load_dumped_batch` reads both back."""
    path = Path(path)
    mapping: dict[str, np.ndarray] = dict(batch.as_mapping())
    if advantages is not None:
        mapping[TRAINED_ADVANTAGES] = _trained_advantages(advantages, batch.n_rows, str(path))
    if _suffix(path, "a batch file") == ".json":
        document = {key: _plain(value) for key, value in mapping.items()}
        path.write_text(json.dumps(document) + "\n", encoding="utf-8")
    else:
        arrays = {
            key: (value.astype(str) if value.dtype == object else value)
            for key, value in mapping.items()
        }
        # Compressed: a training run dumps one batch per step, mostly repeated observation text.
        np.savez_compressed(path, **arrays)
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
    if path.is_dir():
        raise InvalidInput(f"--output {path}: is a folder; give a .json or .npz file name")
    _suffix(path, "the output file")
    if not path.parent.is_dir():
        raise InvalidInput(f"--output {path}: folder {path.parent} does not exist")
    try:
        return _write_result(result, path)
    except OSError as error:
        raise CcpoError(f"--output {path}: cannot write ({error.strerror or error})") from None


def _write_result(result: AdvantageResult, path: Path) -> Path:
    document = result_document(result)
    if _suffix(path, "the output file") == ".json":
        body = {"schema_version": SCHEMA_VERSION}
        body.update(
            {
                key: _plain(value)
                if not isinstance(value, dict)
                else {k: _plain(v) for k, v in value.items()}
                for key, value in document.items()
            }
        )
        path.write_text(json.dumps(body, allow_nan=False) + "\n", encoding="utf-8")
    else:
        meta = {
            "schema_version": SCHEMA_VERSION,
            "arm": document["arm"],
            "fingerprint": document["fingerprint"],
            "overrides": document["overrides"],
        }
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
        meta["per_row"] = {
            key[len(_PER_ROW_PREFIX) :]: archive[key]
            for key in archive.files
            if key.startswith(_PER_ROW_PREFIX)
        }
    return meta
