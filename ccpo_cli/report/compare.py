"""The comparison document behind `ccpo compare --json`, the tables, the plot and the cards.

`compare_runs` reads runs.db once and returns plain data: per run the converged window and
the best evaluation with its selection bias, per arm the across-seed summary, pairwise arm
statistics, and an isolation check that lists everything besides the estimator that differs
between the compared runs. Every number carries the evaluation ids it came from.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections import defaultdict
from itertools import combinations
from typing import Any, Iterable

import sqlite_utils

from ccpo_cli import stats
from ccpo_cli.arms import list_arms, load_arm
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.report import DEFAULT_WINDOW_START
from ccpo_cli.store.facts import flatten
from ccpo_cli.store.queries import best_evaluation, evaluations_for_runs, list_runs
from ccpo_cli.task_types import TASK_TYPES

# verl-agent's ALFWorld protocol evaluates 128 held-out episodes; used for the single-eval
# interval only when the evaluations did not record their episode count (flagged as assumed).
PROTOCOL_EVAL_EPISODES = 128
MIN_SEEDS_RESOLVED = 3
UNRESOLVED_NOTE = "unresolved until replicated"

# Run fields that must agree between every compared run for the comparison to isolate the
# estimator, and fields that must agree between runs of the same seed across arms.
SHARED_RUN_FIELDS = ("base_model", "benchmark", "hardware", "backend", "total_steps")
PER_SEED_RUN_FIELDS = ("data_order_seed", "step1_rollout_hash")
# Config keys that belong to the estimator (allowed to differ between arms): any key under an
# `arm` or `ccpo` namespace, the estimator selector, and any key named like an arm flag (Hydra
# `+algorithm.ccpo.<flag>`, `algorithm.gamma`). Environment variables ccpo sets for its Ray
# workers (CCPO_*) carry the arm and the run. Seeds are checked separately, per arm.
ESTIMATOR_KEY_PARTS = {"arm", "ccpo", "adv_estimator", "arm_flags", "arm_fingerprint", "fingerprint"}
# Keys that only name or locate one run (paths, names, resume state) or restate other keys.
RUN_LOCAL_KEY_PARTS = {
    "run", "run_name", "name", "experiment_name", "default_local_dir", "run_dir", "metrics_file",
    "metrics_path", "output_dir", "checkpoint_dir", "resume", "resume_mode", "resume_from_path",
    "hydra_overrides", "ray_address", "seed", "data_order_seed", "created_at", "wall_time",
}


@functools.lru_cache(maxsize=1)
def _arm_flag_names() -> frozenset[str]:
    from ccpo_cli.arms import FLAG_NAMES

    return frozenset(FLAG_NAMES)


def _is_estimator_or_local(key: str) -> bool:
    parts = [part.lstrip("+") for part in key.split(".")]
    if any(part.startswith("CCPO_") for part in parts):
        return True
    if ESTIMATOR_KEY_PARTS.intersection(parts) or parts[-1] in _arm_flag_names():
        return True
    return parts[-1] in RUN_LOCAL_KEY_PARTS or parts[0] in RUN_LOCAL_KEY_PARTS


def _best(evaluations: list[dict[str, Any]], window: dict[str, Any], window_evals: list[dict]) -> dict | None:
    candidates = window_evals or evaluations
    best = best_evaluation(candidates)
    if best is None:
        return None
    n_candidates = len(candidates)
    bias_sd = stats.expected_max_of_normals(n_candidates)
    sd = window["sd"] if window_evals else None
    return {
        "step": best["step"],
        "success": best["success_rate"],
        "task_types": {key: best["task_types"][key]["success"] for key in TASK_TYPES if key in best["task_types"]},
        "task_type_episodes": {
            key: best["task_types"][key]["episodes"] for key in TASK_TYPES if key in best["task_types"]
        },
        "mean_turns": best["mean_turns"],
        "episodes": best["episodes"],
        "successes": best["successes"],
        "train_success_rate": best["train_success_rate"],
        "evaluation_id": best["id"],
        "chosen_from": "window" if window_evals else "all evaluations",
        "n_candidates": n_candidates,
        "expected_max_bias_sd": bias_sd,
        "expected_max_bias_points": None if sd is None else bias_sd * sd,
    }


def _episodes_per_eval(window_evals: list[dict]) -> tuple[int, bool]:
    known = [row["episodes"] for row in window_evals if row["episodes"]]
    if known:
        return int(statistics.median(known)), False
    return PROTOCOL_EVAL_EPISODES, True


def _single_eval_interval(window: dict, window_evals: list[dict], confidence: float) -> dict | None:
    if window["mean"] is None:
        return None
    episodes, assumed = _episodes_per_eval(window_evals)
    low, high = stats.wilson_interval(window["mean"] / 100 * episodes, episodes, confidence)
    return {
        "at": window["mean"],
        "episodes": episodes,
        "episodes_assumed": assumed,
        "confidence": confidence,
        "low": 100 * low,
        "high": 100 * high,
        "half_width": 100 * (high - low) / 2,
    }


def _window_task_types(window_evals: list[dict]) -> dict[str, dict]:
    result = {}
    for key in TASK_TYPES:
        rows = [row["task_types"][key] for row in window_evals if key in row["task_types"]]
        if not rows:
            continue
        episode_counts = [row["episodes"] for row in rows if row["episodes"] is not None]
        summary = stats.mean_sd_n([row["success"] for row in rows])
        summary["episodes"] = sum(episode_counts) if len(episode_counts) == len(rows) else None
        result[key] = summary
    return result


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
    window_raw = stats.window_stats(
        [row["step"] for row in evaluations], [row["success_rate"] for row in evaluations], window_start
    )
    window_evals = [evaluations[i] for i in window_raw.pop("indices")]
    window = dict(window_raw, start=window_start, evaluation_ids=[row["id"] for row in window_evals])
    episode_counts = [row["episodes"] for row in window_evals]
    window["pooled_interval"] = None
    if window_evals and all(count is not None for count in episode_counts):
        window["episodes"] = sum(episode_counts)
        window["successes"] = sum(row["successes"] or 0 for row in window_evals)
        if all(row["successes"] is not None for row in window_evals):
            # Measurement precision of the whole window (all its episodes pooled), not of one eval.
            low, high = stats.wilson_interval(window["successes"], window["episodes"], confidence)
            window["pooled_interval"] = {"low": 100 * low, "high": 100 * high, "confidence": confidence}
    else:
        window["episodes"] = window["successes"] = None
    best = _best(evaluations, window, window_evals)
    interval = _single_eval_interval(window, window_evals, confidence)
    if best is not None and interval is not None:
        binomial_sd = (interval["at"] * (100 - interval["at"]) / interval["episodes"]) ** 0.5
        best["expected_max_bias_points_binomial"] = best["expected_max_bias_sd"] * binomial_sd
    last_eval_step = max((row["step"] for row in evaluations), default=None)
    steps_seen = [step for step in (run["last_step"], last_eval_step) if step is not None]
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
        "n_evaluations": len(evaluations),
        "window": window,
        "window_task_types": _window_task_types(window_evals),
        "best": best,
        "single_eval_interval": interval,
        "last_step": max(steps_seen) if steps_seen else None,
        "last_eval_step": last_eval_step,
        "total_steps": run["total_steps"],
        "conflicts": run["n_conflicts"],
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
        if with_window:
            tasks, matrix = _seed_type_matrix(with_window)
            arm["iqm"] = dict(
                stats.stratified_bootstrap_iqm(matrix, reps=bootstrap_reps, seed=bootstrap_seed), tasks=tasks
            )
        else:
            arm["iqm"] = None
        arms.append(arm)
    arms.sort(key=lambda arm: (arm["mean"] is None, -(arm["mean"] or 0.0), arm["arm"]))
    return arms


def _arm_comparisons(arms: list[dict], run_entries: list[dict]) -> list[dict]:
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
        comparisons.append(
            {
                "arm_a": first["arm"],
                "arm_b": second["arm"],
                "difference": welch["difference"],
                "welch": welch,
                "probability_of_improvement": stats.probability_of_improvement(x, y),
                "poi_tasks": tasks,
                "resolved": first["resolved"] and second["resolved"],
                "note": None if first["resolved"] and second["resolved"] else UNRESOLVED_NOTE,
            }
        )
    return comparisons


def _describe(values: dict[str, Any]) -> str:
    by_value: dict[str, list[str]] = defaultdict(list)
    for run, value in values.items():
        by_value["not recorded" if value is None else json.dumps(value)].append(run)
    return " vs ".join(f"{value} ({', '.join(runs)})" for value, runs in by_value.items())


def _field_check(name: str, values: dict[str, Any], differences: list[str], not_recorded: list[str]) -> None:
    distinct = {json.dumps(value, sort_keys=True) for value in values.values()}
    if len(distinct) <= 1:
        if all(value is None for value in values.values()):
            not_recorded.append(name)
        return
    differences.append(f"{name}: {_describe(values)}")


def _isolation(runs: list[dict], run_entries: list[dict], evaluations: dict[int, list[dict]]) -> dict:
    differences: list[str] = []
    not_recorded: list[str] = []
    if len(runs) < 2:
        return {"estimator_only": True, "compared_runs": [run["name"] for run in runs],
                "differences": [], "not_recorded": [],
                "note": "one run: nothing to compare" if runs else "no runs: nothing to compare"}
    for field in SHARED_RUN_FIELDS:
        _field_check(field, {run["name"]: run[field] for run in runs}, differences, not_recorded)
    seeds_by_arm: dict[str, set] = defaultdict(set)
    for entry in run_entries:
        seeds_by_arm[_arm_label(entry)].add(entry["seed"])
    if len({frozenset(seeds) for seeds in seeds_by_arm.values()}) > 1:
        differences.append(
            "seed: " + " vs ".join(
                f"{sorted(seeds, key=str)} ({arm})" for arm, seeds in seeds_by_arm.items()
            )
        )
    elif len(seeds_by_arm) == 1 and len(runs) > 1:
        _field_check("seed", {run["name"]: run["seed"] for run in runs}, differences, not_recorded)
    by_seed: dict[Any, list[dict]] = defaultdict(list)
    for run in runs:
        by_seed[run["seed"]].append(run)
    for field in PER_SEED_RUN_FIELDS:
        for seed, members in by_seed.items():
            label = field if len(by_seed) == 1 else f"{field} (seed {seed})"
            if len(members) > 1:
                _field_check(label, {run["name"]: run[field] for run in members}, differences, not_recorded)
            elif len(by_seed) == 1 and members[0][field] is None:
                not_recorded.append(label)
    fingerprints_by_arm: dict[str, set] = defaultdict(set)
    for run in runs:
        if run["arm"] is not None and run["arm_fingerprint"] is not None:
            fingerprints_by_arm[run["arm"]].add(run["arm_fingerprint"])
    for arm, fingerprints in fingerprints_by_arm.items():
        if len(fingerprints) > 1:
            differences.append(f"arm {arm} has {len(fingerprints)} different fingerprints: {sorted(fingerprints)}")
    configs = {}
    for run in runs:
        config = run["config"] if isinstance(run["config"], dict) else None
        configs[run["name"]] = (
            None if config is None
            else {key: value for key, value in flatten(config).items() if not _is_estimator_or_local(key)}
        )
    recorded = {name: flat for name, flat in configs.items() if flat is not None}
    if recorded and len(recorded) < len(configs):
        differences.append(f"config: recorded for {sorted(recorded)} only")
    keys = sorted({key for flat in recorded.values() for key in flat})
    for key in keys:
        values = {name: flat.get(key) for name, flat in recorded.items()}
        if len({json.dumps(value, sort_keys=True) for value in values.values()}) > 1:
            differences.append(f"config {key}: {_describe(values)}")
    for protocol_field in ("temperature", "episodes", "split"):
        values = {
            run["name"]: sorted({row[protocol_field] for row in evaluations.get(run["id"], [])}, key=str)
            for run in runs
        }
        _field_check(f"evaluation {protocol_field}", values, differences, [])
    return {
        "estimator_only": not differences,
        "compared_runs": [run["name"] for run in runs],
        "differences": differences,
        "not_recorded": not_recorded,
        "note": None,
    }


def compare_runs(
    db: sqlite_utils.Database,
    runs: Iterable[str] | None = None,
    window_start: int = DEFAULT_WINDOW_START,
    *,
    split: str = "heldout",
    confidence: float = stats.DEFAULT_CONFIDENCE,
    bootstrap_reps: int = 2000,
    bootstrap_seed: int = 0,
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
    evaluations = evaluations_for_runs(db, [run["id"] for run in chosen], split=split, provenance=False)
    run_entries = [_run_entry(run, evaluations[run["id"]], window_start, confidence) for run in chosen]
    known_arms = _known_arm_flags({run["arm"] for run in chosen if run["arm"]})
    for run, entry in zip(chosen, run_entries):
        entry.update(_arm_definition(run, known_arms))
    arms = _arm_entries(run_entries, bootstrap_reps, bootstrap_seed)
    return {
        "window_start": window_start,
        "split": split,
        "runs": run_entries,
        "arms": arms,
        "comparisons": _arm_comparisons(arms, run_entries),
        "isolation": _isolation(chosen, run_entries, evaluations),
    }
