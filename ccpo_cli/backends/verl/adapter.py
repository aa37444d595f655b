"""DataProto-like batches <-> the estimator's rollout batch; duck-typed, no verl import.

Anything with `.batch` (a mapping of tensors), `.non_tensor_batch` (a mapping of numpy arrays)
and `.meta_info` works: verl-agent's and PyPI verl's `DataProto`, or plain objects in tests.

verl-agent fields used (one row per trajectory turn): `uid` (task group), `traj_uid`,
`anchor_obs`, `rewards` (this turn's env reward), `is_action_valid`, `episode_rewards`; tensors
`response_mask` (else the response part of `attention_mask`) and optional `ccpo_phi_feats`.

Time order and padding: the trainer pads the batch with duplicated rows and reorders rows for
load balance before advantages are computed, so neither row order nor row count can be trusted
there. `annotate_rollout_rows` runs on the batch as it leaves the rollout loop (rows of each
trajectory in time order, no duplicates yet) and stamps each row with its turn index and source
row; later duplicates of a source row are padding (`is_pad`), which the arm's padding rule
(estimators/padding.py) either leaves out (advantage 0) or counts as verl-agent does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ccpo_cli.errors import InvalidInput

STEP_INDEX_KEY = "ccpo_step_index"
SOURCE_ROW_KEY = "ccpo_source_row"
FEATURES_KEY = "ccpo_phi_feats"


def _numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # torch tensors, without importing torch here
        value = value.detach().to("cpu").numpy()
    return np.asarray(value)


def _non_tensor(data: Any, key: str) -> np.ndarray:
    fields = data.non_tensor_batch
    if key not in fields:
        raise InvalidInput(
            f"rollout batch: non_tensor_batch has no '{key}' (have: {', '.join(sorted(fields))})"
        )
    return np.asarray(fields[key])


def has_tensor(data: Any, key: str) -> bool:
    # `keys()`, not `in`: verl's TensorDict batches do not all support membership tests.
    return key in data.batch.keys()


def response_mask_of(data: Any) -> Any:
    """The (n, L) response mask tensor: `response_mask`, else the tail of `attention_mask`."""
    batch = data.batch
    if has_tensor(data, "response_mask"):
        return batch["response_mask"]
    if has_tensor(data, "responses") and has_tensor(data, "attention_mask"):
        return batch["attention_mask"][:, -batch["responses"].shape[1] :]
    raise InvalidInput(
        "rollout batch: no 'response_mask' and no 'responses' + 'attention_mask' to derive it"
    )


def turn_indices(traj_uid: np.ndarray) -> np.ndarray:
    """0-based turn index of each row, reading rows of a trajectory in their current order."""
    seen: dict[Any, int] = {}
    index = np.empty(len(traj_uid), dtype=np.int64)
    for row, trajectory in enumerate(traj_uid):
        index[row] = seen.get(trajectory, 0)
        seen[trajectory] = index[row] + 1
    return index


def annotate_rollout_rows(data: Any) -> Any:
    """Stamp turn index and source row on a batch straight out of the rollout loop (in place)."""
    traj_uid = _non_tensor(data, "traj_uid")
    data.non_tensor_batch[STEP_INDEX_KEY] = turn_indices(traj_uid).astype(object)
    data.non_tensor_batch[SOURCE_ROW_KEY] = np.arange(len(traj_uid)).astype(object)
    return data


def mean_turns(batches: list[Any]) -> float | None:
    """Mean turns per episode over rollout batches (one row per turn of each trajectory)."""
    turns: dict[Any, int] = {}
    for data in batches:
        for trajectory in _non_tensor(data, "traj_uid"):
            turns[trajectory] = turns.get(trajectory, 0) + 1
    return sum(turns.values()) / len(turns) if turns else None


def padding_rows(source_row: np.ndarray) -> np.ndarray:
    """True for every occurrence of a source row after its first (the trainer's padding copies)."""
    seen: set[Any] = set()
    pad = np.zeros(len(source_row), dtype=bool)
    for row, source in enumerate(source_row):
        pad[row] = source in seen
        seen.add(source)
    return pad


def estimator_inputs(data: Any, *, with_features: bool = True) -> dict[str, np.ndarray]:
    """The `ccpo estimate` batch keys (docs/estimators.md §1.1) for a DataProto-like batch."""
    fields = data.non_tensor_batch
    traj_uid = _non_tensor(data, "traj_uid").astype(str).astype(object)
    response_mask = _numpy(response_mask_of(data)).astype(np.float32)
    if STEP_INDEX_KEY in fields:
        step_index = np.asarray(fields[STEP_INDEX_KEY]).astype(np.int64)
    else:
        # No stamp: only correct when rows are still in rollout order (no balancing, no padding).
        step_index = turn_indices(traj_uid)
    if SOURCE_ROW_KEY in fields:
        is_pad = padding_rows(np.asarray(fields[SOURCE_ROW_KEY]))
    else:
        is_pad = np.zeros(len(traj_uid), dtype=bool)
    empty = np.flatnonzero(response_mask.sum(axis=1) == 0)
    if empty.size:
        raise InvalidInput(f"rollout batch: row {int(empty[0])} has an empty response mask")
    inputs: dict[str, np.ndarray] = {
        "uid": _non_tensor(data, "uid").astype(str).astype(object),
        "traj_uid": traj_uid,
        "anchor_obs": _non_tensor(data, "anchor_obs").astype(str).astype(object),
        "step_index": step_index,
        "env_reward": _non_tensor(data, "rewards").astype(np.float64),
        "is_action_valid": _non_tensor(data, "is_action_valid").astype(bool),
        "episode_reward": _non_tensor(data, "episode_rewards").astype(np.float64),
        "response_mask": response_mask,
        "is_pad": is_pad,
    }
    if with_features and has_tensor(data, FEATURES_KEY):
        features = _numpy(data.batch[FEATURES_KEY]).astype(np.float32)
        if features.ndim != 2 or features.shape[0] != len(traj_uid):
            raise InvalidInput(
                f"rollout batch: '{FEATURES_KEY}' has shape {features.shape}, expected ({len(traj_uid)}, d)"
            )
        inputs["phi_feats"] = features
    return inputs


def advantage_tensor(advantages: Any, like: Any) -> Any:
    """An (n, L) advantage tensor on `like`'s device, zero outside the response mask.

    `advantages` is the estimator's (n, L) matrix, or one value per row (n,) that is spread over
    the row's response tokens; `like` is the response-mask tensor.
    """
    import torch

    values = torch.as_tensor(np.asarray(advantages, dtype=np.float32))
    mask = like.to(dtype=torch.float32)
    if values.dim() == 1:
        values = values[:, None]
    elif tuple(values.shape) != tuple(mask.shape):
        raise InvalidInput(
            f"advantages of shape {tuple(values.shape)} do not match the response mask {tuple(mask.shape)}"
        )
    if values.shape[0] != mask.shape[0]:
        raise InvalidInput(f"{values.shape[0]} advantage rows for {mask.shape[0]} batch rows")
    return (values.to(mask.device) * mask).contiguous()
