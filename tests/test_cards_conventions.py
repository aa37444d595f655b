"""Cards a paper can use, with the Hub's conventions.

`language` and `datasets` in the YAML, paper links and BibTeX of the methods, of the benchmark
and of ccpo (the arXiv ids are data in configs/papers.yaml), framework versions, a short
model-index metric name plus one metric per task type (both window means), the `from_pretrained`
snippet only when weights are in the repository, only live flags as distinguishing, and no code
span inside another. Every card still loads with huggingface_hub's ModelCard.

Asked for in issue 32, item 6.
"""

from __future__ import annotations

import re

import pytest
from helpers_cards import add_run, seed_card_db
from huggingface_hub import ModelCard

from ccpo_cli import store
from ccpo_cli.arms import load_arm
from ccpo_cli.cards import build_card_context, render_card
from ccpo_cli.store.identity import ExternalArm

pytestmark = pytest.mark.usefixtures("no_network")

REPO = "SingleBicycle/ccpo-alfworld-qwen2.5-7b-return-hard"


def prose_lines(text: str) -> list[str]:
    """The card's lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


@pytest.fixture(scope="module")
def seed_db(tmp_path_factory):
    return seed_card_db(tmp_path_factory.mktemp("conventions") / "runs.db", arms=3, grpo="isolated")


def test_the_yaml_has_language_datasets_and_a_short_metric_name_with_one_per_task_type(seed_db):
    card = ModelCard(render_card(build_card_context(seed_db, "return-hard", repo_id=REPO)))
    assert card.data.language == ["en"] and card.data.datasets == ["alfworld"]
    results = card.data.eval_results
    assert results[0].metric_type == "success_rate" and results[0].metric_value == 83.5
    assert results[0].metric_name == "Held-out success (%), window mean"
    per_type = {
        result.metric_type: (result.metric_name, result.metric_value) for result in results[1:]
    }
    assert per_type == {
        "success_rate_pick": ("Pick success (%)", 100.0),
        "success_rate_look": ("Look success (%)", 84.5),
        "success_rate_clean": ("Clean success (%)", 96.7),
        "success_rate_heat": ("Heat success (%)", 87.5),
        "success_rate_cool": ("Cool success (%)", 83.8),
        "success_rate_pick2": ("Pick2 success (%)", 96.2),
    }
    assert all(len(result.metric_name) <= 40 for result in results)
    assert {result.dataset_type for result in results} == {"alfworld"}


def test_papers_bibtex_code_and_framework_versions(seed_db):
    text = render_card(build_card_context(seed_db, "return-hard", repo_id=REPO))
    for arxiv in (
        "2402.03300",
        "2505.10978",
        "2010.03768",
        "2602.22817",
    ):  # GRPO, GiGPO, ALFWorld, HGPO's rows
        assert f"[arXiv:{arxiv}](https://arxiv.org/abs/{arxiv})" in text
    bibtex = text.split("```bibtex\n", 1)[1].split("```", 1)[0]
    keys = re.findall(r"^@(\w+)\{(\w+),", bibtex, re.MULTILINE)
    assert keys == [
        ("misc", "grpo2024"),
        ("misc", "gigpo2025"),
        ("misc", "alfworld2021"),
        ("software", "ccpo"),
    ]
    assert bibtex.count("{") == bibtex.count("}")  # every entry closes
    assert (
        "eprint = {2505.10978}" in bibtex and "HGPO" not in bibtex
    )  # no entry without recorded authors
    assert "## Framework versions" in text and "| ccpo | 0.1.0 | rendered this card |" in text


def test_a_local_run_lists_the_frameworks_it_trained_with(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    store.ensure_run(
        db, "rh", package_versions={"torch": "2.13.0", "numpy": "2.3.1", "python": "3.11.9"}
    )
    text = render_card(build_card_context(db, "rh", repo_id=REPO))
    for row in (
        "| torch | 2.13.0 | recorded by the run |",
        "| numpy | 2.3.1 | recorded by the run |",
    ):
        assert row in text


def test_the_loading_snippet_only_when_weights_are_in_the_repository(seed_db):
    numbers_only = render_card(build_card_context(seed_db, "return-hard", repo_id=REPO))
    assert "from_pretrained(" not in numbers_only
    assert "No weights are in this repository" in numbers_only
    weights = {"commit": "a" * 40, "revision": "step-115", "step": 115, "repo_id": REPO}
    with_weights = render_card(
        build_card_context(seed_db, "return-hard", repo_id=REPO, weights=weights)
    )
    assert (
        'revision = "step-115"' in with_weights
        and "from_pretrained(model_id, revision=revision" in with_weights
    )
    assert "No weights are in this repository" not in with_weights


def test_no_code_span_sits_inside_another(seed_db):
    text = render_card(build_card_context(seed_db, "return-hard", repo_id=REPO))
    assert "The GRPO baseline `grpo` of this run's setting is shown above and passes" in text
    for line in prose_lines(text):
        assert "``" not in line, line
        assert line.count("`") % 2 == 0, line


def test_flags_inert_in_this_arm_are_not_called_distinguishing(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "return-hard", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    # backoff_rho does nothing at rho = 0 (arms.py): a different value is a different arm, not a
    # different estimator.
    add_run(
        db,
        "rh-backoff",
        load_arm("return-hard", {"backoff_rho": 0.9}),
        mean=80.0,
        sd=5.0,
        n=10,
        best=90.0,
    )
    text = render_card(build_card_context(db, "return-hard", repo_id=REPO))
    assert "Flags that distinguish it" not in text
    assert (
        "No live flag distinguishes it from the other arms compared here: it differs only in "
        "`backoff_rho=0.5`, inert in this arm"
    ) in text


# Issue 32, item 5: a repository that receives weights always receives a card. A 6-step run
# has too few evaluations for a window mean: its card says so, reports the evaluations it has,
# and claims no model-index value.


def short_run_db(path):
    db = store.open_db(path)
    store.ensure_run(
        db,
        "short",
        arm=ExternalArm("return-hard"),
        seed=0,
        base_model="Qwen/Qwen2.5-7B-Instruct",
        total_steps=6,
        benchmark="alfworld",
        backend="verl",
        hardware="8xH100",
    )
    store.update_run_state(db, "short", status="finished", last_step=6)
    for step, successes in ((3, 40), (6, 52)):
        store.record_evaluation(
            db, "short", step, successes=successes, episodes=128, temperature=0.4
        )
    return db


def test_a_run_with_too_few_evaluations_gets_a_card_that_says_so(tmp_path):
    from typer.testing import CliRunner

    from ccpo_cli.cards import lint_card
    from ccpo_cli.cli.app import app

    db = short_run_db(tmp_path / "runs.db")
    text = render_card(build_card_context(db, "short", status="final", repo_id=REPO))
    assert lint_card(text) == []
    card = ModelCard(text)
    assert "too-few-evaluations" in card.data.tags and not card.data.eval_results
    assert (
        "**Too few evaluations for a window mean**: 2 evaluations at step >= 3: a window mean needs at least 3"
        in text
    )
    assert "| 3 | 31.2 | 128 | yes |" in text and "| 6 | 40.6 | 128 | yes |" in text
    assert "this card compares nothing" in text
    out = tmp_path / "card" / "README.md"
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "card",
            "--run",
            "short",
            "--status",
            "auto",
            "--output",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "too-few-evaluations" in ModelCard(out.read_text()).data.tags


def test_a_run_without_any_evaluation_is_refused_in_one_line(tmp_path):
    from typer.testing import CliRunner

    from ccpo_cli.cli.app import app

    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db,
        "empty",
        arm=ExternalArm("return-hard"),
        seed=0,
        base_model="Qwen/Qwen2.5-7B-Instruct",
        total_steps=6,
        benchmark="alfworld",
        backend="verl",
    )
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "card",
            "--run",
            "empty",
            "--status",
            "interim",
            "--output",
            str(tmp_path / "README.md"),
        ],
    )
    assert result.exit_code == 3 and "has no held-out evaluation yet" in result.output
    assert "Traceback" not in result.output
