"""Every number is about the runs it names.

Each test is one of the awkward-data cases the issue lists: an arm trained with `--set`, runs
counted as seeds, two base models pooled, an evaluation-only run in the database, protocol
defaults (episodes per evaluation, the window start), and words the data does not carry.

Asked for in issue 19.
"""

from __future__ import annotations

import json
import re

import pytest
from helpers_cards import add_run
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.arms import load_arm
from ccpo_cli.cards import build_card_context, lint_card, render_card
from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.store.facts import record_run_facts
from ccpo_cli.store.identity import ExternalArm

runner = CliRunner()


def run_identity(db, run):
    from ccpo_cli.store.identity import run_identity as read  # imported here: the module is new

    return read(db, run)


def infer_episodes(rates):
    from ccpo_cli.store.identity import infer_episodes as infer

    return infer(rates)


MODEL_7B = "Qwen/Qwen2.5-7B-Instruct"


def record_series(db, run, rates, *, episodes=None, temperature=0.4, start=70, every=5):
    for index, rate in enumerate(rates):
        store.record_evaluation(
            db,
            run,
            start + every * index,
            success_rate=rate,
            episodes=episodes,
            temperature=temperature,
        )


def ingest_json(db_path, *args):
    result = runner.invoke(app, ["--db", str(db_path), *args])
    assert result.exit_code == 0, result.output
    return result


# ---- an arm trained with --set is its own arm --------------------------------------------------


def test_an_override_arm_is_recorded_typed_and_read_back_with_its_own_flags(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    override = load_arm("return-hard", {"rho": "0.59"})
    store.ensure_run(
        db, "rh-059", arm=override, seed=0, base_model=MODEL_7B, backend="verl", total_steps=150
    )
    store.ensure_run(
        db,
        "rh-plain",
        arm=load_arm("return-hard"),
        seed=1,
        base_model=MODEL_7B,
        backend="verl",
        total_steps=150,
    )
    for name in ("rh-059", "rh-plain"):
        record_series(db, name, [80.0, 82.0, 84.0, 81.0, 83.0], episodes=128)
    identity = run_identity(db, "rh-059")
    assert identity.arm.fingerprint == override.fingerprint != load_arm("return-hard").fingerprint
    assert identity.arm.flags["rho"] == 0.59 and identity.arm.overrides == {"rho": 0.59}
    assert identity.arm.label == "return-hard [rho=0.59]"
    document = compare_runs(db, None).as_json()
    arms = {arm["arm"]: arm for arm in document["arms"]}
    # Two arms, never one arm "return-hard" with seeds [0, 1]:
    assert set(arms) == {"return-hard", "return-hard [rho=0.59]"}
    assert arms["return-hard [rho=0.59]"]["runs"] == ["rh-059"] and arms["return-hard"]["runs"] == [
        "rh-plain"
    ]
    assert all(arm["n_seeds"] == 1 and not arm["resolved"] for arm in arms.values())


def test_an_override_arm_recorded_only_in_its_config_is_still_its_own_arm(tmp_path):
    """Runs recorded before the identity columns: the local trainer kept config.arm.flags (with the
    override applied) and the verl launcher config.arm.overrides; the card used to look for a
    config key neither writes (`arm_overrides`) and fell back to the plain arm's flags."""
    db = store.open_db(tmp_path / "runs.db")
    override = load_arm("return-hard", {"rho": "0.59"})
    config = {
        "backend": "local",
        "arm": {
            "name": "return-hard",
            "fingerprint": override.fingerprint,
            "flags": override.flags(),
        },
    }
    store.ensure_run(
        db,
        "old-local",
        arm=ExternalArm("return-hard", override.fingerprint),
        seed=0,
        base_model="ccpo-local-hashed-ngram-policy",
        backend="local",
        total_steps=10,
        config=config,
    )
    for step in range(0, 11, 2):
        store.record_evaluation(
            db, "old-local", step, success_rate=40.0 + step, episodes=64, temperature=0.4
        )
    store.update_run_state(db, "old-local", status="finished", last_step=10)
    text = render_card(build_card_context(db, "old-local", status="final"))
    assert re.search(r"^\| rho \| 0\.59 \|", text, re.MULTILINE)
    assert (
        override.fingerprint in text
        and "rho = 0 ⇒" not in text
        and "uniform sibling weighting" not in text
    )
    assert "`rho=0.59`" in text  # the flag set on top of the arm file is named
    assert lint_card(text) == []


@pytest.mark.slow
def test_ccpo_train_with_set_gives_a_card_with_its_flag_and_fingerprint_and_a_separate_arm(
    tmp_path,
):
    """The acceptance line: `ccpo train --arm return-hard --set rho=0.59`, then `ccpo card`."""
    db_path = tmp_path / "runs.db"
    common = [
        "--steps",
        "5",
        "--tasks",
        "2",
        "--group",
        "2",
        "--eval-every",
        "1",
        "--eval-games",
        "4",
        "--max-steps",
        "6",
        "--workers",
        "0",
    ]
    for run, extra in (("rh-059", ["--set", "rho=0.59"]), ("rh-plain", [])):
        outcome = runner.invoke(
            app,
            [
                "--db",
                str(db_path),
                "train",
                "--arm",
                "return-hard",
                "--backend",
                "local",
                "--run",
                run,
                *extra,
                *common,
            ],
        )
        assert outcome.exit_code == 0, outcome.output
    out = tmp_path / "card" / "README.md"
    outcome = runner.invoke(
        app,
        [
            "--db",
            str(db_path),
            "card",
            "--run",
            "rh-059",
            "--status",
            "final",
            "--output",
            str(out),
        ],
    )
    assert outcome.exit_code == 0, outcome.output
    text = out.read_text()
    fingerprint = load_arm("return-hard", {"rho": "0.59"}).fingerprint
    assert re.search(r"^\| rho \| 0\.59 \|", text, re.MULTILINE) and fingerprint in text
    assert "rho = 0 ⇒" not in text
    document = json.loads(runner.invoke(app, ["--db", str(db_path), "compare", "--json"]).stdout)
    labels = sorted(arm["arm"] for arm in document["arms"])
    assert labels == ["return-hard", "return-hard [rho=0.59]"]
    assert all(arm["n_seeds"] == 1 for arm in document["arms"])


# ---- runs are not seeds ----------------------------------------------------------------------


def test_five_runs_of_seed_zero_are_one_seed_and_not_resolved(tmp_path):
    db_path = tmp_path / "runs.db"
    db = store.open_db(db_path)
    log = tmp_path / "m.jsonl"
    rows = [{"step": 70 + 5 * i, "val/success_rate": (100 + i) / 128} for i in range(6)]
    log.write_text("".join(json.dumps(row) + "\n" for row in rows))
    for name in ("a", "b"):  # the same log ingested twice under two names
        ingest_json(
            db_path,
            "ingest",
            str(log),
            "--run",
            name,
            "--arm",
            "gigpo",
            "--seed",
            "0",
            "--benchmark",
            "alfworld",
            "--base-model",
            MODEL_7B,
            "--total-steps",
            "150",
            "--episodes",
            "128",
            "--temperature",
            "0.4",
            "--split",
            "heldout",
        )
    for index, name in enumerate(("c", "d", "e")):
        store.ensure_run(
            db,
            name,
            arm=load_arm("gigpo"),
            seed=0,
            base_model=MODEL_7B,
            total_steps=150,
            benchmark="alfworld",
        )
        record_run_facts(db, name, {"split": "heldout"}, source="test")
        record_series(db, name, [100 * (90 + index + i) / 128 for i in range(5)], episodes=128)
    arm = compare_runs(db, None).as_json()["arms"][0]
    assert arm["n_seeds"] == 1 and arm["seeds"] == [0] and not arm["resolved"]
    # The log ingested twice is one run (issue 29), not two runs averaged.
    assert arm["sd_over"] == "evaluations" and arm["repeated_seeds"] == {0: ["a", "c", "d", "e"]}
    assert arm["identical_runs"] == [["a", "b"]]
    assert "runs a, b hold the same evaluations (one log recorded 2 times)" in arm["seed_notes"][0]
    assert "seed 0: 4 runs averaged as one seed" in arm["seed_notes"][1]
    text = render_card(build_card_context(db, "c"))
    assert "at least two seeds" not in text and "one recorded seed" in text


def test_a_run_without_a_seed_counts_as_no_seed(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for name, seed in (("s0", 0), ("s1", 1), ("unseeded", None)):
        store.ensure_run(
            db, name, arm=load_arm("grpo"), seed=seed, base_model=MODEL_7B, total_steps=150
        )
        record_series(db, name, [60.0, 62.0, 61.0, 63.0, 60.0])
    arm = compare_runs(db, None).as_json()["arms"][0]
    assert arm["n_seeds"] == 2 and arm["seeds"] == [0, 1] and arm["unseeded_runs"] == ["unseeded"]
    assert len(arm["seed_window_means"]) == 2


def test_runs_of_two_base_models_are_never_one_arm(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db,
        "cpu",
        arm=load_arm("return-hard"),
        seed=0,
        base_model="ccpo-local-hashed-ngram-policy",
        backend="local",
        total_steps=150,
    )
    store.ensure_run(
        db, "rh-7b", arm=load_arm("return-hard"), seed=1, base_model=MODEL_7B, total_steps=150
    )
    record_series(db, "cpu", [50.0, 52.0, 55.0, 53.0, 54.0], episodes=128)
    record_series(db, "rh-7b", [80.0, 82.0, 81.0, 83.0, 80.0], episodes=128)
    document = compare_runs(db, None).as_json()
    assert len(document["arms"]) == 2 and all(arm["n_seeds"] == 1 for arm in document["arms"])
    assert {arm["base_model"] for arm in document["arms"]} == {
        "ccpo-local-hashed-ngram-policy",
        MODEL_7B,
    }
    assert all(
        "base model" in arm["arm"] for arm in document["arms"]
    )  # labels say what sets them apart
    assert document["comparisons"] == []  # not the same setting: nothing to compare
    assert document["unit_differences"]["return-hard"]


# ---- reference runs ----------------------------------------------------------------------------


@pytest.mark.slow
def test_an_evaluation_only_run_breaks_no_card(tmp_path):
    from helpers_local_train import generated_games

    db_path = tmp_path / "runs.db"
    ingest_json(
        db_path,
        "eval",
        "--run",
        "oracle-check",
        "--agent",
        "oracle",
        "--games",
        str(generated_games("heldout", 6)),
        "--workers",
        "0",
    )
    db = store.open_db(db_path)
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    out = tmp_path / "card" / "README.md"
    outcome = runner.invoke(
        app, ["--db", str(db_path), "card", "--run", "rh", "--output", str(out)]
    )
    assert outcome.exit_code == 0, outcome.output
    document = compare_runs(db, None).as_json()
    assert [reference["run"] for reference in document["references"]] == ["oracle-check"]
    assert (
        document["references"][0]["agent"] == "oracle"
        and document["references"][0]["mean"] == 100.0
    )
    assert all(arm["arm"] != "(run oracle-check)" for arm in document["arms"])
    assert document["reference_levels"]["agents"][0]["label"] == "oracle"
    refused = runner.invoke(
        app,
        [
            "--db",
            str(db_path),
            "card",
            "--run",
            "oracle-check",
            "--output",
            str(tmp_path / "o" / "README.md"),
        ],
    )
    assert (
        refused.exit_code == 3
        and "reference run" in refused.output
        and "--arm" not in refused.output
    )


# ---- protocol never invented -------------------------------------------------------------------


def test_episodes_per_evaluation_are_inferred_from_the_rates_never_assumed(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(db, "ws", arm=load_arm("gigpo"), seed=0, base_model=MODEL_7B, total_steps=150)
    counts = [27, 30, 33, 29, 31, 35, 28, 32, 34, 30]
    record_series(db, "ws", [100 * count / 64 for count in counts], episodes=None)
    identity = run_identity(db, "ws")
    assert identity.protocol.episodes == 64 and identity.protocol.episodes_basis.startswith(
        "inferred"
    )
    run = compare_runs(db, None).as_json()["runs"][0]
    interval = run["single_eval_interval"]
    assert interval["episodes"] == 64 and interval["half_width"] == pytest.approx(11.8, abs=1.5)
    # At the issue's rate: a 64-episode evaluation carries ±10.2 at about 73 %, not 128's ±7.3.
    from ccpo_cli import stats

    low, high = stats.wilson_interval(0.7 * 64, 64)
    assert 100 * (high - low) / 2 == pytest.approx(10.9, abs=0.8)
    text = render_card(build_card_context(db, "ws"))
    assert (
        "every rate is a multiple of 1/64" in text
        and "128" not in text.split("## Results")[1].split("##")[0]
    )


def test_rounded_or_uninformative_rates_leave_the_episodes_not_recorded():
    assert infer_episodes([50.0, 100.0, 0.0]) is None  # 0, 1/2 and 1 fit any even panel
    assert infer_episodes([42.2]) is None  # one rate printed to 3 digits fits many panels
    assert (
        infer_episodes([100 * k / 128 for k in (64, 96, 32, 112)]) is None
    )  # four even counts look like 1/8
    assert infer_episodes([100 * k / 128 for k in (101, 97, 99, 103, 105)]) == 128
    assert (
        infer_episodes([round(k / 64, 3) * 100 for k in (27, 30, 33, 29, 31, 35, 28, 37, 41, 23)])
        == 64
    )


def test_the_window_starts_at_the_same_share_of_every_run(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    for name, total in (("long", 150), ("short", 40)):
        store.ensure_run(
            db, name, arm=load_arm("grpo"), seed=0, base_model=MODEL_7B, total_steps=total
        )
        for step in range(0, total + 1, 10):
            store.record_evaluation(db, name, step, success_rate=step / total * 80, episodes=128)
    runs = {run["run"]: run for run in compare_runs(db, None).as_json()["runs"]}
    assert runs["long"]["window"]["start"] == 70 and runs["short"]["window"]["start"] == 19
    assert runs["short"]["window"]["steps"] == [20, 30, 40]
    assert compare_runs(db, None, window_start=100).as_json()["runs"][0]["window"]["start"] == 100


# ---- words the data does not carry -------------------------------------------------------------


def test_a_three_evaluation_window_is_never_called_converged(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(
        db, "short", arm=load_arm("grpo"), seed=0, base_model=MODEL_7B, total_steps=150
    )
    record_series(
        db, "short", [50.0, 75.0, 100.0], episodes=128, start=70, every=2
    )  # a perfect line
    window = compare_runs(db, None).as_json()["runs"][0]["window"]
    assert (
        window["converged"] is None
        and "too few evaluations to judge convergence" in window["trend"]["note"]
    )
    text = render_card(build_card_context(db, "short"))
    assert "Converged window" not in text and "the number to read (its trend" not in text
    assert "too few evaluations to judge convergence" in text and "+625.0" not in text
    assert "convergence not judged" in text.split("\n# ", 1)[1].split("\n", 1)[0]
    assert lint_card(text) == []


def test_no_checkpoint_is_claimed_without_a_record_and_no_snippet_without_a_repository(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    text = render_card(build_card_context(db, "rh"))
    assert (
        "The checkpoint published here" not in text
        and "No checkpoint is recorded with this card" in text
    )
    assert 'model_id = "rh"' not in text and "model_id" not in text
    assert "without a Hub repository" in text
    assert (
        "the arms above" not in text and "the table above" not in text
    )  # there is no table of arms
    store.record_checkpoint(db, "rh", 115, "checkpoints/global_step_115")
    # Saved on disk is not published: the card claims only an upload recorded as landed there.
    saved = render_card(build_card_context(db, "rh", repo_id="me/ccpo-rh"))
    assert (
        "The checkpoint published here" not in saved
        and "No checkpoint is recorded with this card" in saved
    )
    store.record_publication(
        db, "rh", "me/ccpo-other", commit_id="1" * 40, status="interim", checkpoint_step=115
    )
    assert "The checkpoint published here" not in render_card(
        build_card_context(db, "rh", repo_id="me/ccpo-rh")
    )
    store.record_publication(
        db, "rh", "me/ccpo-rh", commit_id="2" * 40, status="interim", checkpoint_step=115
    )
    published = render_card(build_card_context(db, "rh", repo_id="me/ccpo-rh"))
    assert "The checkpoint published here is the best-scoring one so far (step 115)" in published
    assert 'model_id = "me/ccpo-rh"' in published
    assert lint_card(text) == [] and lint_card(published) == []


def test_the_card_lint_finds_blank_runs_dangling_references_and_empty_cells(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    add_run(db, "rh", "return-hard", mean=83.5, sd=6.5, n=10, best=93.75)
    text = render_card(build_card_context(db, "rh"))
    assert "\n\n\n" not in text.split("---", 2)[2]
    assert lint_card(text) == []
    broken = text.replace(
        "## Training setup",
        "## Training setup\n\n\nSee the arms above.\n\n| a | |\n|---|---|\n| 1 | |",
    )
    problems = " ".join(lint_card(broken))
    assert "a run of blank lines" in problems
    assert "refers to a table of arms above" in problems
    assert "an empty table cell" in problems


def test_a_card_for_an_unknown_run_kind_says_what_it_needs(tmp_path):
    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(db, "bare", seed=0, base_model=MODEL_7B, total_steps=150)
    record_series(db, "bare", [50.0, 51.0, 52.0, 53.0, 54.0], episodes=128)
    with pytest.raises(InvalidInput, match="records no arm; ingest it with --arm"):
        build_card_context(db, "bare")


# ---- benchmarks as data, and what the run printed -------------------------------------------


def _ingest_webshop(tmp_path, name, **options):
    from helpers_benchmarks import write_webshop_console

    log, validations = write_webshop_console(tmp_path / f"{name}.log", **options)
    db_path = tmp_path / "runs.db"
    ingest_json(
        db_path,
        "ingest",
        str(log),
        "--run",
        name,
        "--arm",
        "gigpo",
        "--seed",
        "0",
        "--base-model",
        "Qwen/Qwen2.5-1.5B-Instruct",
    )
    return store.open_db(db_path), validations


def test_a_webshop_card_names_webshop_its_episodes_its_noise_and_no_alfworld_baseline(tmp_path):
    db, _ = _ingest_webshop(tmp_path, "ws", total_steps=150, test_freq=10)
    identity = run_identity(db, "ws")
    assert identity.benchmark == "webshop" and identity.protocol.episodes == 64
    text = render_card(build_card_context(db, "ws", status="final", repo_id="me/ws-gigpo"))
    # Everything the card says, less the verbatim recorded configuration (verl's own defaults
    # there name ALFWorld keys whatever the environment).
    body = re.sub(
        r"<details>\n<summary>Recorded run configuration.*?</details>",
        "",
        text.split("---", 2)[2],
        flags=re.S,
    )
    assert "WebShop" in body and "ALFWorld" not in body and "alfworld" not in body.lower()
    assert "Held-out evaluation on 64 WebShop episodes per evaluation" in body
    interval = compare_runs(db, None).as_json()["runs"][0]["single_eval_interval"]
    assert interval["episodes"] == 64 and f"±{interval['half_width']:.1f} points" in body
    assert (
        "GiGPO paper, Table 1" in body and "HGPO paper, Table 1, K=2" not in body
    )  # WebShop rows only
    assert (
        "Pick" not in body.split("Best single evaluation")[1].split("\n\n")[1]
    )  # no ALFWorld task types
    assert "shopping" in body  # the WebShop prompt, not the ALFWorld one
    assert lint_card(text) == []


def test_a_webshop_log_that_never_states_its_episodes_gets_them_from_its_rates(tmp_path):
    db, _ = _ingest_webshop(tmp_path, "silent", total_steps=40, test_freq=2, state_episodes=False)
    protocol = run_identity(db, "silent").protocol
    assert (
        protocol.episodes == 64
        and protocol.episodes_basis == "inferred: every rate is a multiple of 1/64"
    )


def test_the_flags_the_log_printed_replace_the_arm_files_and_the_contradiction_is_stated(tmp_path):
    db, _ = _ingest_webshop(tmp_path, "ws", total_steps=150, test_freq=10)
    identity = run_identity(db, "ws")
    registry = load_arm("gigpo")
    assert registry.adv_mode == "mean_std_norm"
    assert identity.arm.flags["adv_mode"] == "mean_norm"  # the log printed mean_norm
    assert identity.arm.contradictions["adv_mode"] == ("mean_norm", "mean_std_norm")
    assert identity.arm.fingerprint == load_arm("gigpo", {"adv_mode": "mean_norm"}).fingerprint
    assert identity.arm.recorded_fingerprint == registry.fingerprint
    text = render_card(build_card_context(db, "ws", status="final"))
    assert re.search(r"^\| adv_mode \| mean_norm \|", text, re.MULTILINE)
    assert "`adv_mode = mean_norm` where ccpo's arm file `gigpo` says `mean_std_norm`" in text


def test_a_failed_run_is_left_out_of_compare_unless_asked_for(tmp_path):
    from ccpo_cli.store.liveness import record_failure

    db = store.open_db(tmp_path / "runs.db")
    for name, seed in (("ok", 0), ("nan", 1)):
        store.ensure_run(
            db, name, arm=load_arm("grpo"), seed=seed, base_model=MODEL_7B, total_steps=150
        )
        record_series(db, name, [60.0, 62.0, 61.0, 63.0, 60.0], episodes=128)
    store.update_run_state(db, "nan", status="failed")
    record_failure(db, "nan", "advantage is not finite", step=3, quantity="advantage", value="nan")
    document = compare_runs(db, None).as_json()
    assert document["arms"][0]["runs"] == ["ok"] and "nan" in document["left_out"]
    assert "at step 3 (advantage not finite)" in document["left_out"]["nan"]
    assert compare_runs(db, None, include_failed=True).as_json()["arms"][0]["runs"] == ["nan", "ok"]


def test_a_run_trained_on_a_local_game_folder_can_be_carded_without_its_path(tmp_path):
    """The card lint refuses local paths; the setup table used to print the training folder's."""
    db = store.open_db(tmp_path / "runs.db")
    games = str(tmp_path / "my-games" / "train")
    config = {
        "backend": "local",
        "training_pool": {"games": 6, "source": games},
        "eval_panel": {
            "games": 4,
            "panel_games": 6,
            "source": str(tmp_path / "my-games" / "heldout"),
        },
        "train": {"tasks": 2, "group": 2, "train_games_dir": games},
    }
    store.ensure_run(
        db,
        "local-folder",
        arm=load_arm("return-hard"),
        seed=0,
        base_model="ccpo-local-hashed-ngram-policy",
        backend="local",
        benchmark="alfworld",
        total_steps=10,
        config=config,
    )
    for step in range(0, 11, 2):
        store.record_evaluation(
            db, "local-folder", step, success_rate=40.0 + step, episodes=4, temperature=0.4
        )
    store.update_run_state(db, "local-folder", status="finished", last_step=10)
    text = render_card(build_card_context(db, "local-folder", status="final"))
    assert str(tmp_path) not in text and lint_card(text) == []
    assert re.search(
        r"^\| training games \| 6, \(local path, not published\) \|$", text, re.MULTILINE
    )
