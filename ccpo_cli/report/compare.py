"""The comparison document behind `ccpo compare --json`, the tables, the plot and the cards.

`compare_runs` reads runs.db once and returns plain data: per run the converged window and
the best evaluation with its selection bias, per arm the across-seed summary, pairwise arm
statistics, and an isolation check that lists everything besides the estimator that differs
between the compared runs. Every number carries the evaluation ids it came from.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import combinations

import sqlite_utils

from ccpo_cli import stats
from ccpo_cli.arms import list_arms, load_arm
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.report import DEFAULT_WINDOW_START
from ccpo_cli.report.isolation import isolation_check
from ccpo_cli.report.power import power_report
from ccpo_cli.report.window import run_state, window_entry
from ccpo_cli.store.facts import run_facts
from ccpo_cli.store.queries import evaluations_for_runs, list_runs, run_conflicts
from ccpo_cli.task_types import TASK_TYPES

MIN_SEEDS_RESOLVED = 3
UNRESOLVED_NOTE = "unresolved until replicated"
# An interval across seeds, or P(a > b), from one seed per arm is degenerate (zero width, 0 or 1).
MIN_SEEDS_INTERVAL = 2
NEEDS_SEEDS_NOTE = "needs ≥ 2 seeds"


def _known_arm_flags(arm_names: set[str]) -> dict[str, tuple[str, dict]]:
    """Fingerprint and flags of each named arm that configs/arms still defines."""
    known = set(list_arms())
    flags = {}
    for name in arm_names & known:
        try:
            arm = load_arm(name)
        except CcpoError:
            continue  # a broken arm file is the arms command's business, not the comparison's
        flags[name] = (arm.fingerprint, arm.flags())
    return flags


def _arm_definition(run: dict, known_arms: dict[str, tuple[str, dict]]) -> dict:
    # The flags are only shown when the arm file still computes what the run recorded.
    if run["arm"] not in known_arms:
        return {"arm_flags": None, "arm_fingerprint_current": None}
    fingerprint, flags = known_arms[run["arm"]]
    if run["arm_fingerprint"] is None:
        return {"arm_flags": flags, "arm_fingerprint_current": None}
    matches = fingerprint == run["arm_fingerprint"]
    return {"arm_flags": flags if matches else None, "arm_fingerprint_current": matches}


def _run_entry(run: dict, evaluations: list[dict], window_start: int, confidence: float) -> dict:
    facts = run.get("facts") or {}
    measured = window_entry(evaluations, facts, window_start, confidence)
    best, interval = measured["best"], measured["single_eval_interval"]
    if best is not None and interval is not None:
        binomial_sd = (interval["at"] * (100 - interval["at"]) / interval["episodes"]) ** 0.5
        best["expected_max_bias_points_binomial"] = best["expected_max_bias_sd"] * binomial_sd
    last_eval_step = max((row["step"] for row in evaluations), default=None)
    steps_seen = [step for step in (run["last_step"], last_eval_step) if step is not None]
    last_step = max(steps_seen) if steps_seen else None
    totals = sorted({int(value) for value in [run["total_steps"], *run.get("fact_conflicts", {}).get("total_steps", [])]
                     if value is not None})
    return {
        "run": run["name"],
        "run_id": run["id"],
        "arm": run["arm"],
        "arm_fingerprint": run["arm_fingerprint"],
        "seed": run["seed"],
        "base_model": run["base_model"],
        "benchmark": run["benchmark"],
        "backend": run["backend"],
        "status": run["status"],
        "run_state": run_state(run["status"], last_step, totals),
        "n_evaluations": len(evaluations),
        **measured,
        "last_step": last_step,
        "last_eval_step": last_eval_step,
        "total_steps": run["total_steps"],
        "total_steps_recorded": totals,
        "facts": facts,
        "conflicts": run["n_conflicts"],
        "conflicting_steps": run.get("conflicting_steps", []),
        "fact_conflicts": run.get("fact_conflicts", {}),
        "evaluations": [
            {"evaluation_id": row["id"], "step": row["step"], "success": row["success_rate"],
             "mean_turns": row["mean_turns"]}
            for row in evaluations
        ],
    }


def _seed_type_matrix(entries: list[dict]) -> tuple[list[str], list[list[float]]]:
    # Task types are the "tasks" of rliable's stratified bootstrap; use the ones every seed has.
    shared = [key for key in TASK_TYPES if all(key in entry["window_task_types"] for entry in entries)]
    if shared:
        return shared, [[entry["window_task_types"][key]["mean"] for key in shared] for entry in entries]
    return ["all"], [[entry["window"]["mean"]] for entry in entries]


def _arm_label(entry: dict) -> str:
    return entry["arm"] if entry["arm"] is not None else f"(run {entry['run']})"


def _arm_entries(run_entries: list[dict], bootstrap_reps: int, bootstrap_seed: int) -> list[dict]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for entry in run_entries:
        grouped[_arm_label(entry)].append(entry)
    arms = []
    for label, members in grouped.items():
        with_window = [entry for entry in members if entry["window"]["n"]]
        seed_means = [entry["window"]["mean"] for entry in with_window]
        if len(with_window) == 1:
            only = with_window[0]["window"]
            summary = {"mean": only["mean"], "sd": only["sd"], "n": only["n"], "sd_over": "evaluations"}
        else:
            summary = dict(stats.mean_sd_n(seed_means), sd_over="seeds")
        n_seeds = len(with_window)
        arm = {
            "arm": label,
            "arm_recorded": members[0]["arm"] is not None,
            "n_seeds": n_seeds,
            **summary,
            "runs": [entry["run"] for entry in members],
            "seeds": [entry["seed"] for entry in with_window],
            "seed_window_means": seed_means,
            "n_evaluations": sum(entry["window"]["n"] for entry in with_window),
            "evaluation_ids": [i for entry in with_window for i in entry["window"]["evaluation_ids"]],
            "fingerprints": sorted({entry["arm_fingerprint"] for entry in members if entry["arm_fingerprint"]}),
            "resolved": n_seeds >= MIN_SEEDS_RESOLVED,
            "note": None if n_seeds >= MIN_SEEDS_RESOLVED else UNRESOLVED_NOTE,
        }
        arm["headline"] = bool(with_window) and all(entry["window"]["headline"] for entry in with_window)
        arm["headline_note"] = next((entry["window"]["headline_note"] for entry in with_window
                                     if not entry["window"]["headline"]), None)
        if with_window:
            tasks, matrix = _seed_type_matrix(with_window)
            iqm = stats.stratified_bootstrap_iqm(matrix, reps=bootstrap_reps, seed=bootstrap_seed)
            if n_seeds < MIN_SEEDS_INTERVAL:
                # Resampling one seed gives back that seed: a zero-width interval, not a result.
                iqm.update(ci_low=None, ci_high=None)
            arm["iqm"] = dict(iqm, tasks=tasks, note=None if n_seeds >= MIN_SEEDS_INTERVAL else NEEDS_SEEDS_NOTE)
        else:
            arm["iqm"] = None
        arms.append(arm)
    arms.sort(key=lambda arm: (arm["mean"] is None, -(arm["mean"] or 0.0), arm["arm"]))
    return arms


def _arm_comparisons(arms: list[dict], run_entries: list[dict], isolation_of: Callable[[list[str]], dict]) -> list[dict]:
    by_arm: dict[str, list[dict]] = defaultdict(list)
    for entry in run_entries:
        if entry["window"]["n"]:
            by_arm[_arm_label(entry)].append(entry)
    comparisons = []
    for first, second in combinations([arm for arm in arms if arm["n_seeds"]], 2):
        a_runs, b_runs = by_arm[first["arm"]], by_arm[second["arm"]]
        tasks_a, _ = _seed_type_matrix(a_runs)
        tasks_b, _ = _seed_type_matrix(b_runs)
        tasks = [task for task in tasks_a if task in tasks_b and task != "all"]
        if tasks:
            x = [[entry["window_task_types"][task]["mean"] for task in tasks] for entry in a_runs]
            y = [[entry["window_task_types"][task]["mean"] for task in tasks] for entry in b_runs]
        else:
            tasks = ["all"]
            x = [[entry["window"]["mean"]] for entry in a_runs]
            y = [[entry["window"]["mean"]] for entry in b_runs]
        welch = stats.welch_t_test(first["seed_window_means"], second["seed_window_means"])
        enough = min(first["n_seeds"], second["n_seeds"]) >= MIN_SEEDS_INTERVAL
        pair = isolation_of([entry["run"] for entry in a_runs + b_runs])
        comparisons.append(
            {
                "arm_a": first["arm"],
                "arm_b": second["arm"],
                "difference": welch["difference"],
                "welch": welch,
                "probability_of_improvement": stats.probability_of_improvement(x, y) if enough else None,
                "poi_note": None if enough else NEEDS_SEEDS_NOTE,
                "poi_tasks": tasks,
                "isolation": {key: pair[key] for key in ("verdict", "differences", "not_recorded")},
                "resolved": first["resolved"] and second["resolved"],
                "note": None if first["resolved"] and second["resolved"] else UNRESOLVED_NOTE,
            }
        )
    return comparisons


def compare_runs(
    db: sqlite_utils.Database,
    runs: Iterable[str] | None = None,
    window_start: int = DEFAULT_WINDOW_START,
    *,
    split: str = "heldout",
    confidence: float = stats.DEFAULT_CONFIDENCE,
    bootstrap_reps: int = 2000,
    bootstrap_seed: int = 0,
    detect: float | None = None,
) -> dict:
    """The `ccpo compare --json` document (without schema_version) for the named runs
    (all runs when None or empty), in the order given (else by name).

    Keys: window_start, split, runs[], arms[], comparisons[], isolation. Success rates are
    percent. Per run: window {mean, sd, n, steps, evaluation_ids, episodes, successes, start},
    window_task_types {key: {mean, sd, n, episodes}}, best {step, success, task_types,
    task_type_episodes, mean_turns, train_success_rate, evaluation_id, n_candidates,
    expected_max_bias_sd, expected_max_bias_points (bias × window sd),
    expected_max_bias_points_binomial (bias × one evaluation's binomial sd)},
    single_eval_interval {at, episodes, episodes_assumed, low, high, half_width},
    last_step, last_eval_step, total_steps, conflicts, evaluations[] (the learning curve).
    Per arm: n_seeds, mean, sd, n (over evaluations for one seed, over seed means otherwise;
    `sd_over` says which), seed_window_means, iqm {iqm, ci_low, ci_high, ...}, resolved,
    note ("unresolved until replicated" below 3 seeds), fingerprints.
    power (ccpo_cli.report.power): per arm pair the test (paired t / Welch t), mdd, p and,
    with `detect`, seeds_needed per arm.

    Honesty keys: each window holds evaluations of one protocol (`protocol`, `protocol_mixed`,
    `left_out_evaluation_ids`), says whether it may be a headline (`headline`, `headline_note`:
    at least 3 evaluations) and whether it is converged (`trend`: OLS slope with its t interval;
    `converged`); best.bias_noise says which noise the bias is measured on (or why it is left
    out). Per run: run_state (running / stopped-early / finished), facts, conflicting_steps,
    fact_conflicts. Arms: iqm intervals and comparisons' probability_of_improvement are None with
    "needs ≥ 2 seeds" below two seeds per arm; each comparison carries its isolation verdict.
    isolation.verdict is passes / fails / unverifiable (estimator_only is verdict == passes).
    Document: protocol_mixed, conflicts {run: {steps, facts}}.
    """
    all_runs = list_runs(db)
    wanted = list(runs or [])
    if wanted:
        by_name = {run["name"]: run for run in all_runs}
        missing = [name for name in wanted if name not in by_name]
        if missing:
            raise InvalidInput(f"no run named {', '.join(map(repr, missing))} in the database")
        chosen = [by_name[name] for name in dict.fromkeys(wanted)]
    else:
        chosen = all_runs
    for run in chosen:
        recorded = run_facts(db, run["id"])
        run["facts"], run["fact_conflicts"] = recorded["values"], recorded["conflicts"]
        if run["hardware"] is None:
            run["hardware"] = run["facts"].get("hardware")  # an ingested run records it as a fact
        run["conflicting_steps"] = sorted({row["step"] for row in run_conflicts(db, run["id"])}) if run["n_conflicts"] else []
    evaluations = evaluations_for_runs(db, [run["id"] for run in chosen], split=split, provenance=False)
    run_entries = [_run_entry(run, evaluations[run["id"]], window_start, confidence) for run in chosen]
    arm_of = {entry["run"]: _arm_label(entry) for entry in run_entries}
    protocols = {entry["run"]: entry["window"]["protocol"] for entry in run_entries}
    by_name = {run["name"]: run for run in chosen}

    def isolation_of(names: list[str]) -> dict:
        return isolation_check([by_name[name] for name in names], arm_of, protocols)

    known_arms = _known_arm_flags({run["arm"] for run in chosen if run["arm"]})
    for run, entry in zip(chosen, run_entries):
        entry.update(_arm_definition(run, known_arms))
    arms = _arm_entries(run_entries, bootstrap_reps, bootstrap_seed)
    return {
        "window_start": window_start,
        "split": split,
        "runs": run_entries,
        "arms": arms,
        "comparisons": _arm_comparisons(arms, run_entries, isolation_of),
        "isolation": isolation_of([run["name"] for run in chosen]),
        "protocol_mixed": len({json.dumps(protocol, sort_keys=True) for protocol in protocols.values() if protocol}) > 1
        or any(entry["protocol_mixed"] for entry in run_entries),
        "conflicts": {entry["run"]: {"steps": entry["conflicting_steps"], "facts": entry["fact_conflicts"]}
                      for entry in run_entries if entry["conflicting_steps"] or entry["fact_conflicts"]},
        # Minimum detectable difference per arm pair (and seeds needed for `detect` points).
        "power": power_report(run_entries, {run["name"]: run.get("step1_rollout_hash") for run in chosen}, detect),
    }
