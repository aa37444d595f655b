"""The rollout batch every estimator reads: one row per (trajectory, turn), validated once.

Rows may arrive in any order and may include padding duplicates (`is_pad`); time order inside a
trajectory comes only from `step_index`. Validation failures raise InvalidInput with one line that
names the key and the row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ccpo_cli.errors import InvalidInput

REQUIRED_KEYS = (
    "uid",
    "traj_uid",
    "anchor_obs",
    "step_index",
    "env_reward",
    "is_action_valid",
    "episode_reward",
    "response_mask",
)
OPTIONAL_KEYS = ("phi_feats", "is_pad", "plan_progress")
BATCH_KEYS = REQUIRED_KEYS + OPTIONAL_KEYS


@dataclass(frozen=True, eq=False)
class RolloutBatch:
    uid: np.ndarray  # (n,) str
    traj_uid: np.ndarray  # (n,) str
    anchor_obs: np.ndarray  # (n,) str
    step_index: np.ndarray  # (n,) int64
    env_reward: np.ndarray  # (n,) float64
    is_action_valid: np.ndarray  # (n,) bool
    episode_reward: np.ndarray  # (n,) float64
    response_mask: np.ndarray  # (n, L) float32 of 0/1
    phi_feats: np.ndarray | None  # (n, d) float32
    is_pad: np.ndarray  # (n,) bool
    # 1.0 where the action advanced the game's stored plan, else 0.0 (the oracle-credit ceiling,
    # docs/estimators.md §4.2); None when the rollouts did not follow a plan.
    plan_progress: np.ndarray | None = None  # (n,) float64

    @property
    def n_rows(self) -> int:
        return int(self.uid.shape[0])

    @property
    def response_length(self) -> int:
        return int(self.response_mask.shape[1])

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "batch") -> RolloutBatch:
        """Validate a mapping of the batch keys (docs/estimators.md §1.1) (lists or arrays) into a batch."""
        return _validate(data, source)

    def take(self, rows: np.ndarray) -> RolloutBatch:
        """The batch restricted to / reordered by `rows` (row positions)."""
        rows = np.asarray(rows, dtype=np.int64)
        return RolloutBatch(
            uid=self.uid[rows],
            traj_uid=self.traj_uid[rows],
            anchor_obs=self.anchor_obs[rows],
            step_index=self.step_index[rows],
            env_reward=self.env_reward[rows],
            is_action_valid=self.is_action_valid[rows],
            episode_reward=self.episode_reward[rows],
            response_mask=self.response_mask[rows],
            phi_feats=None if self.phi_feats is None else self.phi_feats[rows],
            is_pad=self.is_pad[rows],
            plan_progress=None if self.plan_progress is None else self.plan_progress[rows],
        )

    def as_mapping(self) -> dict[str, np.ndarray]:
        """The batch keys as arrays (phi_feats only when present)."""
        mapping = {key: getattr(self, key) for key in REQUIRED_KEYS + ("is_pad",)}
        if self.phi_feats is not None:
            mapping["phi_feats"] = self.phi_feats
        if self.plan_progress is not None:
            mapping["plan_progress"] = self.plan_progress
        return mapping


# ---- validation ------------------------------------------------------------------------------


def _fail(source: str, key: str, message: str, row: int | None = None) -> InvalidInput:
    where = f"key '{key}'" if row is None else f"key '{key}', row {row}"
    return InvalidInput(f"{source}: {where}: {message}")


def _as_array(value: Any, key: str, source: str) -> np.ndarray:
    try:
        array = np.asarray(value)
    except ValueError:
        raise _fail(source, key, "ragged: rows have different lengths") from None
    if array.dtype == object and array.ndim > 1:
        raise _fail(source, key, "ragged: rows have different lengths")
    return array


def _vector(data: Mapping[str, Any], key: str, n: int | None, source: str) -> np.ndarray:
    array = _as_array(data[key], key, source)
    if array.ndim != 1:
        raise _fail(source, key, f"expected one value per row, got an array of shape {array.shape}")
    if n is not None and array.shape[0] != n:
        raise _fail(source, key, f"expected {n} rows (as 'uid'), got {array.shape[0]}")
    return array


def _check_elements(data, key, accept, expected: str, source: str) -> None:
    """Element types of a plain list, before numpy coerces mixed lists to one dtype."""
    raw = data[key]
    if isinstance(raw, (list, tuple)):
        for row, value in enumerate(raw):
            if not accept(value):
                raise _fail(source, key, f"expected {expected}, got {value!r}", row)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.number)) and not isinstance(value, (bool, np.bool_))


def _strings(data, key, n, source) -> np.ndarray:
    _check_elements(data, key, lambda v: isinstance(v, str), "a string", source)
    array = _vector(data, key, n, source)
    if array.dtype.kind == "U":
        return array.astype(object)
    for row, value in enumerate(array):
        if not isinstance(value, str):
            raise _fail(source, key, f"expected a string, got {type(value).__name__}", row)
    return array.astype(object)


def _floats(data, key, n, source) -> np.ndarray:
    _check_elements(data, key, _is_number, "a number", source)
    array = _vector(data, key, n, source)
    if array.dtype.kind not in "biuf":
        for row, value in enumerate(array):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
                raise _fail(source, key, f"expected a number, got {value!r}", row)
    values = array.astype(np.float64)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise _fail(source, key, f"non-finite value {values[bad[0]]!r}", int(bad[0]))
    return values


def _integers(data, key, n, source) -> np.ndarray:
    _check_elements(data, key, _is_number, "an integer", source)
    array = _vector(data, key, n, source)
    if array.dtype.kind == "b":
        raise _fail(source, key, "expected integers, got booleans")
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    for row, value in enumerate(array):
        ok = isinstance(value, (int, float, np.number)) and not isinstance(value, bool)
        if not ok or not np.isfinite(value) or float(value) != int(value):
            raise _fail(source, key, f"expected an integer, got {value!r}", row)
    return array.astype(np.float64).astype(np.int64)


def _zero_one(array: np.ndarray, key: str, source: str) -> np.ndarray:
    """A 0/1 (or bool) array as bool; any other value fails naming its row."""
    if array.dtype.kind == "b":
        return array
    if array.dtype.kind not in "iuf":
        flat = array.reshape(array.shape[0], -1) if array.ndim > 1 else array[:, None]
        for row in range(flat.shape[0]):
            for value in flat[row]:
                if isinstance(value, (bool, np.bool_)):
                    continue
                if not isinstance(value, (int, float, np.number)) or value not in (0, 1):
                    raise _fail(source, key, f"expected 0/1, got {value!r}", row)
        return array.astype(bool)
    bad = (array != 0) & (array != 1)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        value = array.reshape(array.shape[0], -1)[row][bad.reshape(array.shape[0], -1)[row]][0]
        raise _fail(source, key, f"expected 0/1, got {value.item()!r}", row)
    return array.astype(bool)


def _matrix(data, key, n, source) -> np.ndarray:
    array = _as_array(data[key], key, source)
    if array.ndim != 2:
        raise _fail(
            source,
            key,
            f"expected an n x {'L' if key == 'response_mask' else 'd'} matrix, got shape {array.shape}",
        )
    if array.shape[0] != n:
        raise _fail(source, key, f"expected {n} rows (as 'uid'), got {array.shape[0]}")
    return array


def _phi_feats(data: Mapping[str, Any], n: int, source: str) -> np.ndarray:
    """The reference-policy features: an n x d matrix of finite numbers (d >= 1), as float32."""
    features = _matrix(data, "phi_feats", n, source)
    if features.dtype.kind not in "iuf" or features.shape[1] == 0:
        raise _fail(
            source,
            "phi_feats",
            f"expected an n x d matrix of numbers (d >= 1), got dtype {features.dtype}",
        )
    phi_feats = np.ascontiguousarray(features, dtype=np.float32)
    finite = np.isfinite(phi_feats).all(axis=1)
    if not finite.all():
        raise _fail(source, "phi_feats", "non-finite value", int(np.flatnonzero(~finite)[0]))
    return phi_feats


def _validate(data: Mapping[str, Any], source: str) -> RolloutBatch:
    if not isinstance(data, Mapping):
        raise InvalidInput(f"{source}: expected a mapping of batch keys, got {type(data).__name__}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise InvalidInput(f"{source}: missing key '{key}'")
    uid = _strings(data, "uid", None, source)
    n = uid.shape[0]
    traj_uid = _strings(data, "traj_uid", n, source)
    anchor_obs = _strings(data, "anchor_obs", n, source)
    step_index = _integers(data, "step_index", n, source)
    env_reward = _floats(data, "env_reward", n, source)
    is_action_valid = _zero_one(
        _vector(data, "is_action_valid", n, source), "is_action_valid", source
    )
    episode_reward = _floats(data, "episode_reward", n, source)
    mask = _matrix(data, "response_mask", n, source)
    response_mask = _zero_one(mask, "response_mask", source).astype(np.float32)

    phi_feats = _phi_feats(data, n, source) if data.get("phi_feats") is not None else None
    if data.get("is_pad") is not None:
        is_pad = _zero_one(_vector(data, "is_pad", n, source), "is_pad", source)
    else:
        is_pad = np.zeros(n, dtype=bool)

    plan_progress = None
    if data.get("plan_progress") is not None:
        plan_progress = _zero_one(
            _vector(data, "plan_progress", n, source), "plan_progress", source
        ).astype(np.float64)

    batch = RolloutBatch(
        uid=uid,
        traj_uid=traj_uid,
        anchor_obs=anchor_obs,
        step_index=step_index,
        env_reward=env_reward,
        is_action_valid=is_action_valid,
        episode_reward=episode_reward,
        response_mask=response_mask,
        phi_feats=phi_feats,
        is_pad=is_pad,
        plan_progress=plan_progress,
    )
    _check_trajectories(batch, source)
    return batch


def _check_trajectories(batch: RolloutBatch, source: str) -> None:
    """Real rows of a trajectory: one task, one episode reward, step_index exactly 0..T-1."""
    real = np.flatnonzero(~batch.is_pad)
    negative = real[batch.step_index[real] < 0]
    if negative.size:
        row = int(negative[0])
        raise _fail(source, "step_index", f"negative step_index {batch.step_index[row]}", row)
    _, traj_code = np.unique(batch.traj_uid[real].astype(str), return_inverse=True)
    order = real[np.lexsort((batch.step_index[real], traj_code))]
    first_of: dict[str, int] = {}
    previous_row = -1
    for row in order:
        row = int(row)
        trajectory = batch.traj_uid[row]
        step = int(batch.step_index[row])
        if trajectory not in first_of:
            first_of[trajectory] = row
            problem = (
                None
                if step == 0
                else (
                    "step_index",
                    f"trajectory {trajectory!r} starts at step_index {step}, not 0 (missing step 0)",
                )
            )
        else:
            problem = _continuation_problem(batch, row, first_of[trajectory], previous_row)
        if problem is not None:
            raise _fail(source, *problem, row)
        previous_row = row


def _continuation_problem(
    batch: RolloutBatch, row: int, first: int, previous_row: int
) -> tuple[str, str] | None:
    """What is wrong with a trajectory's later `row` (the key and why), against the
    trajectory's `first` row and the row before it in step order; None when nothing is."""
    trajectory = batch.traj_uid[row]
    step = int(batch.step_index[row])
    if batch.uid[row] != batch.uid[first]:
        return (
            "uid",
            f"trajectory {trajectory!r} is in task {batch.uid[first]!r} at row {first} but {batch.uid[row]!r} here",
        )
    if batch.episode_reward[row] != batch.episode_reward[first]:
        return (
            "episode_reward",
            f"differs within trajectory {trajectory!r} (row {first} has {batch.episode_reward[first]!r})",
        )
    expected = int(batch.step_index[previous_row]) + 1
    if step == expected - 1:
        return (
            "step_index",
            f"duplicate step_index {step} in trajectory {trajectory!r} (also row {previous_row})",
        )
    if step != expected:
        return (
            "step_index",
            f"trajectory {trajectory!r} jumps from step_index {expected - 1} to {step} (missing {expected})",
        )
    return None
