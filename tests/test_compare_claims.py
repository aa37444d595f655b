"""Every number of compare and of a card is about the rows it names. Unseeded runs
are no seed, every arm pair is listed, an inferred panel size never splits an arm, external
arms (estimators ccpo does not implement) get units, pairs and cards, and a card's arm numbers
are the arm's.

Asked for in issue 29.
"""

from __future__ import annotations

from pathlib import Path

from ccpo_cli.cards.context import build_card_context
from ccpo_cli.cards.lint import lint_card
from ccpo_cli.cards.render import render_card
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.identity import ExternalArm, all_identities
from ccpo_cli.store.ingest import ingest_file

ROUND3 = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs" / "round3"
SHARED = {
    "base_model": "Qwen/Qwen2.5-7B-Instruct",
    "benchmark": "alfworld",
    "hardware": "8xH100",
    "backend": "verl",
    "total_steps": 150,
    "data_order_seed": 0,
    "config": {"data": {"train_batch_size": 16}},
}


def add_run(db, name, arm, rates, *, seed, episodes=128):
    ensure_run(
        db,
        name,
        arm=None if arm is None else ExternalArm(arm),
        **({"seed": seed} if seed is not None else {}),
        **SHARED,
    )
    update_run_state(db, name, step1_rollout_hash="h", status="running", last_step=150)
    for step, rate in rates.items():
        record_evaluation(db, name, step, success_rate=rate, episodes=episodes, temperature=0.4)


def plateau(level: float) -> dict[int, float]:
    return {
        step: level + (2.0 if index % 2 else -2.0) for index, step in enumerate(range(70, 155, 10))
    }


def test_an_unseeded_run_is_no_seed_in_isolation_and_the_one_seed_arm_keeps_its_own_spread(
    tmp_path,
):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh-0", "return-hard", plateau(80), seed=0)
    add_run(
        db,
        "rh-x",
        "return-hard",
        {step: 40.0 + step % 20 for step in range(70, 155, 10)},
        seed=None,
    )
    add_run(db, "gg-0", "gigpo", plateau(70), seed=0)
    document = compare_runs(db, None).as_json()
    isolation = document["isolation"]
    assert all(None not in seeds for seeds in isolation["seeds_by_arm"].values())
    assert not any(difference.startswith("seed:") for difference in isolation["differences"])
    assert "seed (for rh-x)" in isolation["not_recorded"]
    arm = next(
        arm for arm in document["arms"] if arm["n_seeds"] == 1 and "return-hard" in arm["arm"]
    )
    own = next(entry for entry in document["runs"] if entry["run"] == "rh-0")["window"]
    assert (
        arm["mean"] == own["mean"] and arm["n"] == own["n"]
    )  # the unseeded run's evaluations are not in it


def test_an_arm_without_a_seed_is_listed_in_not_compared(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh-0", "return-hard", plateau(80), seed=0)
    add_run(db, "gg-x", "gigpo", plateau(70), seed=None)
    document = compare_runs(db, None).as_json()
    pairs = [
        (item["arm_a"], item["arm_b"])
        for item in document["comparisons"] + document["not_compared"]
    ]
    assert len(pairs) == 1 and "no recorded seed" in document["not_compared"][0]["note"]


def test_an_inferred_panel_size_does_not_split_an_arm(tmp_path):
    """Two seeds of one arm without recorded episodes whose rates imply different common
    denominators are one unit."""
    db = open_db(tmp_path / "runs.db")
    add_run(
        db,
        "a-0",
        "return-hard",
        {70 + 5 * i: 100 * k / 32 for i, k in enumerate((9, 11, 13, 15, 17, 19))},
        seed=0,
        episodes=None,
    )
    add_run(
        db,
        "a-1",
        "return-hard",
        {70 + 5 * i: 100 * k / 16 for i, k in enumerate((5, 7, 9, 11, 3, 13))},
        seed=1,
        episodes=None,
    )
    identities = all_identities(db)
    assert identities["a-0"].protocol.episodes != identities["a-1"].protocol.episodes
    assert identities["a-0"].unit == identities["a-1"].unit


def _ingest(db, name: str, path: Path) -> None:
    ingest_file(db, path, name)


def test_hgae_and_ppo_logs_get_cards_that_name_their_estimator(tmp_path):
    db = open_db(tmp_path / "runs.db")
    _ingest(db, "hgae-s5", ROUND3 / "jonp07hiper_ppo_alfworld_seed5_1_5b.txt")
    _ingest(db, "hgae-s6", ROUND3 / "jonp07hiper_ppo_alfworld_seed6_1_5b.txt")
    identities = all_identities(db)
    assert (
        identities["hgae-s5"].arm.name == "verl-agent:hgae"
        and identities["hgae-s5"].arm.is_external
    )
    context = build_card_context(db, "hgae-s5", status="final")
    text = render_card(context)
    assert lint_card(text) == []
    assert "verl-agent's `hgae` estimator" in text and "trained with CCPO" not in text
    assert "not assessed: ccpo does not implement this estimator" in text
    arm = context.comparison.arm("verl-agent:hgae")
    assert arm.n_seeds == 2 and sorted(arm.seeds) == [5, 6]
    # The card names the run's window as the run's and the arm's mean as the arm's.
    assert arm.mean is not None
    assert f"the arm's mean over its seeds' window means is {arm.mean:.1f}" in text
    assert "unresolved until replicated" in text


def test_an_external_arm_pair_is_compared_like_ccpos_arms(tmp_path):
    db = open_db(tmp_path / "runs.db")
    _ingest(db, "hgae-s5", ROUND3 / "jonp07hiper_ppo_alfworld_seed5_1_5b.txt")
    _ingest(db, "hgae-s6", ROUND3 / "jonp07hiper_ppo_alfworld_seed6_1_5b.txt")
    _ingest(db, "gae-s0", ROUND3.parent / "round2" / "jonp07_ppo_run_alfworld.txt")
    document = compare_runs(db, None).as_json()
    labels = {arm["arm"] for arm in document["arms"]}
    assert {"verl-agent:hgae", "verl-agent:gae"} <= labels
    listed = document["comparisons"] + document["not_compared"]
    assert len(listed) == 1 and {listed[0]["arm_a"], listed[0]["arm_b"]} == {
        "verl-agent:hgae",
        "verl-agent:gae",
    }


def test_a_failed_run_gets_no_card_that_promises_final_numbers(tmp_path):
    import pytest
    from helpers_cards import seed_card_db

    from ccpo_cli.errors import InvalidInput

    db = seed_card_db(tmp_path / "runs.db", arms=1)
    update_run_state(db, "return-hard", status="failed")
    for status in ("interim", "final"):
        with pytest.raises(InvalidInput, match="failed"):
            build_card_context(db, "return-hard", status=status)


def test_windows_over_different_steps_are_said_to_be_so(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for seed in (0, 1):
        add_run(
            db,
            f"rh-{seed}",
            "return-hard",
            {step: 60.0 + seed + step % 3 for step in range(5, 30, 5)},
            seed=seed,
        )
        add_run(
            db,
            f"gg-{seed}",
            "gigpo",
            {step: 70.0 + seed + step % 3 for step in range(65, 150, 10)},
            seed=seed,
        )
    text = render_card(build_card_context(db, "rh-0", status="final", window_start=5))
    assert "The arms' windows cover different stretches of training" in text
    assert "steps 5-25" in text and "steps 65-145" in text


def test_a_log_ingested_twice_is_one_run_not_two_averaged(tmp_path):
    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh-a", "return-hard", plateau(80), seed=0)
    add_run(db, "rh-b", "return-hard", plateau(80), seed=0)
    arm = compare_runs(db, None).as_json()["arms"][0]
    window = compare_runs(db, ["rh-a"]).as_json()["runs"][0]["window"]
    assert arm["n"] == window["n"] and arm["identical_runs"] == [["rh-a", "rh-b"]]
    assert any("one log recorded 2 times" in note for note in arm["seed_notes"])
    assert not any("averaged" in note for note in arm["seed_notes"])


def test_runs_whose_arm_is_not_recorded_are_never_compared_as_arms(tmp_path):
    """Three seeds ingested without --arm (boerz's CSVs) are three units of unknown arm: a
    difference between them would say they differ in the arm, which nothing records."""
    db = open_db(tmp_path / "runs.db")
    for seed, level in enumerate((70, 63, 73)):
        add_run(db, f"bare-{seed}", None, plateau(level), seed=seed)
    add_run(db, "rh-0", "return-hard", plateau(80), seed=0)
    document = compare_runs(db, None).as_json()
    assert document["comparisons"] == []
    assert len(document["not_compared"]) == 6  # every pair of the four units, none compared
    assert all(
        "arm not recorded" in item["differ_in"] or "is not recorded" in item["note"]
        for item in document["not_compared"]
    )


def test_a_difference_between_windows_of_different_steps_says_so(tmp_path):
    """JonP07's PPO run cut at step 115 beside one that reached 150: both windows start at 70,
    but one ends at 110, and the comparison says so."""
    db = open_db(tmp_path / "runs.db")
    add_run(db, "rh-0", "return-hard", plateau(80), seed=0)
    add_run(
        db,
        "gg-0",
        "gigpo",
        {step: rate for step, rate in plateau(70).items() if step <= 110},
        seed=0,
    )
    add_run(
        db,
        "gg-1",
        "gigpo",
        {step: rate for step, rate in plateau(72).items() if step <= 110},
        seed=1,
    )
    comparison = compare_runs(db, None).as_json()["comparisons"][0]
    assert (
        "different steps" in comparison["window_coverage"]
        and "70-150" in comparison["window_coverage"]
    )
    assert (
        "70-110" in comparison["window_coverage"]
        and comparison["window_coverage"] in comparison["note"]
    )
    same = open_db(tmp_path / "same.db")
    add_run(same, "rh-0", "return-hard", plateau(80), seed=0)
    add_run(same, "gg-0", "gigpo", plateau(70), seed=0)
    assert compare_runs(same, None).as_json()["comparisons"][0]["window_coverage"] is None
