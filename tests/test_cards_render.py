"""`ccpo card`: the seed card's numbers and caveats, computed from a runs.db."""

from __future__ import annotations

import json
import re

import pytest
from helpers_cards import BASE_MODEL, SHARED_CONFIG, add_run, seed_card_db
from huggingface_hub import ModelCard
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, lint_card, render_card
from ccpo_cli.cards.baselines import load_baseline_data, published_comparison
from ccpo_cli.cards.fences import merge_into_remote, regions
from ccpo_cli.cards.lint import TOO_FEW_TAG
from ccpo_cli.cli.app import app

pytestmark = pytest.mark.usefixtures("no_network")


def run_card(db_path, *args):
    result = CliRunner().invoke(app, ["--db", str(db_path), "card", *args])
    return result


@pytest.fixture(scope="module")
def seed_db(tmp_path_factory):
    path = tmp_path_factory.mktemp("seed") / "runs.db"
    db = seed_card_db(path)
    # The seed card publishes the best checkpoint so far: its upload is recorded as landed (a card
    # names only landed weights, cards/evidence.named_checkpoint).
    store.record_publication(
        db,
        "return-hard",
        "SingleBicycle/ccpo-alfworld-qwen2.5-7b-return-hard",
        commit_id="0" * 40,
        status="interim",
        checkpoint_step=115,
    )
    return path


@pytest.fixture(scope="module")
def interim_card(seed_db, tmp_path_factory):
    out = tmp_path_factory.mktemp("card") / "README.md"
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(seed_db),
            "card",
            "--run",
            "return-hard",
            "--status",
            "interim",
            "--output",
            str(out),
            "--repo-id",
            "SingleBicycle/ccpo-alfworld-qwen2.5-7b-return-hard",
        ],
    )
    assert result.exit_code == 0, result.output
    return out


def table_row(text: str, *cells: str) -> bool:
    pattern = r"^\|\s*" + r"\s*\|\s*".join(re.escape(cell) for cell in cells) + r"\s*\|$"
    return re.search(pattern, text, re.MULTILINE) is not None


def test_interim_card_states_the_window_the_best_row_and_the_bias(interim_card):
    text = interim_card.read_text()
    assert table_row(text, "held-out success", "83.5%")
    assert table_row(text, "standard deviation", "6.5")
    assert table_row(text, "evaluations averaged", "10")
    assert "Best single evaluation, step 115" in text
    assert table_row(text, "93.8", "12.5", "100.0", "84.5", "96.7", "87.5", "83.8", "96.2")
    assert "step 119 of 150" in text
    assert "best-scoring one so far (step 115)" in text
    assert "biased upward by roughly 1.5 standard deviations" in text
    assert "Training success rate at that step was 99.2%" in text
    # The noise of one evaluation is computed (Wilson, 128 episodes at 83.5%), with its method.
    assert re.search(r"about ±6\.\d points \(half-width of the 95% Wilson score interval", text)


def test_interim_card_metadata_headline_is_the_window_mean(interim_card):
    card = ModelCard(interim_card.read_text())
    assert card.data.eval_results[0].metric_value == 83.5
    assert card.data.base_model == BASE_MODEL
    assert card.data.to_dict()["base_model_relation"] == "finetune"
    assert card.data.library_name == "transformers"
    assert card.data.pipeline_tag == "text-generation"
    assert card.data.license == "apache-2.0"  # inherited from the base model's record
    assert {
        "ccpo",
        "alfworld",
        "reinforcement-learning",
        "verl-agent",
        "return-hard",
        "interim",
    } <= set(card.data.tags)
    assert "INTERIM: step 119 of 150" in card.text
    assert lint_card(interim_card.read_text()) == []


def test_side_by_side_lists_every_isolated_arm(interim_card):
    text = interim_card.read_text()
    assert table_row(
        text,
        "CCPO return-hard + task backoff + J-weighting (`return-hard-fbjw`)",
        "90.0",
        "3.1",
        "9",
        "1",
        "-6.5 points (no test: return-hard and return-hard-fbjw have one recorded seed, so no interval)",
    )
    assert table_row(text, "**CCPO return-hard (`return-hard`)**", "83.5", "6.5", "10", "1", "–")
    assert table_row(
        text,
        "CCPO global gate, successor-node target (`global-successor`)",
        "77.5",
        "6.3",
        "9",
        "1",
        "+6.0 points (no test: return-hard and global-successor have one recorded seed, so no interval)",
    )
    assert (
        "Flags that distinguish it from the other arms compared here: `gate=hard`, `target=return`, `rho=0.0`"
        in text
    )
    assert "identical rollouts at step 1" in text


def test_caveats_without_grpo_and_with_published_rows_on_another_backbone(interim_card):
    text = interim_card.read_text()
    assert "It does not show that CCPO beats GRPO" in text
    assert "No claim of superiority over GRPO" in text
    assert "These numbers are not comparable to the published ALFWorld results" in text
    assert "GRPO 72.8, GiGPO K=2 90.16, HGPO K=2 92.77" in text
    assert "Qwen2.5-1.5B-Instruct: a different backbone" in text
    assert "Every arm compared here has at most one recorded seed" in text


def test_summary_json_traces_every_number_to_evaluation_ids(interim_card, seed_db):
    summary = json.loads((interim_card.parent / "results" / "ccpo_summary.json").read_text())
    db = store.open_db(seed_db)
    evaluations = {row["id"]: row for row in store.run_evaluations(db, "return-hard")}
    window_ids = summary["window"]["evaluation_ids"]
    assert len(window_ids) == 10 and all(evaluations[i]["step"] >= 70 for i in window_ids)
    mean = sum(evaluations[i]["success_rate"] for i in window_ids) / len(window_ids)
    assert mean == pytest.approx(summary["window"]["mean"]) and round(mean, 1) == 83.5
    best = evaluations[summary["best"]["evaluation_id"]]
    assert (best["step"], best["success_rate"]) == (115, 93.75)
    assert (interim_card.parent / "results" / "learning_curve.png").read_bytes()[
        :8
    ] == b"\x89PNG\r\n\x1a\n"
    assert "](results/learning_curve.png)" in interim_card.read_text()


def test_final_card_for_an_unfinished_run_exits_3(seed_db, tmp_path):
    result = run_card(
        seed_db,
        "--run",
        "return-hard",
        "--status",
        "final",
        "--output",
        str(tmp_path / "README.md"),
    )
    assert result.exit_code == 3
    assert "step 119 of 150" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "README.md").exists()


def test_final_card_of_a_finished_run(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "done", "return-hard", mean=85.0, sd=4.0, n=10, best=92.0, last_step=150)
    result = run_card(
        tmp_path / "runs.db",
        "--run",
        "done",
        "--status",
        "final",
        "--output",
        str(tmp_path / "c" / "README.md"),
    )
    assert result.exit_code == 0, result.output
    card = ModelCard((tmp_path / "c" / "README.md").read_text())
    assert "interim" not in card.data.tags
    assert "Final. The run completed all 150 steps" in card.text
    assert "No other arm in the database shares this run's setting" in card.text
    assert card.data.eval_results[0].metric_value == 85.0


def test_isolated_grpo_run_is_shown_and_compared(tmp_path):
    db = seed_card_db(tmp_path / "runs.db", arms=1, grpo="isolated")
    text = render_card(build_card_context(db, "return-hard"))
    assert "The GRPO baseline" in text and "It does not show that CCPO beats GRPO" not in text
    assert table_row(
        text,
        "GRPO (`grpo`)",
        "72.0",
        "5.0",
        "10",
        "1",
        "+11.5 points (no test: return-hard and grpo have one recorded seed, so no interval)",
    )
    assert "+11.5 points" in text
    assert "not a resolved claim of superiority" in text  # single seeds


def test_contaminated_grpo_run_is_left_out_with_the_reason(tmp_path):
    db = seed_card_db(tmp_path / "runs.db", arms=1, grpo="contaminated")
    text = render_card(build_card_context(db, "return-hard"))
    assert "It does not show that CCPO beats GRPO" in text
    assert (
        "The GRPO run of this run's setting (`grpo-baseline`) fails the isolation check" in text
        and "env.max_steps" in text
    )
    assert "| GRPO (`grpo`) |" not in text


def test_multi_seed_arms_drop_the_replication_warning(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for seed in (0, 1):
        add_run(
            db, f"rh-{seed}", "return-hard", mean=83.5 + seed, sd=6.5, n=10, best=93.75, seed=seed
        )
        add_run(
            db,
            f"fbjw-{seed}",
            "return-hard-fbjw",
            mean=90.0 - seed,
            sd=3.1,
            n=9,
            best=95.3,
            seed=seed,
        )
    text = render_card(build_card_context(db, "rh-0"))
    assert "Every arm compared here has at least two seeds" in text
    assert "one seed" not in text
    assert table_row(text, "**CCPO return-hard (`return-hard`)**", "84.0", "0.7", "2", "2", "–")
    # Two seeds per arm: the difference carries its test, interval and p, and is not resolved.
    assert table_row(
        text,
        "CCPO return-hard + task backoff + J-weighting (`return-hard-fbjw`)",
        "89.5",
        "0.7",
        "2",
        "2",
        "-5.5 points (paired t, 95% CI -18.2 to +7.2, p 0.114)",
    )


def test_published_rows_are_comparable_only_on_the_same_backbone_and_protocol():
    data = load_baseline_data()
    same = published_comparison(
        "Qwen/Qwen2.5-1.5B-Instruct", "hgpo-table1", data, benchmark="alfworld"
    )
    assert [
        row["comparable"] for row in same["rows"] if row["backbone"] == "Qwen2.5-1.5B-Instruct"
    ] == ["yes"] * 3
    assert "GRPO 72.8 (HGPO paper, Table 1, K=2)" in same["comparable"]
    other_protocol = published_comparison(
        "Qwen/Qwen2.5-1.5B-Instruct", "ccpo-alfworld-150", data, benchmark="alfworld"
    )
    assert {row["comparable"] for row in other_protocol["rows"]} == {
        "no: different protocol",
        "no: different backbone",
    }
    assert other_protocol["comparable"] == ""


def test_license_is_never_invented(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(
        db,
        "odd",
        "return-hard",
        mean=80.0,
        sd=5.0,
        n=10,
        best=90.0,
        base_model="someone/unknown-7b",
    )
    result = run_card(
        tmp_path / "runs.db", "--run", "odd", "--output", str(tmp_path / "a" / "README.md")
    )
    assert result.exit_code == 3 and "--license" in result.output
    result = run_card(
        tmp_path / "runs.db",
        "--run",
        "odd",
        "--license",
        "mit",
        "--output",
        str(tmp_path / "b" / "README.md"),
    )
    assert result.exit_code == 0, result.output
    assert ModelCard((tmp_path / "b" / "README.md").read_text()).data.license == "mit"
    store.ensure_run(db, "odd", config=dict(SHARED_CONFIG, license="llama3.1"))
    text = render_card(build_card_context(db, "odd"))
    assert ModelCard(text).data.license == "llama3.1"


def test_local_paths_in_the_recorded_config_are_not_published(interim_card):
    text = interim_card.read_text()
    assert "/home/someone" not in text
    assert "train_files: (local path, not published)" in text


def test_lint_catches_what_a_card_must_not_carry(interim_card):
    good = interim_card.read_text()
    assert lint_card(good) == []
    assert any(
        "base_model" in p
        for p in lint_card(good.replace(f"base_model: {BASE_MODEL}", "base_model: /models/qwen7b"))
    )
    assert any(
        "license is missing" in p for p in lint_card(good.replace("license: apache-2.0\n", ""))
    )
    assert any("placeholder" in p for p in lint_card(good + "\n[More Information Needed]\n"))
    assert any("placeholder" in p for p in lint_card(good + "\nvalue {{ window.mean }}\n"))
    assert any("local path" in p for p in lint_card(good + "\nweights in /home/me/ckpt/step115\n"))
    assert any(
        "unexpected key" in p
        for p in lint_card(good.replace("library_name:", "licence: license\nlibrary_name:"))
    )
    assert lint_card("---\nbase_model: [unclosed\n---\nbody\n")[0].startswith(
        "the card does not parse"
    )


def test_fenced_merge_keeps_hand_edits_and_refreshes_ccpo_regions(interim_card):
    new = interim_card.read_text()
    old = new.replace("| held-out success | 83.5% |", "| held-out success | 71.0% |")
    hand_edited = old.replace(
        "<!-- ccpo:begin usage -->", "A note written on the website.\n\n<!-- ccpo:begin usage -->"
    )
    # A key ccpo does not write (ccpo now writes `language` itself, issue 32).
    hand_edited = hand_edited.replace(
        "library_name: transformers", "library_name: transformers\nthumbnail: t.png"
    )
    merged = merge_into_remote(hand_edited, new)
    assert "A note written on the website." in merged
    assert "| held-out success | 83.5% |" in merged and "71.0%" not in merged
    assert ModelCard(merged).data.thumbnail == "t.png"
    assert list(regions(merged)) == list(regions(new))


def _too_few_version(card_text: str) -> str:
    """The same card as a run with too few evaluations renders it: the tag, and no model-index."""
    card = ModelCard(card_text)
    card.data.eval_results = None
    card.data.tags = [*card.data.tags, TOO_FEW_TAG]
    return str(card)


def test_merge_replaces_the_state_a_card_states_in_both_directions(interim_card):
    """The pushed-run flake of session 2: the step-4 card (enough evaluations, a model-index)
    merged into the Hub's step-0 card (too few, tagged so) kept the tag, failed the lint and
    every later card of the run, the final one included, was skipped."""
    full = interim_card.read_text()
    too_few = _too_few_version(full)
    assert lint_card(full) == [] and lint_card(too_few) == []
    grown = merge_into_remote(too_few, full)
    assert lint_card(grown) == [], lint_card(grown)
    assert TOO_FEW_TAG not in ModelCard(grown).data.tags and ModelCard(grown).data.eval_results
    # And back: a card that no longer claims a result drops the Hub copy's model-index.
    shrunk = merge_into_remote(full, too_few)
    assert lint_card(shrunk) == [], lint_card(shrunk)
    assert not ModelCard(shrunk).data.eval_results
    # A key ccpo never writes survives both merges.
    hand = full.replace("library_name:", "thumbnail: t.png\nlibrary_name:", 1)
    assert ModelCard(merge_into_remote(hand, too_few)).data.thumbnail == "t.png"
    # One tag written by hand as a plain string stays one tag.
    card = ModelCard(full)
    card.data.tags = "my-own-tag"
    assert "my-own-tag" in ModelCard(merge_into_remote(str(card), full)).data.tags


def test_merge_refuses_a_readme_without_ccpo_regions(interim_card):
    from ccpo_cli.errors import InvalidInput

    with pytest.raises(InvalidInput, match="no ccpo regions"):
        merge_into_remote(
            "---\nlicense: mit\n---\n# My model\n\nWritten by hand.\n", interim_card.read_text()
        )


def test_card_with_a_local_base_model_fails_the_lint_and_writes_nothing(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(
        db, "local", "return-hard", mean=80.0, sd=5.0, n=10, best=90.0, base_model="/models/qwen7b"
    )
    out = tmp_path / "card" / "README.md"
    result = run_card(
        tmp_path / "runs.db", "--run", "local", "--license", "apache-2.0", "--output", str(out)
    )
    assert result.exit_code == 3
    assert "offline lint" in result.output and "not a Hub id" in result.output
    assert not out.exists()


def test_card_json_names_the_files_and_the_numbers(seed_db, tmp_path):
    result = run_card(
        seed_db, "--run", "return-hard", "--output", str(tmp_path / "README.md"), "--json"
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1 and document["status"] == "interim"
    assert set(document["files"]) == {
        "README.md",
        "results/ccpo_summary.json",
        "results/learning_curve.png",
    }
    assert round(document["summary"]["window"]["mean"], 1) == 83.5
    assert document["summary"]["best"]["step"] == 115
    assert "it was 38.0 at the first evaluation (step 5)" in (tmp_path / "README.md").read_text()


def test_unrecorded_episode_counts_are_not_passed_off_as_known(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "bare", "gigpo", mean=70.0, sd=5.0, n=10, best=80.0, config={}, episodes=None)
    text = render_card(build_card_context(db, "bare"))
    assert "Held-out evaluation on an unrecorded number of ALFWorld episodes" in text
    # Never an assumed panel size: with neither a record nor rates that pin it, the noise is not stated.
    assert "A single evaluation here carries about ±" not in text and "assumed" not in text
    assert (
        "The episode count per evaluation is not recorded, so the noise of a single evaluation cannot be stated"
        in text
    )
    assert "It does not show that GiGPO beats GRPO" in text
    assert "Recorded run configuration" not in text and lint_card(text) == []
