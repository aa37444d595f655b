"""`ccpo card` for a run of the local CPU backend: a small policy trained from scratch, no Hub base model."""

from __future__ import annotations

import json
import re

import pytest
from huggingface_hub import ModelCard
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, lint_card, render_card
from ccpo_cli.cards.baselines import load_baseline_data
from ccpo_cli.cli.app import app
from ccpo_cli.store.identity import ExternalArm

pytestmark = pytest.mark.usefixtures("no_network")

LOCAL_MODEL = "ccpo-local-hashed-ngram-policy"
PANEL_IDS = [
    "pick_and_place_simple-Apple-None-GarbageCan-0054/trial_heldout_s0",
    "look_at_obj_in_light-AlarmClock-None-FloorLamp-0061/trial_heldout_s0",
    "pick_clean_then_place_in_recep-Apple-None-StoveBurner-0074/trial_heldout_s0",
    "pick_heat_then_place_in_recep-Apple-None-Shelf-0045/trial_heldout_s0",
    "pick_cool_then_place_in_recep-Apple-None-CounterTop-0124/trial_heldout_s0",
    "pick_two_obj_and_place-Apple-None-DiningTable-0059/trial_heldout_s0",
]
# The shape `ccpo train --backend local` records (taken from a real tiny run).
LOCAL_CONFIG = {
    "backend": "local",
    "run_dir": "/tmp/somewhere/ccpo-runs/local-rh",
    "arm": {
        "name": "return-hard",
        "fingerprint": "4b61f962",
        "flags": {"estimator": "ccpo", "gamma": 0.95},
    },
    "train": {
        "steps": 50,
        "tasks": 4,
        "group": 8,
        "max_steps": 50,
        "eval_every": 10,
        "eval_games": 6,
        "eval_temperature": 0.4,
        "eval_episodes": 1,
        "eval_games_dir": None,
        "train_games_dir": None,
        "seed": 0,
        "temperature": 1.0,
        "time_budget_s": None,
        "workers": 2,
        "update": {
            "learning_rate": 0.01,
            "kl_coef": 0.02,
            "entropy_coef": 0.01,
            "clip_ratio": 0.2,
            "epochs": 2,
            "max_grad_norm": 1.0,
        },
        "model": {"dim": 32, "hidden": 64, "init_std": 0.3},
    },
    "training_pool": {
        "games": 600,
        "source": "shipped training pool (configs/games/pool-manifest.json)",
    },
    "eval_panel": {
        "games": 6,
        "panel_games": 128,
        "game_ids": PANEL_IDS,
        "source": "shipped held-out panel (configs/games/heldout-manifest.json)",
        "subset": "fixed type-balanced subset: 6 of the 128 panel games",
    },
}
SUCCESS = {
    0: 0.0,
    10: 16.7,
    20: 33.3,
    30: 50.0,
    40: 33.3,
    50: 66.7,
}  # window (step >= 20): mean 45.8


@pytest.fixture
def local_db(tmp_path):
    path = tmp_path / "runs.db"
    db = store.open_db(path)
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
    for step, rate in SUCCESS.items():
        store.record_evaluation(
            db,
            "local-rh",
            step,
            success_rate=rate,
            episodes=6,
            temperature=0.4,
            mean_turns=50.0 - step * 0.4,
            train_success_rate=None if step == 0 else rate,
        )
    return path


def table_row(text: str, *cells: str) -> bool:
    pattern = r"^\|\s*" + r"\s*\|\s*".join(re.escape(cell) for cell in cells) + r"\s*\|$"
    return re.search(pattern, text, re.MULTILINE) is not None


@pytest.fixture
def local_card(local_db, tmp_path):
    out = tmp_path / "card" / "README.md"
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(local_db),
            "card",
            "--run",
            "local-rh",
            "--window-start",
            "20",
            "--status",
            "final",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    return out


def test_local_card_renders_parses_and_passes_the_lint(local_card):
    text = local_card.read_text()
    card = ModelCard(text)
    metadata = card.data.to_dict()
    assert "base_model" not in metadata and "base_model_relation" not in metadata
    assert card.data.base_model is None
    assert lint_card(text) == []
    assert "None" not in text
    assert card.data.eval_results[0].metric_value == 45.8
    assert table_row(text, "held-out success", "45.8%")
    assert table_row(text, "evaluations averaged", "4")
    assert "trained-from-scratch" in card.data.tags and "verl-agent" not in card.data.tags
    assert card.data.library_name != "transformers"


def test_local_card_says_what_it_is_and_how_to_use_it(local_card):
    text = local_card.read_text()
    assert "trained from scratch on CPU with ccpo's local backend" in text
    assert "generated ALFWorld games" in text
    assert "not a fine-tune" in text
    assert "huggingface.co/" + LOCAL_MODEL not in text
    assert "ccpo eval --agent local --model <run folder>" in text
    assert "AutoModelForCausalLM" not in text
    assert "Built on verl-agent" not in text


def test_local_card_setup_table_comes_from_the_local_config(local_card):
    text = local_card.read_text()
    assert table_row(text, "batch", "4 tasks x 8 rollouts = 32 episodes/step")
    assert table_row(text, "max env steps", "50 per episode")
    assert table_row(text, "learning rate", "0.01")
    assert table_row(text, "KL coef", "0.02")
    assert table_row(
        text, "eval", "6 held-out games of the 128-game panel, temperature 0.4, every 10 steps"
    )
    assert table_row(text, "eval panel", "fixed type-balanced subset: 6 of the 128 panel games")
    assert "run_dir: (local path, not published)" in text
    summary = json.loads((local_card.parent / "results" / "ccpo_summary.json").read_text())
    assert summary["eval_panel_game_ids"] == PANEL_IDS
    assert summary["base_model"] is None and summary["trained_from_scratch"] is True


def test_local_card_calls_every_published_row_not_comparable(local_card):
    text = local_card.read_text()
    rows = re.findall(
        r"^\| .* \| (no: different model and protocol|yes|no: [^|]*) \|$", text, re.MULTILINE
    )
    assert rows and set(rows) == {"no: different model and protocol"}
    assert "Different model and different protocol" in text


def test_local_license_is_the_projects_stated_as_such_not_a_base_model_record(local_db):
    assert LOCAL_MODEL not in load_baseline_data().base_model_licenses
    text = render_card(
        build_card_context(store.open_db(local_db), "local-rh", window_start=20, status="final")
    )
    assert ModelCard(text).data.license == "apache-2.0"
    assert "License: Apache-2.0, ccpo's own license" in text
    # A license the run recorded still wins.
    db = store.open_db(local_db)
    store.ensure_run(db, "local-rh", config=dict(LOCAL_CONFIG, license="mit"))
    text = render_card(build_card_context(db, "local-rh", window_start=20, status="final"))
    assert ModelCard(text).data.license == "mit" and "ccpo's own license" not in text


def test_lint_still_requires_lineage_unless_the_card_is_tagged_from_scratch(local_card):
    text = local_card.read_text()
    untagged = text.replace("- trained-from-scratch\n", "")
    assert any("base_model is missing" in p for p in lint_card(untagged))
    with_lineage = text.replace(
        "library_name: pytorch", "base_model_relation: finetune\nlibrary_name: pytorch"
    )
    assert any("base_model_relation is set" in p for p in lint_card(with_lineage))
