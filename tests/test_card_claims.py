"""A card says nothing false: each cause of false card sentences that issue 39 lists (1-9) is a
test here, on databases built as users build them (tests/helpers_cards.py), and the card's claims
are typed objects (`ccpo_cli.cards.claims.card_claims`) that the template only puts into words."""

from __future__ import annotations

from helpers_cards import SHARED_CONFIG
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, render_card
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()

# Success counts out of 128 (no common factor: the panel size is inferred as exactly 128) and out
# of 64 with every count even (the inference can only find 32, a sub-multiple of the panel).
COUNTS_128 = [97, 101, 105, 99, 111, 103, 107, 109, 95, 113]
COUNTS_64_EVEN = [50, 52, 54, 48, 56, 46, 58, 44, 60, 42]


def add_counted_run(
    db, name: str, arm: str, counts: list[int], panel: int, *, seed: int, recorded: bool
) -> None:
    """A run whose window evaluations are `counts` successes of a `panel`-episode panel; the
    episode count is recorded, or left out so that it is inferred from the rates."""
    store.ensure_run(
        db,
        name,
        arm=ExternalArm(arm),
        seed=seed,
        base_model="Qwen/Qwen2.5-7B-Instruct",
        total_steps=150,
        benchmark="alfworld",
        hardware="8xH100",
        backend="verl",
        data_order_seed=0,
        config=SHARED_CONFIG,
    )
    store.update_run_state(db, name, status="running", last_step=119, step1_rollout_hash="abc123")
    for index, successes in enumerate(counts):
        store.record_evaluation(
            db,
            name,
            70 + 5 * index,
            success_rate=100.0 * successes / panel,
            episodes=panel if recorded else None,
            temperature=0.4,
        )


def card_text(db, run: str, **kwargs) -> str:
    return render_card(build_card_context(db, run, **kwargs))


# ---- cause 1: a recorded and an inferred episode count of one protocol compare by value ------


def test_cause1_recorded_and_inferred_128_are_one_protocol(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_counted_run(db, "rh-0", "return-hard", COUNTS_128, 128, seed=0, recorded=True)
    add_counted_run(db, "gs-0", "global-successor", COUNTS_128[::-1], 128, seed=0, recorded=False)
    document = compare_runs(db).as_json()
    assert document["not_compared"] == []
    assert len(document["comparisons"]) == 1
    inferred = next(run for run in document["runs"] if run["run"] == "gs-0")["protocol"]
    # The document says which side inferred the count, and the value it is compared by.
    assert inferred["episodes_basis"].startswith("inferred")
    assert inferred["pooled_episodes"] == 128 and inferred["episodes_uncertain"] is False


def test_cause1_sub_multiple_inference_never_splits_an_arm(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for seed in range(3):
        add_counted_run(
            db,
            f"rh-{seed}",
            "return-hard",
            COUNTS_64_EVEN[seed:] + COUNTS_64_EVEN[:seed],
            64,
            seed=seed,
            recorded=True,
        )
    add_counted_run(db, "rh-3", "return-hard", COUNTS_64_EVEN[::-1], 64, seed=3, recorded=False)
    comparison = compare_runs(db)
    assert [arm.n_seeds for arm in comparison.arms] == [4]
    protocol = comparison.run("rh-3").identity.protocol
    assert protocol.episodes == 32 and protocol.pooled_episodes == 64
    assert protocol.episodes_uncertain  # named as uncertain, not split off


# ---- cause 2: compare and the card group by one unit identity ---------------------------------


def test_cause2_card_and_compare_agree_on_seeds_and_mean(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for seed in range(3):
        add_counted_run(
            db,
            f"rh-{seed}",
            "return-hard",
            COUNTS_128[seed:] + COUNTS_128[:seed],
            128,
            seed=seed,
            recorded=True,
        )
    add_counted_run(
        db, "rh-3", "return-hard", [c - 20 for c in COUNTS_128], 128, seed=3, recorded=False
    )
    compared = next(arm for arm in compare_runs(db).arms if arm.arm_name == "return-hard")
    context = build_card_context(db, "rh-0")
    own = next(arm for arm in context.comparison.arms if arm.arm_name == "return-hard")
    assert (own.n_seeds, own.mean) == (compared.n_seeds, compared.mean) == (4, compared.mean)
    text = render_card(context)
    assert "return-hard ()" not in text and "`rh-3`" not in text
    assert "rh-3" not in context.summary["excluded_runs"]
