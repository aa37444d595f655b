"""`ccpo estimate` reads bounded, real, in-range input.

Asked for in issue 12, cases 7 (estimate), 8 and 9.
"""

from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from helpers_hostile import assert_refused, invoke

from ccpo_cli import batch_io

EX1 = Path(__file__).resolve().parent.parent / "examples" / "worked-example-1.json"


def example() -> dict:
    return json.loads(EX1.read_text())


def as_npz(data: dict, path: Path, **replace) -> Path:
    arrays = {key: np.asarray(value) for key, value in data.items()}
    arrays.update(replace)
    np.savez_compressed(path, **arrays)
    return path


def estimate(batch: Path, *extra):
    return invoke("estimate", "--arm", "return-hard", "--input", batch, *extra)


def test_output_into_a_missing_folder_or_onto_a_folder(tmp_path):
    assert_refused(estimate(EX1, "--output", tmp_path / "absent" / "out.json"), 3, "does not exist")
    (tmp_path / "out.json").mkdir()
    assert_refused(estimate(EX1, "--output", tmp_path / "out.json"), 3, "is a folder")
    (tmp_path / "plain").mkdir()
    assert_refused(estimate(EX1, "--output", tmp_path / "plain"), 3, "is a folder")


@pytest.mark.parametrize("value", [1e30, 2**63, -(2**40)])
def test_step_index_out_of_range(tmp_path, value):
    data = example()
    data["step_index"][3] = value
    path = tmp_path / "b.json"
    path.write_text(json.dumps(data))
    assert_refused(estimate(path), 3, "step_index", "row 3", "out of range")


def test_json_nested_too_deep(tmp_path):
    path = tmp_path / "deep.json"
    depth = max(200_000, sys.getrecursionlimit() * 10)
    path.write_text("[" * depth + "]" * depth)
    assert_refused(estimate(path), 3, "nested too deeply")


def test_npz_header_claiming_10_to_the_12_elements_is_refused_before_reading(tmp_path):
    path = tmp_path / "huge.npz"
    as_npz(example(), path)
    fresh = tmp_path / "claim.npz"
    with (
        zipfile.ZipFile(path) as source,
        zipfile.ZipFile(fresh, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            if info.filename != "env_reward.npy":
                target.writestr(info.filename, source.read(info))
        with target.open("env_reward.npy", "w") as member:
            np.lib.format.write_array_header_1_0(
                member, {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
            )
            member.write(b"\0" * 4096)
    line = assert_refused(estimate(fresh), 3, "env_reward", "refused before reading")
    assert str(batch_io.MAX_BATCH_BYTES) in line


def test_deflated_npz_expanding_past_the_limit_is_refused(tmp_path, monkeypatch):
    # The same check as a 400 KB archive that inflates to gigabytes, at a scale a test can build.
    monkeypatch.setattr(batch_io, "MAX_BATCH_BYTES", 1 << 20)
    data = example()
    path = as_npz(
        data, tmp_path / "bomb.npz", response_mask=np.zeros((6, 40_000), dtype=np.float64)
    )
    assert path.stat().st_size < 20_000
    assert_refused(estimate(path), 3, "response_mask", "refused before reading")


def test_rewards_that_overflow_float32_are_refused(tmp_path):
    data = example()
    data["env_reward"][1] = 1e308
    path = tmp_path / "big.json"
    path.write_text(json.dumps(data))
    assert_refused(estimate(path), 3, "env_reward", "row 1", "out of range")
    npz = as_npz(example(), tmp_path / "big.npz", episode_reward=np.full(6, 1e308))
    assert_refused(estimate(npz), 3, "episode_reward", "out of range")


def test_complex_rewards_are_refused(tmp_path):
    npz = as_npz(
        example(), tmp_path / "c.npz", env_reward=np.array([0, 10 + 1j, 0, 0, 0, 0], dtype=complex)
    )
    assert_refused(estimate(npz), 3, "env_reward", "complex")


def test_an_ordinary_batch_still_estimates(tmp_path):
    result = estimate(as_npz(example(), tmp_path / "ok.npz"), "--output", tmp_path / "out.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out.json").read_text())["arm"] == "return-hard"
