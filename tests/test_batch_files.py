"""`ccpo_cli/batch_io.py` is the one writer and the one reader of batch files: what
`save_batch` writes, every caller that reads batch files (`ccpo estimate`, the testbed's batch
diagnostics, a trainer's dump read back) gets back unchanged, and no other module of the package
reads or writes numpy files."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from helpers_estimators import random_batch
from typer.testing import CliRunner

import ccpo_cli
from ccpo_cli.arms import load_arm
from ccpo_cli.backends.local.advantages import advantages_for
from ccpo_cli.batch_io import load_batch, load_dumped_batch, save_batch
from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimators import compute_advantages
from ccpo_cli.estimators.batch import BATCH_KEYS
from ccpo_cli.experiments.batch_diagnostics import (
    advantage_overlap,
    batch_structure,
    step_term_overlap,
)

PACKAGE_DIR = Path(ccpo_cli.__file__).parent


def _dumped(tmp_path: Path, suffix: str):
    """A batch with features, invalid turns and padding copies, written with the advantages the
    gigpo arm gives it, as the CPU trainer dumps a step."""
    batch = random_batch(5, n_tasks=3, trajectories=4, max_turns=5, d=4, pad_rows=2)
    trained = advantages_for(batch, load_arm("gigpo"))
    return batch, trained, save_batch(batch, tmp_path / f"step-000001{suffix}", advantages=trained)


def _same_batch(a, b) -> None:
    for key in BATCH_KEYS:
        left, right = getattr(a, key), getattr(b, key)
        assert (left is None) == (right is None), key
        if left is not None:
            assert left.dtype == right.dtype and left.shape == right.shape, key
            np.testing.assert_array_equal(left, right, err_msg=key)


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_the_writer_and_the_reader_round_trip_a_batch_and_its_advantages(tmp_path, suffix):
    batch, trained, path = _dumped(tmp_path, suffix)
    loaded, advantages = load_dumped_batch(path)
    _same_batch(batch, loaded)
    np.testing.assert_array_equal(advantages, trained)
    _same_batch(batch, load_batch(path))  # the estimate reader ignores the stored advantages
    assert load_dumped_batch(save_batch(batch, tmp_path / f"plain{suffix}"))[1] is None


@pytest.mark.parametrize("suffix", [".npz", ".json"])
def test_ccpo_estimate_reads_a_dump_and_reproduces_its_advantages(tmp_path, suffix):
    _, trained, path = _dumped(tmp_path, suffix)
    outcome = CliRunner().invoke(app, ["estimate", "--arm", "gigpo", "--input", str(path)])
    assert outcome.exit_code == 0, outcome.output
    estimated = np.asarray(json.loads(outcome.stdout)["advantages"], dtype=np.float64)
    # every valid token of a row carries the row's advantage; the first token is always valid
    np.testing.assert_allclose(estimated[:, 0], trained, rtol=0, atol=1e-7)


def test_the_batch_diagnostics_read_a_dump_as_the_batch_in_memory(tmp_path):
    batch, _, npz = _dumped(tmp_path, ".npz")
    json_dir = tmp_path / "json"
    json_dir.mkdir()
    _, _, as_json = _dumped(json_dir, ".json")
    # Both file forms give the same answers...
    for diagnostic in (batch_structure, step_term_overlap, advantage_overlap):
        assert diagnostic([npz]) == diagnostic([as_json]), diagnostic.__name__
    # ... and they are the batch's own: the overlap's terms from the batch in memory.
    episode = compute_advantages(batch, load_arm("grpo")).final.astype(np.float64)
    step = compute_advantages(batch, load_arm("gigpo", {"ep_w": 0.0})).final.astype(np.float64)
    found = step_term_overlap([npz])
    assert found["rows"] == batch.n_rows
    assert found["correlation"] == pytest.approx(float(np.corrcoef(episode, step)[0, 1]))
    assert batch_structure([npz])["batches"] == 1


def test_a_dump_whose_advantages_do_not_fit_the_batch_is_refused(tmp_path):
    batch, trained, _ = _dumped(tmp_path, ".npz")
    with pytest.raises(InvalidInput, match="key 'advantages'"):
        save_batch(batch, tmp_path / "bad.npz", advantages=trained[:-1])
    arrays = {
        key: value.astype(str) if value.dtype == object else value
        for key, value in batch.as_mapping().items()
    }
    np.savez(tmp_path / "short.npz", advantages=trained[:3], **arrays)
    with pytest.raises(InvalidInput, match=r"short.npz: key 'advantages'"):
        load_dumped_batch(tmp_path / "short.npz")


# Numpy's file functions: what a second reader or writer of batch files would call.
_NUMPY_FILE_IO = {"load", "save", "savez", "savez_compressed", "loadtxt", "savetxt", "fromfile"}


def _numpy_file_calls(path: Path) -> list[str]:
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    numpy_names = {"np", "numpy"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "numpy":
            found.extend(
                f"{path.name}:{node.lineno}: from numpy import {alias.name}"
                for alias in node.names
                if alias.name in _NUMPY_FILE_IO
            )
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _NUMPY_FILE_IO
            and isinstance(node.value, ast.Name)
            and node.value.id in numpy_names
        ) or (isinstance(node, ast.Attribute) and node.attr == "tofile"):
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_but_batch_io_reads_or_writes_batch_files():
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path == PACKAGE_DIR / "batch_io.py":
            continue
        calls = _numpy_file_calls(path)
        if calls:
            found[path.relative_to(PACKAGE_DIR.parent).as_posix()] = calls
    assert found == {}, f"batch files are read and written by ccpo_cli/batch_io.py only: {found}"
    # The scan sees what batch_io itself does.
    assert _numpy_file_calls(PACKAGE_DIR / "batch_io.py")
