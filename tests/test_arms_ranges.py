"""Every numeric arm flag has a range, declared with its type, that keeps the
estimator finite; a value outside it is refused (exit 3) naming the range, and ranges leave the
shipped fingerprints alone.

Asked for in issue 21, case 5.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers_estimators import random_batch
from helpers_hostile import assert_refused, invoke

from ccpo_cli.arms import FLAG_SPECS, list_arms, load_arm
from ccpo_cli.batch_io import MAX_ABS_VALUE
from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimators import compute_advantages
from ccpo_cli.estimators.batch import RolloutBatch

NUMERIC = [spec for spec in FLAG_SPECS if spec.kind in (int, float)]


def test_every_numeric_flag_declares_a_range():
    assert NUMERIC and all(spec.bounds is not None for spec in NUMERIC), [
        s.name for s in NUMERIC if s.bounds is None
    ]
    assert all(spec.bounds is None for spec in FLAG_SPECS if spec not in NUMERIC)


def _extreme_batch(seed: int, scale: float) -> RolloutBatch:
    """A random batch with rewards and features blown up to the largest size a batch may hold."""
    batch = random_batch(seed, n_tasks=2, trajectories=4, max_turns=5, n_obs=3, pad_rows=2)
    data = {
        key: getattr(batch, key)
        for key in (
            "uid",
            "traj_uid",
            "anchor_obs",
            "step_index",
            "env_reward",
            "is_action_valid",
            "episode_reward",
            "response_mask",
            "is_pad",
        )
    }
    data["env_reward"] = data["env_reward"] * scale
    data["episode_reward"] = data["episode_reward"] * scale
    features = batch.phi_feats / np.max(np.abs(batch.phi_feats))
    data["phi_feats"] = (features * min(scale, MAX_ABS_VALUE)).astype(np.float32)
    return RolloutBatch.from_mapping(data, source="extreme batch")


BATCHES = [_extreme_batch(0, 1.0), _extreme_batch(1, MAX_ABS_VALUE / 10), _extreme_batch(2, 1e-6)]


def _all_finite(arm) -> list[str]:
    problems = []
    for index, batch in enumerate(BATCHES):
        result = compute_advantages(batch, arm)
        if not np.isfinite(result.advantages).all() or not np.isfinite(result.final).all():
            problems.append(f"batch {index}")
    return problems


@pytest.mark.parametrize("spec", NUMERIC, ids=lambda spec: spec.name)
def test_each_end_of_each_range_keeps_every_arm_finite(spec):
    low, high = spec.bounds
    for name in list_arms():
        base = load_arm(name)
        for value in (low, high):
            typed = spec.kind(value)
            arm = base.with_overrides({spec.name: typed})
            assert not _all_finite(arm), (name, spec.name, value, _all_finite(arm))


@pytest.mark.parametrize("end", [0, 1])
def test_every_flag_at_the_same_end_at_once_stays_finite(end):
    for name in ("return-hard", "global-successor", "return-hard-fbjw"):
        overrides = {spec.name: spec.kind(spec.bounds[end]) for spec in NUMERIC}
        for variant in (
            {},
            {"std": "local", "edge_w": 1000.0 if end else 0.0, "target": "nextnode"},
            {"lam_fix": None, "lk_fix": None, "rho": 1000.0 if end else 0.0, "shrink": "mse"},
        ):
            arm = load_arm(name).with_overrides(
                {**overrides, **{k: v for k, v in variant.items() if v is not None}}
            )
            if variant.get("lam_fix", 1) is None:
                arm = dataclasses.replace(arm, lam_fix=None, lk_fix=None)
            assert not _all_finite(arm), (name, end, variant)


@pytest.mark.parametrize("spec", NUMERIC, ids=lambda spec: spec.name)
def test_a_value_beyond_either_end_is_refused_naming_the_range(spec):
    low, high = spec.bounds
    for outside in (high * 10 + 1, low - max(1.0, abs(low))):
        text = str(int(outside)) if spec.kind is int else repr(float(outside))
        with pytest.raises(InvalidInput) as caught:
            load_arm("return-hard", {spec.name: text})
        assert spec.requirement in str(caught.value) and f"'{spec.name}'" in str(caught.value)


def test_set_ep_w_1e308_is_refused_by_estimate_and_train(tmp_path):
    example = Path(__file__).resolve().parent.parent / "examples" / "worked-example-1.json"
    assert_refused(
        invoke("estimate", "--arm", "grpo", "--input", example, "--set", "ep_w=1e308"),
        3,
        "ep_w",
        "in [-1000, 1000]",
    )
    db = tmp_path / "runs.db"
    assert_refused(
        invoke(
            "--db",
            db,
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--set",
            "ep_w=1e308",
            "--steps",
            "1",
        ),
        3,
        "ep_w",
        "in [-1000, 1000]",
    )
    assert not (tmp_path / "ccpo-runs").exists()


def test_an_arm_built_directly_is_range_checked_too():
    with pytest.raises(InvalidInput, match="flag 'ep_w' = 1e\\+308 must be in"):
        dataclasses.replace(load_arm("grpo"), ep_w=1e308)


def test_the_estimator_page_lists_every_range():
    page = (Path(__file__).resolve().parent.parent / "docs" / "estimators.md").read_text(
        encoding="utf-8"
    )
    for spec in NUMERIC:
        kind = spec.kind.__name__ + (" or unset" if spec.optional else "")
        assert f"| `{spec.name}` | {kind} | {spec.requirement[3:]} |" in page, spec.name
