"""Arms as data: every flag resolved, fingerprints, overrides, inert flags derived from the flags."""

from __future__ import annotations

import dataclasses

import pytest

from ccpo_cli.arms import (
    FLAG_NAMES,
    features_active,
    inert_flags,
    list_arms,
    load_arm,
    parse_set_options,
)
from ccpo_cli.errors import InvalidInput, UsageError

SPEC_FLAGS = (
    "gate target rho backoff_task backoff_rho jweight_c prior_kappa lk_fix lam_fix phi ctx_w whiten tau wmode "
    "shrink std std_floor step_norm edge_w ep_w step_advantage_w adv_mode gamma invalid_penalty min_traj success_reward"
).split()


def test_the_five_arms_exist_and_resolve_every_flag():
    assert list_arms() == sorted(
        ["grpo", "gigpo", "return-hard", "return-hard-fbjw", "global-successor"]
    )
    for name in list_arms():
        arm = load_arm(name)
        assert arm.name == name
        assert set(SPEC_FLAGS) <= set(arm.flags())


def test_seed_arm_flags_follow_spec_table():
    a, b, c = load_arm("return-hard"), load_arm("return-hard-fbjw"), load_arm("global-successor")
    assert (a.gate, a.target, a.rho, a.backoff_task, a.jweight_c, a.edge_w, a.tau, a.phi) == (
        "hard",
        "return",
        0.0,
        0,
        0.0,
        1.0,
        0.15,
        "hidden+ctx",
    )
    assert (b.backoff_task, b.jweight_c) == (1, 1.0)
    assert (
        dataclasses.replace(
            b, name=a.name, description=a.description, backoff_task=0, jweight_c=0.0
        ).fingerprint
        == a.fingerprint
    )
    assert (c.gate, c.target, c.rho, c.whiten, c.shrink) == ("global", "nextnode", 0.59, 3, "eb")
    assert load_arm("gigpo").estimator == "gigpo" and load_arm("grpo").estimator == "grpo"


def test_fingerprints_are_distinct_and_track_every_flag():
    fingerprints = {load_arm(name).fingerprint for name in list_arms()}
    assert len(fingerprints) == 5
    base = load_arm("return-hard")
    changed_values = {
        "estimator": "gigpo",
        "adv_mode": "mean_norm",
        "gamma": "0.9",
        "invalid_penalty": "0.2",
        "success_reward": "1",
        "ep_w": "2",
        "step_advantage_w": "0.5",
        "gate": "global",
        "target": "nextnode",
        "rho": "0.5",
        "backoff_task": "1",
        "backoff_rho": "0.25",
        "min_traj": "3",
        "jweight_c": "1",
        "prior_kappa": "2",
        "lk_fix": "0.5",
        "lam_fix": "1",
        "phi": "hidden",
        "ctx_w": "0.5",
        "whiten": "2",
        "tau": "1",
        "wmode": "hard",
        "shrink": "mse",
        "std": "local",
        "std_floor": "0.5",
        "step_norm": "none",
        "edge_w": "0",
        "step_permute": "1",
    }
    assert set(changed_values) | {"padding", "step_oracle"} == set(FLAG_NAMES)
    # padding = upstream exists only for grpo and gigpo, and step_oracle replaces gigpo's step term
    assert load_arm("gigpo", {"padding": "inert"}).fingerprint != load_arm("gigpo").fingerprint
    assert load_arm("gigpo", {"step_oracle": "1"}).fingerprint != load_arm("gigpo").fingerprint
    seen = {base.fingerprint}
    for flag, value in changed_values.items():
        changed = base.with_overrides({flag: value})
        assert changed.fingerprint not in seen, flag
        seen.add(changed.fingerprint)
        assert changed.overrides == ((flag, changed.flags()[flag]),)


def test_same_value_override_keeps_the_fingerprint():
    base = load_arm("return-hard")
    assert base.with_overrides({"rho": "0"}).fingerprint == base.fingerprint
    assert base.with_overrides({"lam_fix": ""}).fingerprint == base.fingerprint
    assert (
        load_arm("return-hard", {"lam_fix": "0.50"}).fingerprint
        == load_arm("return-hard", {"lam_fix": ".5"}).fingerprint
    )


def test_type_coercion():
    arm = load_arm("grpo", {"whiten": "2", "backoff_task": "true", "gamma": "1", "lk_fix": "0.25"})
    assert arm.whiten == 2 and isinstance(arm.whiten, int)
    assert (
        arm.backoff_task is True
        and arm.gamma == 1.0
        and isinstance(arm.gamma, float)
        and arm.lk_fix == 0.25
    )
    # The recorded form (fingerprints, runs.db, Hydra) is unchanged: 0/1 and a repr string.
    assert arm.flags()["backoff_task"] == 1 and arm.flags()["lk_fix"] == "0.25"
    assert load_arm("grpo").lk_fix is None and load_arm("grpo").flags()["lk_fix"] == ""


@pytest.mark.parametrize(
    "flag,value",
    [
        ("rho", "abc"),
        ("rho", "-1"),
        ("gamma", "1.5"),
        ("gate", "fuzzy"),
        ("whiten", "2.5"),
        ("tau", "0"),
        ("backoff_task", "2"),
        ("lam_fix", "half"),
        ("edge_w", "nan"),
        ("min_traj", "0"),
    ],
)
def test_bad_values_are_invalid_input(flag, value):
    with pytest.raises(InvalidInput) as caught:
        load_arm("return-hard", {flag: value})
    assert caught.value.exit_code == 3 and f"'{flag}'" in str(caught.value)


def test_unknown_flag_and_arm_are_usage_errors():
    with pytest.raises(UsageError, match="unknown flag 'bogus'"):
        parse_set_options(["bogus=1"])
    with pytest.raises(UsageError, match="expected KEY=VALUE"):
        parse_set_options(["rho"])
    with pytest.raises(UsageError, match="unknown arm 'nope'"):
        load_arm("nope")
    assert parse_set_options(["rho=0.5", "lam_fix="]) == {"rho": "0.5", "lam_fix": ""}


def test_inert_flags_of_the_seed_arms():
    a = inert_flags(load_arm("return-hard"))
    for flag in ("phi", "ctx_w", "whiten", "tau", "wmode", "shrink", "backoff_rho", "std_floor"):
        assert flag in a
    assert a["tau"].startswith("rho = 0 ⇒ λ ≡ 0")
    for flag in ("gate", "target", "edge_w", "jweight_c", "min_traj"):
        assert flag not in a
    c = inert_flags(load_arm("global-successor"))
    assert "rho" in c and "gate = global" in c["rho"]
    for flag in ("phi", "ctx_w", "whiten", "tau", "wmode"):
        assert flag not in c
    assert "backoff_task" in c
    grpo = inert_flags(load_arm("grpo"))
    assert "gamma" in grpo and "gate" in grpo and "adv_mode" not in grpo


def test_inert_flags_follow_overrides_not_names():
    active = load_arm("return-hard", {"rho": "0.59"})
    assert features_active(active)
    assert "tau" not in inert_flags(active) and "shrink" not in inert_flags(active)
    assert not features_active(load_arm("global-successor", {"lam_fix": "0"}))
    assert "tau" in inert_flags(load_arm("global-successor", {"lam_fix": "0"}))
    assert features_active(load_arm("return-hard", {"std": "local"}))
    assert "ctx_w" in inert_flags(load_arm("global-successor", {"phi": "hidden"}))
    assert "tau" in inert_flags(load_arm("global-successor", {"wmode": "cos"}))
    assert "prior_kappa" in inert_flags(load_arm("return-hard", {"lk_fix": "0.5"}))
    assert "success_reward" in inert_flags(load_arm("return-hard", {"edge_w": "0"}))
    assert "backoff_rho" in inert_flags(load_arm("return-hard", {"rho": "0.5"}))
    assert "backoff_rho" not in inert_flags(load_arm("return-hard-fbjw", {"rho": "0.5"}))
