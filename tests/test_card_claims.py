"""A card says nothing false: each cause of false card sentences that issue 39 lists (1-9) is a
test here, on databases built as users build them (tests/helpers_cards.py), and the card's claims
are typed objects (`ccpo_cli.cards.claims.card_claims`) that the template only puts into words."""

from __future__ import annotations

import json
from pathlib import Path

from helpers_cards import BASE_MODEL, SHARED_CONFIG, add_run
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cards import build_card_context, render_card
from ccpo_cli.cli.app import app
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()
SMALL = "Qwen/Qwen2.5-1.5B-Instruct"

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


def add_seeds(db, arm: str, counts: list[int], panel: int, seeds: range, *, prefix: str) -> None:
    """Recorded-panel seeds of one arm, each with the counts rotated (a seed's own noise)."""
    for seed in seeds:
        rotated = counts[seed:] + counts[:seed]
        add_counted_run(db, f"{prefix}-{seed}", arm, rotated, panel, seed=seed, recorded=True)


def card_text(db, run: str, **kwargs) -> str:
    return render_card(build_card_context(db, run, **kwargs))


def card_claims(db, run: str, **kwargs):
    from ccpo_cli.cards.claims import card_claims as claims  # the public entry point

    return claims(db, run, **kwargs)


def section(text: str, name: str) -> str:
    return text.split(f"<!-- ccpo:begin {name} -->")[1].split(f"<!-- ccpo:end {name} -->")[0]


def card_cli(db_path: Path, run: str, *args: str):
    return runner.invoke(
        app,
        [
            "--db",
            str(db_path),
            "card",
            "--run",
            run,
            "--output",
            str(db_path.parent / run / "README.md"),
            "--json",
            *args,
        ],
    )


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
    add_seeds(db, "return-hard", COUNTS_64_EVEN, 64, range(3), prefix="rh")
    add_counted_run(db, "rh-3", "return-hard", COUNTS_64_EVEN[::-1], 64, seed=3, recorded=False)
    comparison = compare_runs(db)
    assert [arm.n_seeds for arm in comparison.arms] == [4]
    protocol = comparison.run("rh-3").identity.protocol
    assert protocol.episodes == 32 and protocol.pooled_episodes == 64
    assert protocol.episodes_uncertain  # named as uncertain, not split off
    assert (
        "recorded 64, since the inference finds a divisor of the panel: the panel size is uncertain"
        in card_text(db, "rh-3")
    )


# ---- cause 2: compare and the card group by one unit identity ---------------------------------


def test_cause2_card_and_compare_agree_on_seeds_and_mean(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_seeds(db, "return-hard", COUNTS_128, 128, range(3), prefix="rh")
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


# ---- cause 3: the GRPO caveat names a run of the card's own setting --------------------------


def test_cause3_grpo_caveat_names_only_a_run_of_the_cards_setting(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    # A GRPO run of another setting (a 1.5B model) first, then one of the card's own setting
    # whose configuration differs (it fails the isolation check).
    add_run(db, "grpo-small", "grpo", mean=60.0, sd=5.0, n=10, best=70.0, base_model=SMALL)
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    other_config = dict(
        SHARED_CONFIG, env={"max_steps": 30, "history_length": 2, "rollout": {"n": 8}}
    )
    add_run(db, "grpo-own", "grpo", mean=72.0, sd=5.0, n=10, best=80.5, config=other_config)
    text = card_text(db, "rh")
    grpo = section(text, "does-and-does-not-show")
    assert "`grpo-own`" in grpo and "grpo-small" not in grpo
    claim = next(claim for claim in card_claims(db, "rh", status="interim") if claim.kind == "grpo")
    assert claim.rejected_runs == ["grpo-own"]


def test_cause3_no_grpo_of_the_setting_names_no_other_settings_run(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "grpo-small", "grpo", mean=60.0, sd=5.0, n=10, best=70.0, base_model=SMALL)
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    grpo = section(card_text(db, "rh"), "does-and-does-not-show")
    assert "grpo-small" not in grpo
    assert "No GRPO run of this run's setting is recorded in the database." in grpo


# ---- cause 4: "passes the isolation check" only on a pass verdict ----------------------------


def test_cause4_unverifiable_grpo_baseline_is_never_said_to_pass(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75, hardware=None)
    add_run(db, "grpo", "grpo", mean=72.0, sd=5.0, n=10, best=80.5, hardware=None)
    context = build_card_context(db, "rh")
    assert context.comparison.isolation["verdict"] == "unverifiable"
    text = render_card(context)
    assert "The GRPO baseline" in text
    assert "passes the isolation check" not in text and "they pass the isolation check" not in text
    assert "its isolation check against this arm is unverifiable" in text


# ---- cause 5: isolation counts only the runs it checked -------------------------------------


def test_cause5_isolation_counts_only_checked_runs(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    add_run(db, "gs", "global-successor", mean=77.5, sd=6.3, n=9, best=86.7)
    add_run(db, "gs-failed", "global-successor", mean=70.0, sd=6.3, n=9, best=80.0, seed=1)
    store.update_run_state(db, "gs-failed", status="failed")
    # A seed with evaluations only before the window: it adds no number, so it is not checked.
    store.ensure_run(
        db,
        "rh-early",
        arm=ExternalArm("return-hard"),
        seed=2,
        base_model="Qwen/Qwen2.5-7B-Instruct",
        total_steps=150,
        benchmark="alfworld",
        hardware="8xH100",
        backend="verl",
        data_order_seed=0,
        config=SHARED_CONFIG,
    )
    store.update_run_state(
        db, "rh-early", status="running", last_step=119, step1_rollout_hash="abc123"
    )
    for step in (5, 10):
        store.record_evaluation(
            db, "rh-early", step, success_rate=30.0, episodes=128, temperature=0.4
        )
    store.ensure_run(db, "oracle", kind="evaluation", benchmark="alfworld", base_model=BASE_MODEL)
    store.record_evaluation(db, "oracle", 0, success_rate=100.0, episodes=128, temperature=0.4)
    text = card_text(db, "rh")
    assert "the 2 runs checked passed ccpo's isolation check" in text
    claim = next(
        claim for claim in card_claims(db, "rh", status="interim") if claim.kind == "isolation"
    )
    assert sorted(claim.runs) == ["gs", "rh"]


# ---- cause 6: no difference without its interval ---------------------------------------------


def test_cause6_no_difference_is_stated_for_an_arm_without_a_seed(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    add_run(db, "grpo", "grpo", mean=75.0, sd=5.0, n=10, best=82.0)
    db["runs"].update(store.get_run(db, "grpo")["id"], {"seed": None})
    text = card_text(db, "rh")
    assert "+8.5" not in text
    comparison = next(
        c for c in card_claims(db, "rh", status="interim") if c.kind == "arm-comparison"
    )
    assert comparison.difference is None and "no recorded seed" in comparison.no_test


def test_cause6_resolved_needs_an_interval_that_excludes_zero(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    # Three seeds per arm, +3.9 points apart with seed noise: the interval covers zero.
    for seed, (a, b) in enumerate(((84.0, 72.0), (72.0, 76.0), (80.0, 76.3))):
        add_run(db, f"rh-{seed}", "return-hard", mean=a, sd=4.0, n=10, best=a + 8, seed=seed)
        add_run(db, f"gs-{seed}", "global-successor", mean=b, sd=4.0, n=10, best=b + 8, seed=seed)
    pair = compare_runs(db).pairs[0]
    assert pair.first.n_seeds == pair.second.n_seeds == 3
    assert pair.test["ci_low"] < 0 < pair.test["ci_high"]
    assert pair.resolved is False
    text = card_text(db, "rh-0")
    row = next(line for line in text.splitlines() if line.startswith("| CCPO global gate"))
    assert "95% CI" in row and " p " in row and "resolved" not in row


def test_cause6_an_arm_without_a_recorded_arm_is_not_compared(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    add_run(db, "mystery", None, mean=70.0, sd=5.0, n=10, best=80.0)
    claims = card_claims(db, "rh", status="interim")
    against = [c for c in claims if c.kind == "arm-comparison"]
    assert against and all(c.difference is None for c in against)
    assert "not recorded" in against[0].no_test
    text = card_text(db, "rh")
    assert "| (run mystery" not in text  # never a row among "the arms compared with this one"
    assert "Not compared, their arm not recorded: `(run mystery: arm not recorded)` (1 run" in text


def test_cause6_power_names_its_test_and_whether_it_is_exact(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for seed in range(3):
        add_run(
            db,
            f"rh-{seed}",
            "return-hard",
            mean=80.0 + 2 * seed,
            sd=4.0,
            n=10,
            best=88.0 + 2 * seed,
            seed=seed,
        )
        add_run(
            db,
            f"gs-{seed}",
            "global-successor",
            mean=75.0 + seed,
            sd=4.0,
            n=10,
            best=83.0 + seed,
            seed=seed,
            hardware=f"h{seed}",
        )
    row = compare_runs(db).power["pairs"][0]  # same first rollouts: the paired test
    assert row["test"] == "paired t" and row["power_method"].startswith("exact")
    for seed in range(3):  # first rollouts not shared: Welch's test
        db["runs"].update(store.get_run(db, f"gs-{seed}")["id"], {"step1_rollout_hash": None})
    row = compare_runs(db).power["pairs"][0]
    assert row["test"] == "Welch t" and row["power_method"].startswith("approximate")


def test_cause6_constant_window_is_undefined_never_converged(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_counted_run(db, "rh", "return-hard", [0] * 10, 8, seed=0, recorded=True)
    window = next(c for c in card_claims(db, "rh", status="interim") if c.kind == "window")
    assert window.verdict == "not judged" and "undefined" in window.note
    text = card_text(db, "rh")
    assert "Converged window" not in text and "undefined" in text


# ---- cause 7: no word from nowhere ------------------------------------------------------------


def test_cause7_no_none_when_total_steps_are_not_recorded(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db,
        "rh",
        arm=ExternalArm("return-hard"),
        seed=0,
        base_model=BASE_MODEL,
        benchmark="alfworld",
        backend="verl",
    )
    store.update_run_state(db, "rh", status="running", last_step=8)
    for step in range(1, 9):
        store.record_evaluation(
            db, "rh", step, success_rate=10.0 * step, episodes=128, temperature=0.4
        )
    text = card_text(db, "rh", window_start=2)
    assert "None" not in text.split("```")[0]
    assert "INTERIM: step 8 (total steps not recorded)" in text


def test_cause7_left_out_paragraph_names_settings_not_fingerprints(tmp_path):
    import re

    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    for index, arm in enumerate(("grpo", "global-successor", "return-hard-fbjw", "grpo")):
        add_run(
            db,
            f"small-{index}",
            arm,
            mean=60.0,
            sd=5.0,
            n=10,
            best=70.0,
            base_model=SMALL,
            seed=index,
        )
    text = card_text(db, "rh")
    left_out = next(line for line in text.splitlines() if line.startswith("Left out"))
    assert not re.search(r"[0-9a-f]{64}", left_out)
    assert left_out.count(SMALL) == 1 and "4 runs" in left_out
    summary = build_card_context(db, "rh").summary
    assert len(summary["excluded_runs"]) == 4  # every run and its differences stay in the summary


# ---- cause 8: one interim/final decision ------------------------------------------------------


def test_cause8_card_auto_renders_the_final_card_push_to_hub_publishes(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db,
        "short",
        arm=ExternalArm("return-hard"),
        seed=0,
        base_model=BASE_MODEL,
        benchmark="alfworld",
        backend="verl",
        total_steps=150,
    )
    store.update_run_state(db, "short", status="finished", last_step=150)
    # Evaluations early and one at the end: the default window (step >= 70) holds one.
    for step in (10, 20, 30, 40, 50, 60, 150):
        store.record_evaluation(
            db, "short", step, success_rate=10.0 + step / 5, episodes=128, temperature=0.4
        )
    published = build_card_context(db, "short", status="final")  # what --push-to-hub renders
    result = card_cli(tmp_path / "runs.db", "short", "--status", "auto")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["status"] == published.status == "final"


# ---- cause 9: raw config values never reach the card ------------------------------------------


def test_cause9_unexpanded_shell_variable_in_the_config_is_not_recorded(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    config = dict(
        SHARED_CONFIG, data=dict(SHARED_CONFIG["data"], train_batch_size="$train_data_size")
    )
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75, config=config)
    result = card_cli(tmp_path / "runs.db", "rh")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "invalid literal" not in result.output
    readme = (tmp_path / "rh" / "README.md").read_text()
    assert "$train_data_size tasks" not in readme


# ---- the claims list: the public entry point and the summary ----------------------------------


def test_card_claims_are_in_the_summary_and_the_template_decides_nothing(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    add_run(db, "grpo", "grpo", mean=72.0, sd=5.0, n=10, best=80.5)
    context = build_card_context(db, "rh")
    kinds = [claim["kind"] for claim in context.summary["claims"]]
    assert set(kinds) == {
        "status",
        "window",
        "best-point",
        "arm-seeds",
        "arm-comparison",
        "grpo",
        "isolation",
        "references",
        "published-rows",
        "left-out",
    }
    assert [
        claim.as_json() for claim in card_claims(db, "rh", status="interim")
    ] == context.summary["claims"]
    template = (
        Path(__file__).resolve().parents[1] / "templates" / "ccpo_model_card.md"
    ).read_text()
    for removed in (
        "grpo.present",
        "isolation_statement",
        "{{ excluded_runs }}",
        "trend.converged",
        "arms_table",
    ):
        assert removed not in template


def test_cause1_an_inferred_seed_joins_its_arms_recorded_seed_on_the_card(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_seeds(db, "return-hard", COUNTS_128, 128, range(2), prefix="rh")
    add_counted_run(db, "hgae-0", "hgae", COUNTS_128[::-1], 128, seed=0, recorded=False)
    add_counted_run(
        db, "hgae-1", "hgae", COUNTS_128[2:] + COUNTS_128[:2], 128, seed=1, recorded=True
    )
    compared = sorted((arm.arm_name, arm.n_seeds) for arm in compare_runs(db).arms)
    assert compared == [("hgae", 2), ("return-hard", 2)]
    for run in ("hgae-0", "rh-0"):
        context = build_card_context(db, run)
        assert sorted((arm.arm_name, arm.n_seeds) for arm in context.comparison.arms) == compared
        assert context.summary["excluded_runs"] == {}
        assert "Left out" not in render_card(context)


def test_window_successes_are_not_recorded_when_a_count_is_missing(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    window = build_card_context(db, "rh").summary["window"]
    assert window["episodes"] == 1280 and window["successes"] is None  # never "0 of 1280"


LAUNCH_SCRIPT = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "verl-agent"
    / "recipe"
    / "hgpo"
    / "run_qwen2.5_7b_alfworld_train.sh"
)


def test_cause9_a_real_launch_script_with_shell_variables_gives_a_card(tmp_path):
    from helpers_store import acceptance_rows, write_console

    db_path = tmp_path / "runs.db"
    log = write_console(acceptance_rows(), tmp_path / "console.log")
    command = f"ingest {log} --run rh --arm return-hard --base-model {BASE_MODEL} --config"
    ingested = runner.invoke(
        app, ["--db", str(db_path), *command.split(), str(LAUNCH_SCRIPT), "--json"]
    )
    assert ingested.exit_code == 0, ingested.output
    result = card_cli(db_path, "rh", "--window-start", "0")
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and "invalid literal" not in result.output
    readme = (tmp_path / "rh" / "README.md").read_text()
    assert "$train_data_size" not in section(readme, "training-setup").split("<details>")[0]


def test_cause1_a_sub_multiple_seed_does_not_fail_the_isolation_check(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_seeds(db, "return-hard", COUNTS_64_EVEN, 64, range(2), prefix="rh")
    add_counted_run(db, "rh-2", "return-hard", COUNTS_64_EVEN[::-1], 64, seed=2, recorded=False)
    add_seeds(db, "global-successor", COUNTS_64_EVEN[1:] + [40], 64, range(3), prefix="gs")
    comparison = compare_runs(db)
    assert [arm.n_seeds for arm in comparison.arms] == [3, 3]
    assert comparison.isolation["verdict"] == "passes", comparison.isolation["differences"]
    context = build_card_context(db, "rh-2")
    assert context.summary["excluded_runs"] == {}
    assert "the 6 runs checked passed ccpo's isolation check" in render_card(context)


def test_cause6_a_table_difference_without_interval_says_why(tmp_path):
    from ccpo_cli.report.compare_tables import comparisons_table

    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    add_run(db, "gs", "global-successor", mean=77.5, sd=6.3, n=9, best=86.7)
    table = comparisons_table(compare_runs(db))
    note = table.rows[0][-1].text
    assert "no test:" in note and "one seed" in note


REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs"


def test_cause3_on_real_logs_a_card_never_names_another_settings_grpo_run(tmp_path):
    db_path = tmp_path / "runs.db"
    for log, run, extra in (
        ("jonp07_grpo_run_alfworld.txt", "jonp-grpo-15b", ["--arm", "grpo"]),
        (
            "boerz_run_a_telemetry.csv",
            "boerz-rh-7b",
            ["--arm", "return-hard", "--base-model", BASE_MODEL, "--benchmark", "alfworld"],
        ),
    ):
        command = ["--db", str(db_path), "ingest", str(REAL_LOGS / log), "--run", run, *extra]
        assert runner.invoke(app, command).exit_code == 0
    result = card_cli(db_path, "boerz-rh-7b", "--status", "auto")
    assert result.exit_code == 0, result.output
    readme = (tmp_path / "boerz-rh-7b" / "README.md").read_text()
    grpo = section(readme, "does-and-does-not-show")
    assert "jonp-grpo-15b" not in grpo  # a 1.5B run is never "in this run's setting" of a 7B card
    assert "No GRPO run of this run's setting is recorded in the database." in grpo
    left_out = next(line for line in readme.splitlines() if line.startswith("Left out"))
    assert "base model Qwen/Qwen2.5-1.5B-Instruct (this run: Qwen/Qwen2.5-7B-Instruct)" in left_out


def test_cause1_a_unit_shows_the_count_it_is_pooled_by(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_counted_run(db, "ppo-1", "ppo", COUNTS_128, 128, seed=1, recorded=True)
    add_counted_run(db, "ppo-2", "ppo", COUNTS_64_EVEN, 64, seed=2, recorded=False)  # inferred 32
    add_counted_run(db, "gigpo-1", "gigpo", COUNTS_64_EVEN, 64, seed=1, recorded=False)
    # Four distinct rates (25, 50, 75, 51.5625 %): too few to infer a count.
    add_counted_run(db, "gigpo-2", "gigpo", [32, 64, 96, 66, 32, 64], 128, seed=2, recorded=False)
    arms = {arm.arm_name: arm for arm in compare_runs(db).arms}
    assert arms["ppo"].protocol["episodes"] == 128 and arms["ppo"].n_seeds == 2
    assert arms["gigpo"].protocol["episodes"] is None and "32" not in arms["gigpo"].name
