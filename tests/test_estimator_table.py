"""The estimator table (`ccpo_cli/estimator_registry.py`) is the one list of ccpo's estimators:
every entry is reachable from the arm flag and the arm files, computes what it computed before
the table existed, and no other module restates the list."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest
from helpers_estimators import literal_advantages, random_batch
from typer.testing import CliRunner

import ccpo_cli
from ccpo_cli import estimator_registry
from ccpo_cli.arms import FLAG_SPECS, inert_flags, list_arms, load_arm
from ccpo_cli.cards.method import METHOD_NAMES, estimator_family
from ccpo_cli.cli.app import app
from ccpo_cli.estimators import compute_advantages

PACKAGE_DIR = Path(ccpo_cli.__file__).parent
ROOT = PACKAGE_DIR.parent
NAMES = estimator_registry.ESTIMATOR_NAMES


def test_the_arm_flag_offers_exactly_the_registered_estimators_in_table_order():
    (spec,) = [spec for spec in FLAG_SPECS if spec.name == "estimator"]
    assert spec.choices == NAMES


def test_every_registered_estimator_has_a_compute_function_and_consistent_properties():
    for entry in estimator_registry.ESTIMATORS:
        assert callable(entry.compute), entry.name
        # A step term over anchor states is what a step-level estimator here is; features
        # only ever refine a step term.
        assert entry.anchor_state == entry.step_level, entry.name
        assert not entry.features or entry.step_level, entry.name
        known = {spec.name for spec in FLAG_SPECS}
        assert entry.reads is None or set(entry.reads) <= known, entry.name
        assert entry.family in METHOD_NAMES and entry.family in estimator_registry.FAMILIES


def test_every_registered_estimator_is_reachable_from_an_arm_file_and_the_cli():
    by_estimator: dict[str, list[str]] = {}
    for name in list_arms():
        by_estimator.setdefault(load_arm(name).estimator, []).append(name)
    assert set(by_estimator) == set(NAMES), "an arm file names no estimator the table lacks"
    runner = CliRunner()
    for estimator in NAMES:
        arm = by_estimator[estimator][0]
        outcome = runner.invoke(
            app, ["estimate", "--arm", arm, "--input", str(ROOT / "examples/worked-example-1.json")]
        )
        assert outcome.exit_code == 0, outcome.output
        document = json.loads(outcome.stdout)
        assert document["arm"] == arm
        # The card names the family the table gives the arm's estimator.
        flags = load_arm(arm).flags()
        assert estimator_family(arm, flags) == estimator_registry.lookup(estimator).family


def test_the_padding_rule_and_inert_flags_follow_the_table():
    for name in list_arms():
        arm = load_arm(name)
        entry = estimator_registry.lookup(arm.estimator)
        if entry.reads is not None:
            unread = [flag for flag in arm.flags() if flag not in entry.reads]
            assert set(unread) <= set(inert_flags(arm)), name
        if not entry.upstream:
            with pytest.raises(Exception, match="no upstream rule"):
                arm.with_overrides({"padding": "upstream"})


# ---- nothing else lists the estimators --------------------------------------------------------


def _restatements(path: Path, root: Path = ROOT) -> list[str]:
    """Literal collections in `path` holding two or more estimator names (a tuple, list or set of
    them, a Literal[...] of them, or a dict keyed by them)."""
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [key for key in node.keys if key is not None]
        else:
            continue
        named = {
            item.value
            for item in items
            if isinstance(item, ast.Constant) and isinstance(item.value, str)
        } & set(NAMES)
        if len(named) >= 2:
            found.append(f"{path.relative_to(root)}:{node.lineno}: {sorted(named)}")
    return found


def test_no_module_outside_the_table_lists_the_estimators():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        if path.name == "estimator_registry.py" and path.parent == PACKAGE_DIR:
            continue
        found.extend(_restatements(path))
    assert found == [], "read ccpo_cli/estimator_registry.py instead:\n" + "\n".join(found)


def test_the_scan_sees_the_forms_that_were_removed(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        'UPSTREAM = ("grpo", "gigpo")\n'
        'x: Literal["grpo", "gigpo", "ccpo"]\n'
        'SHORT = {"grpo": "GRPO", "gigpo": "GiGPO"}\n'
        'ok = ("grpo",)\n',
        encoding="utf-8",
    )
    assert len(_restatements(sample, tmp_path)) == 3


# ---- the same advantages as before the table ---------------------------------------------------

# Per-row final advantages of each shipped arm on one small batch, computed by the code before
# the table (commit 1843fc3) and rounded to 6 decimals; the "+upstream" rows are grpo and gigpo
# under `padding = upstream` on the same batch with three padding copies.
BEFORE = {
    "gigpo": [-2.080909, -1.637838, -1.656489, -0.223635, 1.598903, 1.422069, 0.935397,
              1.642503, 1.227682, 1.199544, -2.445658, -2.445614, 1.227682, 1.236364],
    "global-successor": [-1.417449, -1.91963, -1.95621, -1.85357, 1.764838, 2.143928, 0.972285,
                         2.265807, 0.638592, 1.245147, -1.534154, -2.937712, 0.57892, 2.009207],
    "grpo": [-0.930731, -0.930731, -0.949393, -0.930731, 0.935397, 0.935397, 0.935397,
             0.935397, 0.650332, 0.630919, -1.290958, -1.290958, 0.650332, 0.650332],
    "return-hard": [-1.92419, -2.063899, -1.014971, -0.99631, 1.542576, 1.374225, -0.294503,
                    2.016014, 1.22323, 1.332622, -2.437579, -2.711637, 1.22323, 1.370135],
    "return-hard-fbjw": [-1.892432, -1.826549, -1.877527, -1.847749, 1.879564, 1.67271,
                         1.73082, 2.161164, 1.197045, 1.353415, -2.385567, -2.752044, 1.197045,
                         1.390105],
    "grpo+upstream": [-0.930731, -0.930731, -0.949393, -0.930731, 0.935397, 0.935397, 0.935397,
                      0.935397, 0.510427, 0.487685, -1.763752, -1.763752, 0.510427, 0.510427,
                      0.510427, 0.487685, 0.510427],
    "gigpo+upstream": [-2.080909, -1.637838, -1.656489, -0.223635, 1.598903, 1.422069,
                       0.935397, 1.642503, 1.010427, 0.923634, -3.263752, -3.552494, 1.010427,
                       0.968848, 0.968848, 0.923634, 1.010427],
}  # fmt: skip


def _small_batch(pad_rows: int = 0):
    return random_batch(
        7, n_tasks=2, trajectories=3, max_turns=4, d=6, response_length=3, pad_rows=pad_rows
    )


@pytest.mark.parametrize("case", sorted(BEFORE))
def test_each_estimator_computes_the_advantages_it_computed_before(case):
    name, _, rule = case.partition("+")
    arm = load_arm(name, {"padding": rule} if rule else None)
    batch = _small_batch(pad_rows=3 if rule else 0)
    result = compute_advantages(batch, arm)
    np.testing.assert_allclose(result.final, BEFORE[case], rtol=0, atol=2e-6)
    np.testing.assert_array_equal(
        result.advantages, (result.final[:, None] * batch.response_mask).astype(np.float32)
    )
    if not rule:  # and, for the real rows, what the spec text says (tests/helpers_estimators.py)
        np.testing.assert_allclose(result.final, literal_advantages(batch, arm), rtol=0, atol=2e-5)


def test_every_registered_estimator_is_covered_by_the_before_values():
    covered = {load_arm(case.partition("+")[0]).estimator for case in BEFORE}
    assert covered == set(NAMES)
