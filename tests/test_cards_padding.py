"""The card states the arm's padding rule (part of its fingerprint) and what the rule means."""

from __future__ import annotations

import pytest
from helpers_cards import add_run
from test_cards_local import LOCAL_CONFIG, LOCAL_MODEL

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, lint_card, render_card
from ccpo_cli.store.identity import ExternalArm

pytestmark = pytest.mark.usefixtures("no_network")


def this_arm_section(text: str) -> str:
    return text.split("<!-- ccpo:begin this-arm -->")[1].split("<!-- ccpo:end this-arm -->")[0]


def verl_card(tmp_path, run: str, arm: str) -> str:
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, run, arm, mean=80.0, sd=5.0, n=10, best=90.0)
    return render_card(build_card_context(db, run))


def test_a_gigpo_card_states_the_upstream_rule(tmp_path):
    text = verl_card(tmp_path, "gigpo-run", "gigpo")
    section = this_arm_section(text)
    assert (
        "Padding rule `upstream`: padding copies of rows (`is_pad`) count in the group statistics "
        "and are trained on, as verl-agent's own GRPO and GiGPO do."
    ) in section
    assert lint_card(text) == []


def test_a_return_hard_card_states_the_inert_rule(tmp_path):
    text = verl_card(tmp_path, "rh-run", "return-hard")
    section = this_arm_section(text)
    assert (
        "Padding rule `inert`: padding copies of rows (`is_pad`) enter no statistic and get advantage 0."
        in section
    )
    assert "upstream" not in section
    assert lint_card(text) == []


def test_a_local_card_says_the_rule_changes_nothing_there(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db,
        "local-rh",
        arm=ExternalArm("return-hard"),
        seed=0,
        base_model=LOCAL_MODEL,
        total_steps=50,
        benchmark="alfworld",
        hardware="x86_64 cpu x2 (Linux)",
        backend="local",
        data_order_seed=0,
        config=LOCAL_CONFIG,
    )
    store.update_run_state(
        db, "local-rh", status="finished", last_step=50, step1_rollout_hash="abc"
    )
    for step in range(0, 60, 10):
        store.record_evaluation(
            db, "local-rh", step, success_rate=step, episodes=6, temperature=0.4, mean_turns=40.0
        )
    text = render_card(build_card_context(db, "local-rh", status="final", window_start=20))
    assert (
        "Padding rule `inert`: padding copies of rows (`is_pad`) enter no statistic and get advantage 0; "
        "the local backend adds no padding copies, so the rule changes nothing in this run."
    ) in this_arm_section(text)
    assert lint_card(text) == []


def test_an_unknown_arm_without_a_recorded_rule_says_so(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "old", "an-arm-this-version-does-not-know", mean=80.0, sd=5.0, n=10, best=90.0)
    text = render_card(build_card_context(db, "old"))
    assert "Padding rule not recorded (the run predates the padding flag" in this_arm_section(text)
    assert lint_card(text) == []
