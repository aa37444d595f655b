"""Invalid batches fail with InvalidInput (exit 3) and one line naming the key and the row."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from ccpo_cli.arms import load_arm
from ccpo_cli.batch_io import load_batch, save_batch
from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimators import RolloutBatch, compute_advantages

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "worked-example-1.json"


def good() -> dict:
    return json.loads(EXAMPLE.read_text())


def error_for(data: dict) -> str:
    with pytest.raises(InvalidInput) as caught:
        RolloutBatch.from_mapping(data, source="b.json")
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 3
    return message


def mutate(key, row, value):
    data = good()
    data[key] = copy.deepcopy(data[key])
    data[key][row] = value
    return data


@pytest.mark.parametrize(
    "key",
    [
        "uid",
        "traj_uid",
        "anchor_obs",
        "step_index",
        "env_reward",
        "is_action_valid",
        "episode_reward",
        "response_mask",
    ],
)
def test_missing_key(key):
    data = good()
    del data[key]
    assert error_for(data) == f"b.json: missing key '{key}'"


def test_wrong_length():
    data = good()
    data["env_reward"] = data["env_reward"][:-1]
    assert error_for(data) == "b.json: key 'env_reward': expected 6 rows (as 'uid'), got 5"


@pytest.mark.parametrize(
    "key,row,value,fragment",
    [
        ("env_reward", 3, float("nan"), "key 'env_reward', row 3: non-finite"),
        ("episode_reward", 2, float("inf"), "key 'episode_reward', row 2: non-finite"),
        ("env_reward", 1, "ten", "key 'env_reward', row 1: expected a number"),
        ("is_action_valid", 4, 2, "key 'is_action_valid', row 4: expected 0/1, got 2"),
        ("step_index", 5, 1.5, "key 'step_index', row 5: expected an integer"),
        ("uid", 2, 7, "key 'uid', row 2: expected a string"),
    ],
)
def test_bad_values_name_key_and_row(key, row, value, fragment):
    assert fragment in error_for(mutate(key, row, value))


def test_mask_not_zero_one():
    data = good()
    data["response_mask"][4][1] = 0.5
    assert "key 'response_mask', row 4: expected 0/1, got 0.5" in error_for(data)


def test_ragged_mask():
    data = good()
    data["response_mask"][2] = [1, 1]
    assert "key 'response_mask'" in error_for(data)


def test_non_finite_feature():
    data = good()
    data["phi_feats"][3][2] = float("nan")
    assert "key 'phi_feats', row 3: non-finite" in error_for(data)


def test_feature_row_count():
    data = good()
    data["phi_feats"] = data["phi_feats"][:4]
    assert "key 'phi_feats': expected 6 rows" in error_for(data)


def test_duplicate_step_index():
    assert error_for(mutate("step_index", 1, 0)) == (
        "b.json: key 'step_index', row 1: duplicate step_index 0 in trajectory 't1' (also row 0)"
    )


def test_missing_step_index():
    message = error_for(mutate("step_index", 1, 2))
    assert (
        message
        == "b.json: key 'step_index', row 1: trajectory 't1' jumps from step_index 0 to 2 (missing 1)"
    )


def test_trajectory_not_starting_at_zero():
    data = good()
    data["step_index"][4:6] = [1, 2]
    assert "key 'step_index', row 4: trajectory 't3' starts at step_index 1" in error_for(data)


def test_negative_step_index():
    assert "key 'step_index', row 0: negative step_index -1" in error_for(
        mutate("step_index", 0, -1)
    )


def test_trajectory_in_two_tasks():
    assert "key 'uid', row 3" in error_for(mutate("uid", 3, "elsewhere"))


def test_episode_reward_must_be_constant_in_a_trajectory():
    assert "key 'episode_reward', row 1" in error_for(mutate("episode_reward", 1, 0.0))


def test_padding_rows_may_duplicate_step_index():
    data = good()
    for key in data:
        data[key] = data[key] + [data[key][0]]
    data["is_pad"] = [False] * 6 + [True]
    batch = RolloutBatch.from_mapping(data)
    assert batch.is_pad.sum() == 1


def test_arm_with_active_features_needs_phi_feats():
    data = good()
    del data["phi_feats"]
    batch = RolloutBatch.from_mapping(data)
    with pytest.raises(InvalidInput) as caught:
        compute_advantages(batch, load_arm("global-successor"))
    assert str(caught.value).startswith(
        "key 'phi_feats': missing, and arm 'global-successor' needs it"
    )
    # inert features: no need for them
    assert compute_advantages(batch, load_arm("return-hard")).final.shape == (6,)


def test_bad_files(tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"uid": [\n"a",\n')
    with pytest.raises(InvalidInput, match=r"broken.json: line \d+: not valid JSON"):
        load_batch(broken)
    with pytest.raises(InvalidInput, match="must end in .json or .npz"):
        load_batch(tmp_path / "batch.csv")
    with pytest.raises(InvalidInput, match="no such file"):
        load_batch(tmp_path / "absent.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(InvalidInput, match="not a readable .npz"):
        load_batch(tmp_path / "junk.npz")


def test_npz_round_trip(tmp_path):
    batch = RolloutBatch.from_mapping(good())
    loaded = load_batch(save_batch(batch, tmp_path / "b.npz"))
    for key, value in batch.as_mapping().items():
        np.testing.assert_array_equal(getattr(loaded, key).astype(value.dtype), value, err_msg=key)


def test_npz_missing_key_names_file_and_key(tmp_path):
    batch = RolloutBatch.from_mapping(good())
    arrays = {
        k: (v.astype(str) if v.dtype == object else v)
        for k, v in batch.as_mapping().items()
        if k != "anchor_obs"
    }
    np.savez(tmp_path / "b.npz", **arrays)
    with pytest.raises(InvalidInput, match=r"b.npz: missing key 'anchor_obs'"):
        load_batch(tmp_path / "b.npz")
