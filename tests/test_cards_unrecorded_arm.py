"""A card names the estimator family its arm's recorded flags name, or says it is not recorded.

Before, `cards/method.py:estimator_family` guessed from the arm's name and answered "ccpo" for
anything it did not recognise, so a run ingested as `verl-gigpo` or `baseline` (no flags
recorded) was described on its card as trained with CCPO.
"""

from __future__ import annotations

import pytest

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, render_card
from ccpo_cli.cards.method import NOT_RECORDED, estimator_family
from ccpo_cli.store.identity import ExternalArm

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _run(db, name, arm):
    store.ensure_run(
        db,
        name,
        arm=ExternalArm(arm),
        seed=0,
        base_model=MODEL,
        total_steps=150,
        benchmark="alfworld",
    )
    for index, step in enumerate(range(70, 120, 5)):
        store.record_evaluation(
            db, name, step, success_rate=70 + (-1) ** index * 3, episodes=128, temperature=0.4
        )


@pytest.mark.parametrize("arm", ["verl-gigpo", "baseline"])
def test_a_run_whose_arm_flags_are_not_recorded_is_not_described_as_ccpo(tmp_path, arm):
    db = store.open_db(tmp_path / "runs.db")
    _run(db, "run", arm)
    context = build_card_context(db, "run")
    text = render_card(context)
    assert "CCPO" not in text  # neither the method's name nor its paragraph
    assert "Context-Conditioned" not in text
    assert "not recorded" in text and "estimator" in text


def test_a_registry_arm_keeps_the_family_its_flags_name(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    _run(db, "rh", "return-hard")
    text = render_card(build_card_context(db, "rh"))
    assert "CCPO (Context-Conditioned Policy Optimization)" in text


def test_the_family_comes_from_the_flags_never_from_the_name():
    assert estimator_family("verl-gigpo", {}) == NOT_RECORDED
    assert estimator_family("grpo-old", {}) == NOT_RECORDED
    assert estimator_family("baseline", {"estimator": "grpo"}) == "grpo"
    assert estimator_family("anything", {"estimator": "ccpo"}) == "ccpo"
    assert estimator_family("verl-agent:gigpo", {"adv_estimator": "gigpo"}) == "gigpo"
