"""Plain DataProto-like batches for the verl backend tests (PyPI verl is not installed here).

`PlainDataProto` has what the adapter duck-types on: `.batch` (name -> tensor),
`.non_tensor_batch` (name -> numpy array, one entry per row) and `.meta_info`; `select_rows`
does what verl's padding (`adjust_batch` duplicates rows) and load balancing (`reorder`) do.

`spec_example_one` is worked example 1 of docs/estimators.md §10.1 laid out as verl-agent
fields, with the spec's expected advantages per arm.
"""

from __future__ import annotations

import numpy as np
import torch


class PlainDataProto:
    def __init__(self, batch: dict, non_tensor_batch: dict, meta_info: dict | None = None):
        self.batch = batch
        self.non_tensor_batch = non_tensor_batch
        self.meta_info = meta_info or {}

    def __len__(self) -> int:
        return len(next(iter(self.non_tensor_batch.values())))

    def select_rows(self, rows) -> PlainDataProto:
        rows = list(rows)
        return PlainDataProto(
            {key: value[torch.tensor(rows)] for key, value in self.batch.items()},
            {key: value[np.array(rows)] for key, value in self.non_tensor_batch.items()},
            dict(self.meta_info),
        )


# Rows in rollout order: trajectory by trajectory, turns in time order.
# t1: s0 -> s1, wins on turn 2; t2: s0 -> s1, fails; t3: s0 -> s2, fails.
EXAMPLE_ONE_ROWS = [
    ("t1", "s0", 0.0, 10.0),
    ("t1", "s1", 10.0, 10.0),
    ("t2", "s0", 0.0, 0.0),
    ("t2", "s1", 0.0, 0.0),
    ("t3", "s0", 0.0, 0.0),
    ("t3", "s2", 0.0, 0.0),
]
EXAMPLE_ONE_EXPECTED = {
    "grpo": [1.29099, 1.29099, -0.64550, -0.64550, -0.64550, -0.64550],
    "gigpo": [2.44569, 1.99810, -1.22285, -1.35260, -1.22285, -0.64550],
    "return-hard": [2.27370, 2.41944, -1.07321, -1.77092, -1.20351, -0.69054],
    "return-hard-fbjw": [2.58243, 2.51869, -1.03178, -1.67331, -1.26429, -1.13175],
}
RESPONSE_LENGTHS = [3, 5, 1, 4, 2, 5]
RESPONSE_WIDTH = 5
PROMPT_WIDTH = 4


def spec_example_one() -> PlainDataProto:
    n = len(EXAMPLE_ONE_ROWS)
    response_mask = torch.zeros(n, RESPONSE_WIDTH, dtype=torch.int64)
    for row, length in enumerate(RESPONSE_LENGTHS):
        response_mask[row, :length] = 1
    prompt_mask = torch.ones(n, PROMPT_WIDTH, dtype=torch.int64)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1)
    # Distinct token ids per row so that rows are distinguishable, as real prompts are.
    input_ids = torch.arange(n * (PROMPT_WIDTH + RESPONSE_WIDTH)).reshape(n, -1) * attention_mask
    token_scores = torch.zeros(n, RESPONSE_WIDTH)
    non_tensor = {
        "uid": np.array(["task-a"] * n, dtype=object),
        "traj_uid": np.array([row[0] for row in EXAMPLE_ONE_ROWS], dtype=object),
        "anchor_obs": np.array([row[1] for row in EXAMPLE_ONE_ROWS], dtype=object),
        "rewards": np.array([row[2] for row in EXAMPLE_ONE_ROWS], dtype=np.float32),
        "episode_rewards": np.array([row[3] for row in EXAMPLE_ONE_ROWS], dtype=np.float32),
        "is_action_valid": np.ones(n, dtype=bool),
        "data_source": np.array(["text"] * n, dtype=object),
    }
    batch = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "responses": input_ids[:, PROMPT_WIDTH:],
        "response_mask": response_mask,
        "token_level_rewards": token_scores,
    }
    return PlainDataProto(batch, non_tensor)


def per_row(advantages: torch.Tensor, response_mask: torch.Tensor) -> np.ndarray:
    """The one value each row carries on its response tokens (checked to be constant)."""
    values = []
    for row in range(advantages.shape[0]):
        kept = advantages[row][response_mask[row].bool()]
        assert torch.allclose(kept, kept[0].expand_as(kept)), (
            "a row's tokens carry different advantages"
        )
        assert torch.all(advantages[row][~response_mask[row].bool()] == 0), (
            "advantage outside the response mask"
        )
        values.append(float(kept[0]))
    return np.array(values)
