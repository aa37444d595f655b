"""An independent claims oracle for the model cards (issue 39, Deliver 4).

Hypothesis draws databases as users build them (tests/helpers_card_oracle.py: arms x seeds x
protocols with the episode count recorded, inferred, not recorded or a sub-multiple panel;
references, failed, retracted and unseeded runs, external estimators, two base models and
backends), writes them through ccpo's own writers, renders `ccpo compare --json` and the cards,
and checks every claim against scripts/card_oracle_recompute.py, which recomputes from the rows
alone and imports nothing of ccpo. The examples that once found a false claim are kept below as
named cases, one per cause of issue 39.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers_card_oracle import (
    MODEL_7B,
    MODEL_15B,
    ORACLE_PATH,
    DatabaseRecipe,
    RunRecipe,
    build,
    databases,
    judge,
    render,
)
from hypothesis import HealthCheck, Phase, given, settings

EXAMPLES = 200  # generated databases per run of the property test (the acceptance asks >= 200)


def findings_text(found) -> str:
    return "\n".join(
        f"[{where}] {sentence}\n    why: {why}" for where, sentence, why in found.false
    )


def check_recipe(recipe: DatabaseRecipe, folder: Path):
    db_path = build(recipe, folder / "runs.db")
    rendered = render(recipe, db_path)
    return rendered, judge(db_path, rendered)


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure prints its recipe whole
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(recipe=databases())
def test_no_card_or_compare_claim_is_false_on_generated_databases(recipe, tmp_path_factory):
    folder = tmp_path_factory.mktemp("oracle")
    rendered, found = check_recipe(recipe, folder)
    # Something was checked, unless no trained run stands (every one retracted or failed).
    trained = [row for row in rendered.compare["runs"] if row["kind"] == "training"]
    assert found.claims > 0 or not (rendered.cards or trained)
    agreement = [item for item in found.false if item[1].startswith("this arm: ")]
    assert not agreement, "compare and the card disagree on an arm's seeds or mean:\n" + "\n".join(
        f"{sentence}: {why}" for _, sentence, why in agreement
    )
    assert not found.false, f"{len(found.false)} false claims:\n{findings_text(found)}"


# ---------------------------------------------------------------- the causes, as named cases


def _run(name: str, arm: str | None, seed: int | None, **fields) -> RunRecipe:
    return RunRecipe(name=name, arm=arm, seed=seed, **fields)


CAUSES = {
    # 1. One arm's count recorded, the other's inferred: both 128 episodes, the same protocol.
    "1-recorded-and-inferred-episodes": DatabaseRecipe(
        (
            _run("rh-0", "return-hard", 0),
            _run("rh-1", "return-hard", 1),
            _run("hgae-0", "hgae", 0, episodes="inferred"),
            _run("hgae-1", "hgae", 1),
        )
    ),
    # 1. An inferred sub-multiple panel (64 episodes, every count even) splits a seed off.
    "1-sub-multiple-panel": DatabaseRecipe(
        (
            _run("ppo-0", "ppo", 0, panel=64),
            _run("ppo-1", "ppo", 1, panel=64),
            _run("ppo-2", "ppo", 2, panel=64, episodes="submultiple"),
        )
    ),
    # 2. compare and the card group an arm's seeds differently.
    "2-one-grouping": DatabaseRecipe(
        tuple(_run(f"rh-{seed}", "return-hard", seed) for seed in range(3))
        + (_run("rh-3", "return-hard", 3, episodes="inferred"),)
        + (_run("gs-0", "global-successor", 0),)
    ),
    # 3. The GRPO caveat names a GRPO run of another setting (another model).
    "3-grpo-of-another-setting": DatabaseRecipe(
        (
            _run("rh-0", "return-hard", 0, base_model=MODEL_15B),
            _run("grpo-small", "grpo", 0, base_model=MODEL_7B),
            _run("grpo-t0", "grpo", 1, base_model=MODEL_15B, temperature=0.0),
        )
    ),
    # 4. "passes the isolation check" where the verdict is unverifiable.
    "4-isolation-unverifiable": DatabaseRecipe(
        (
            _run("rh-0", "return-hard", 0, evidence=False),
            _run("grpo-0", "grpo", 0, evidence=False),
        )
    ),
    # 5. The isolation statement counts reference and failed runs.
    "5-isolation-counts-compared-runs": DatabaseRecipe(
        (
            _run("rh-0", "return-hard", 0),
            _run("gs-0", "global-successor", 0),
            _run("gs-failed", "global-successor", 1, status="failed"),
            _run("reference-0", None, None, kind="evaluation", total_steps=None, last_step=10),
        )
    ),
    # 6. A difference stated for an arm without a recorded seed.
    "6-difference-without-seed": DatabaseRecipe(
        (
            _run("rh-0", "return-hard", 0),
            _run("grpo-noseed", "grpo", None),
        )
    ),
    # 6. A difference with three seeds per arm and no interval.
    "6-difference-without-interval": DatabaseRecipe(
        tuple(_run(f"rh-{s}", "return-hard", s, level=78.0) for s in range(3))
        + tuple(_run(f"grpo-{s}", "grpo", s, level=74.0) for s in range(3))
    ),
    # 7. "step 8 of None": a run without its total steps.
    "7-no-total-steps": DatabaseRecipe((_run("ppo-0", "ppo", 0, total_steps=None, last_step=120),)),
    # 7. A constant window (every evaluation equal) is never "converged".
    "7-constant-window": DatabaseRecipe(
        (_run("rh-0", "return-hard", 0, constant=True, panel=8, level=0.0),)
    ),
    # 7. The "left out" paragraph lists fingerprints instead of naming the settings.
    "7-left-out-fingerprints": DatabaseRecipe(
        (
            _run("rh-0", "return-hard", 0),
            _run("gs-small", "global-successor", 0, base_model=MODEL_15B),
            _run("gigpo-t0", "gigpo", 0, temperature=0.0),
        )
    ),
    # 8. A finished short run: --status auto renders it final, as --push-to-hub publishes it.
    "8-finished-short-run": DatabaseRecipe(
        (
            _run(
                "rh-0",
                "return-hard",
                0,
                total_steps=60,
                last_step=60,
                status="finished",
                eval_every=4,
            ),
        )
    ),
    # Generated examples that once found a false claim (h39-findings F15-F17).
    # Two inferred counts, nothing recorded: no count confirms them, they pool as "not recorded".
    "generated-two-inferred-counts": DatabaseRecipe(
        (
            _run("turn-ppo-s0-0", "turn-ppo", 0, base_model=MODEL_15B, episodes="inferred"),
            _run(
                "turn-ppo-s1-1",
                "turn-ppo",
                1,
                base_model=MODEL_15B,
                episodes="submultiple",
                panel=64,
            ),
        )
    ),
    # A recorded 128 pooled with an unseeded sub-multiple panel: the unit's count is 128.
    "generated-recorded-128-with-submultiple": DatabaseRecipe(
        (
            _run("ppo-s1-1", "ppo", 1, base_model=MODEL_15B, temperature=0.0),
            _run(
                "ppo-noseed-2",
                "ppo",
                None,
                base_model=MODEL_15B,
                temperature=0.0,
                episodes="submultiple",
                panel=64,
            ),
        )
    ),
    # A count neither recorded nor inferable beside an unconfirmed inferred 32: one arm of no
    # recorded count, never labelled 32 episodes.
    "generated-unknown-count-labelled-32": DatabaseRecipe(
        (
            _run("gigpo-s1-1", "gigpo", 1, base_model=MODEL_15B, episodes="submultiple", panel=64),
            _run("gigpo-s2-2", "gigpo", 2, base_model=MODEL_15B, episodes="missing", level=72.0),
        )
    ),
}


@pytest.mark.parametrize("cause", sorted(CAUSES))
def test_the_issues_causes_give_no_false_claim(cause, tmp_path):
    rendered, found = check_recipe(CAUSES[cause], tmp_path)
    assert rendered.cards, f"no card rendered: {rendered.refused}"
    assert not found.false, f"{len(found.false)} false claims:\n{findings_text(found)}"


# ------------------------------------------------------------------ the oracle can fail


def test_the_oracle_finds_a_planted_false_number(tmp_path):
    """A card whose summary says one seed more than the rows hold is caught."""
    recipe = CAUSES["1-recorded-and-inferred-episodes"]
    db_path = build(recipe, tmp_path / "runs.db")
    rendered = render(recipe, db_path)
    card = rendered.cards[0]
    summary = card / "results" / "ccpo_summary.json"
    text = summary.read_text()
    planted = text.replace('"n_seeds": 2', '"n_seeds": 3', 1)
    assert planted != text
    summary.write_text(planted)
    found = judge(db_path, rendered)
    assert any("seeds" in sentence for _, sentence, _ in found.false)


def test_the_recompute_script_runs_standalone_without_ccpo(tmp_path):
    """scripts/card_oracle_recompute.py imports no ccpo module: it runs with ccpo unimportable."""
    recipe = CAUSES["7-left-out-fingerprints"]
    db_path = build(recipe, tmp_path / "runs.db")
    rendered = render(recipe, db_path)
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "ccpo_cli.py").write_text("raise ImportError('the oracle must not import ccpo')\n")
    result = subprocess.run(
        [sys.executable, str(ORACLE_PATH), str(db_path), *map(str, rendered.cards)],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert "claims checked" in result.stdout, result.stderr
    assert "Traceback" not in result.stderr
