"""The comparison document behind `ccpo compare --json`, the tables, the plot and the cards.

`compare_runs` reads runs.db once and returns plain data: per run its window and the best
evaluation with its selection bias; per arm the across-seed summary; pairwise arm statistics;
the reference runs; and an isolation check that lists everything besides the estimator that
differs between the compared runs. Every number carries the evaluation ids it came from.

What is pooled with what is decided by each run's recorded identity (`store.identity`): an
"arm" of this document is a comparison unit, the runs that share arm fingerprint, base model,
backend, benchmark and evaluation protocol. Runs that differ in any of these are never pooled;
an arm trained with `--set` is its own arm. Within an arm, seeds are the distinct recorded seed
values: repeated runs of one seed are averaged into that seed and flagged, and a run without a
seed counts as none. Arms are compared pairwise only when they differ in the arm alone.
Evaluation-only runs (`ccpo eval` of the oracle, the random agent or a checkpoint) are
references, never arms. Failed runs are left out unless asked for.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from itertools import combinations

import sqlite_utils

from ccpo_cli import stats
from ccpo_cli.errors import InvalidInput
from ccpo_cli.report.isolation import isolation_check
from ccpo_cli.report.labels import arm_name, short_labels, unit_key
from ccpo_cli.report.power import power_report, shared_rollout_seeds
from ccpo_cli.report.window import (
    DEFAULT_WINDOW,
    run_state,
    run_window_start,
    task_type_keys,
    window_entry,
)
from ccpo_cli.store.facts import run_facts
from ccpo_cli.store.identity import (
    ComparisonUnit,
    RunIdentity,
    read_identities,
    unit_differences,
    unit_labels,
)
from ccpo_cli.store.liveness import annotate_runs
from ccpo_cli.store.queries import evaluations_for_runs, list_runs, run_conflicts
from ccpo_cli.store.records import STANDING
from ccpo_cli.store.retractions import resolutions, retracted_evaluations

MIN_SEEDS_RESOLVED = 3
UNRESOLVED_NOTE = "unresolved until replicated"
# An interval across seeds, or P(a > b), from one seed per arm is degenerate (zero width, 0 or 1).
MIN_SEEDS_INTERVAL = 2
NEEDS_SEEDS_NOTE = "needs ≥ 2 seeds"
NO_SEED_NOTE = "no recorded seed: runs without a seed count as no seed"


def _run_entry(
    run: dict,
    identity: RunIdentity,
    evaluations: list[dict],
    window_start: int,
    start_basis: str,
    confidence: float,
) -> dict:
    measured = window_entry(evaluations, identity.protocol, window_start, confidence)
    best, interval = measured["best"], measured["single_eval_interval"]
    if best is not None and interval is not None:
        binomial_sd = (interval["at"] * (100 - interval["at"]) / interval["episodes"]) ** 0.5
        best["expected_max_bias_points_binomial"] = best["expected_max_bias_sd"] * binomial_sd
    last_eval_step = max((row["step"] for row in evaluations), default=None)
    steps_seen = [step for step in (run["last_step"], last_eval_step) if step is not None]
    last_step = max(steps_seen) if steps_seen else None
    totals = sorted(
        {
            int(value)
            for value in [run["total_steps"], *run.get("fact_conflicts", {}).get("total_steps", [])]
            if value is not None
        }
    )
    measured["window"]["start_basis"] = start_basis
    arm = identity.arm
    return {
        "run": run["name"],
        "run_id": run["id"],
        "kind": identity.kind,
        "arm": arm.name if arm is not None else None,
        "arm_fingerprint": arm.fingerprint if arm is not None else None,
        "arm_flags": None if arm is None or arm.flags is None else dict(arm.flags),
        "arm_overrides": {} if arm is None else dict(arm.overrides),
        "arm_flags_source": None if arm is None else arm.flags_source,
        "arm_description": None if arm is None else arm.description,
        "seed": identity.seed,
        "base_model": identity.base_model,
        "benchmark": identity.benchmark,
        "backend": identity.backend,
        "protocol": identity.protocol.as_dict(),
        "identity": identity.as_dict(),
        "status": run["status"],
        "run_state": run_state(run["status"], last_step, totals),
        "n_evaluations": len(evaluations),
        **measured,
        "last_step": last_step,
        "last_eval_step": last_eval_step,
        "total_steps": run["total_steps"],
        "total_steps_recorded": totals,
        "facts": run.get("facts") or {},
        "conflicts": run["n_conflicts"],
        "conflicting_steps": run.get("conflicting_steps", []),
        "fact_conflicts": run.get("fact_conflicts", {}),
        "evaluations": [
            {
                "evaluation_id": row["id"],
                "step": row["step"],
                "success": row["success_rate"],
                "mean_turns": row["mean_turns"],
                "episodes": row["episodes"],
                "successes": row["successes"],
            }
            for row in evaluations
        ],
    }


def _seed_groups(members: list[dict]) -> tuple[dict, list[dict]]:
    """{seed: [entries with a window]} in seed order, and the entries with a window but no seed."""
    seeds: dict = defaultdict(list)
    unseeded = []
    for entry in members:
        if not entry["window"]["n"]:
            continue
        if entry["seed"] is None:
            unseeded.append(entry)
        else:
            seeds[entry["seed"]].append(entry)
    return dict(sorted(seeds.items())), unseeded


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def _seed_task_types(entries: list[dict]) -> dict[str, float]:
    """Per task type, the mean over a seed's runs of their window means (types every run has)."""
    keys = [
        key
        for key in entries[0]["window_task_types"]
        if all(key in entry["window_task_types"] for entry in entries)
    ]
    return {
        key: _mean(entry["window_task_types"][key]["mean"] for entry in entries) for key in keys
    }


def _seed_type_matrix(
    seed_types: list[dict[str, float]], seed_means: list[float]
) -> tuple[list[str], list[list[float]]]:
    # Task types are the "tasks" of rliable's stratified bootstrap; use the ones every seed has.
    shared = [
        key
        for key in (seed_types[0] if seed_types else {})
        if all(key in row for row in seed_types)
    ]
    if shared:
        return shared, [[row[key] for key in shared] for row in seed_types]
    return ["all"], [[mean] for mean in seed_means]


def _identical_runs(entries: list[dict], hashes: dict[int, frozenset]) -> list[list[str]]:
    """Groups of runs whose evaluations are the same rows (the same log recorded twice)."""
    by_content: dict[frozenset, list[str]] = defaultdict(list)
    for entry in entries:
        content = hashes.get(entry["run_id"])
        if content:
            by_content[content].append(entry["run"])
    return [names for names in by_content.values() if len(names) > 1]


def _arm_entry(
    label: str,
    members: list[dict],
    hashes: dict[int, frozenset],
    bootstrap_reps: int,
    bootstrap_seed: int,
) -> dict:
    seeds, unseeded = _seed_groups(members)
    # One log recorded twice under one seed is one run: its copies add no evaluation. (Two seeds
    # whose rows happen to agree stay two seeds.)
    identical = [
        group for runs in [*seeds.values(), unseeded] for group in _identical_runs(runs, hashes)
    ]
    copies = {name for group in identical for name in group[1:]}
    seeds = {
        seed: kept
        for seed, runs in seeds.items()
        if (kept := [entry for entry in runs if entry["run"] not in copies])
    }
    unseeded = [entry for entry in unseeded if entry["run"] not in copies]
    seed_means = [_mean(entry["window"]["mean"] for entry in runs) for runs in seeds.values()]
    n_seeds = len(seeds)
    # Runs without a recorded seed are no seed: they enter an arm's level only when it has no seed at all.
    with_window = [entry for runs in seeds.values() for entry in runs] or unseeded
    if n_seeds >= 2:
        summary = dict(stats.mean_sd_n(seed_means), sd_over="seeds")
    elif with_window:
        # One seed (or none recorded): the level is its runs' mean, the spread that of their evaluations.
        pooled = stats.mean_sd_n(
            [value for entry in with_window for value in entry["window"]["values"]]
        )
        mean = (
            seed_means[0] if n_seeds == 1 else _mean(entry["window"]["mean"] for entry in unseeded)
        )
        summary = {"mean": mean, "sd": pooled["sd"], "n": pooled["n"], "sd_over": "evaluations"}
    else:
        summary = {"mean": None, "sd": None, "n": 0, "sd_over": None}
    first = members[0]
    repeated = {
        seed: [entry["run"] for entry in runs] for seed, runs in seeds.items() if len(runs) > 1
    }
    notes = []
    for group in identical:
        notes.append(
            f"runs {', '.join(group)} hold the same evaluations (one log recorded {len(group)} times): "
            "counted once"
        )
    if repeated:
        notes.append(
            "; ".join(
                f"seed {seed}: {len(runs)} runs averaged as one seed"
                for seed, runs in repeated.items()
            )
        )
    if unseeded:
        notes.append(
            f"{len(unseeded)} run{'s' if len(unseeded) != 1 else ''} without a recorded seed "
            f"({', '.join(entry['run'] for entry in unseeded)}) counted as no seed"
        )
    arm = {
        "arm": label,
        "arm_name": first["arm"],
        "arm_recorded": first["arm"] is not None,
        "arm_fingerprint": first["arm_fingerprint"],
        "arm_flags": first["arm_flags"],
        "arm_overrides": first["arm_overrides"],
        "arm_flags_source": first["arm_flags_source"],
        "arm_description": first["arm_description"],
        "base_model": first["base_model"],
        "backend": first["backend"],
        "benchmark": first["benchmark"],
        "protocol": {
            key: first["protocol"][key]
            for key in ("split", "temperature", "episodes", "turn_limit")
        },
        "n_seeds": n_seeds,
        **summary,
        "runs": [entry["run"] for entry in members],
        "seeds": list(seeds),
        "seed_runs": {seed: [entry["run"] for entry in runs] for seed, runs in seeds.items()},
        "seed_window_means": seed_means,
        "repeated_seeds": repeated,
        "unseeded_runs": [entry["run"] for entry in unseeded],
        "identical_runs": identical,
        "n_evaluations": sum(entry["window"]["n"] for entry in with_window),
        "evaluation_ids": [i for entry in with_window for i in entry["window"]["evaluation_ids"]],
        "fingerprints": sorted(
            {entry["arm_fingerprint"] for entry in members if entry["arm_fingerprint"]}
        ),
        "window_steps": _window_steps(with_window),
        "resolved": n_seeds >= MIN_SEEDS_RESOLVED,
        "note": None
        if n_seeds >= MIN_SEEDS_RESOLVED
        else (NO_SEED_NOTE if not n_seeds else UNRESOLVED_NOTE),
        "seed_notes": notes,
    }
    arm["headline"] = bool(with_window) and all(
        entry["window"]["headline"] for entry in with_window
    )
    arm["headline_note"] = next(
        (
            entry["window"]["headline_note"]
            for entry in with_window
            if not entry["window"]["headline"]
        ),
        None,
    )
    seed_types = [_seed_task_types(runs) for runs in seeds.values()]
    arm["seed_task_types"] = seed_types
    if n_seeds:
        tasks, matrix = _seed_type_matrix(seed_types, seed_means)
        iqm = stats.stratified_bootstrap_iqm(matrix, reps=bootstrap_reps, seed=bootstrap_seed)
        if n_seeds < MIN_SEEDS_INTERVAL:
            # Resampling one seed gives back that seed: a zero-width interval, not a result.
            iqm.update(ci_low=None, ci_high=None)
        arm["iqm"] = dict(
            iqm, tasks=tasks, note=None if n_seeds >= MIN_SEEDS_INTERVAL else NEEDS_SEEDS_NOTE
        )
    else:
        arm["iqm"] = None
    return arm


def _window_steps(entries: list[dict]) -> list[int] | None:
    """The first and last step the arm's windows cover (None without an evaluation in one)."""
    steps = [step for entry in entries for step in entry["window"].get("steps") or []]
    return [min(steps), max(steps)] if steps else None


def _window_coverage_note(first: dict, second: dict) -> str | None:
    """Said when two arms' windows cover different steps: their means are then not of one stretch
    of training (a run cut at step 115 beside one that reached 150)."""
    a, b = first.get("window_steps"), second.get("window_steps")
    if a is None or b is None or a == b:
        return None
    return f"the windows cover different steps: {first['arm']} steps {a[0]}-{a[1]}, {second['arm']} steps {b[0]}-{b[1]}"


def _comparable(first: dict, second: dict) -> bool:
    keys = ("base_model", "backend", "benchmark", "protocol")
    return all(
        json.dumps(first[key], sort_keys=True) == json.dumps(second[key], sort_keys=True)
        for key in keys
    )


def _seed_means(arm: dict) -> dict:
    return dict(zip(arm["seed_runs"], arm["seed_window_means"]))


def _arm_comparisons(
    arms: list[dict],
    isolation_of: Callable[[list[str]], dict],
    rollout_hashes: dict[str, str | None],
) -> tuple[list[dict], list[dict]]:
    comparisons, not_compared = [], []
    for first, second in combinations(arms, 2):
        unseeded = [arm["arm"] for arm in (first, second) if not arm["n_seeds"]]
        if unseeded:
            not_compared.append(
                {
                    "arm_a": first["arm"],
                    "arm_b": second["arm"],
                    "differ_in": [],
                    "note": f"not compared: {' and '.join(unseeded)} "
                    f"{'has' if len(unseeded) == 1 else 'have'} no recorded seed",
                }
            )
            continue
        unrecorded = [arm["arm"] for arm in (first, second) if not arm["arm_recorded"]]
        if unrecorded:  # nothing says such a pair differs in the arm: a difference would be a claim without evidence
            not_compared.append(
                {
                    "arm_a": first["arm"],
                    "arm_b": second["arm"],
                    "differ_in": ["arm not recorded"],
                    "note": f"not compared: the arm of {' and '.join(unrecorded)} is not recorded",
                }
            )
            continue
        if not _comparable(first, second):
            differs = [
                key.replace("_", " ")
                for key in ("base_model", "backend", "benchmark", "protocol")
                if json.dumps(first[key], sort_keys=True) != json.dumps(second[key], sort_keys=True)
            ]
            not_compared.append(
                {
                    "arm_a": first["arm"],
                    "arm_b": second["arm"],
                    "differ_in": differs,
                    "note": f"not compared: they differ in {', '.join(differs)}, not only in the arm",
                }
            )
            continue
        x, y = first["seed_task_types"], second["seed_task_types"]
        tasks = [task for task in (x[0] if x else {}) if all(task in row for row in x + y)]
        if tasks:
            matrix_a = [[row[task] for task in tasks] for row in x]
            matrix_b = [[row[task] for task in tasks] for row in y]
        else:
            tasks = ["all"]
            matrix_a = [[mean] for mean in first["seed_window_means"]]
            matrix_b = [[mean] for mean in second["seed_window_means"]]
        welch = stats.welch_t_test(first["seed_window_means"], second["seed_window_means"])
        # Paired or Welch is decided once (stats.two_arm_test): seeds whose runs of both arms
        # recorded the same first rollouts were paired by their design (a matrix), and are tested so.
        test = stats.two_arm_test(
            _seed_means(first),
            _seed_means(second),
            paired_by_design=shared_rollout_seeds(first, second, rollout_hashes),
        )
        enough = min(first["n_seeds"], second["n_seeds"]) >= MIN_SEEDS_INTERVAL
        pair = isolation_of(first["runs"] + second["runs"])
        comparisons.append(
            {
                "arm_a": first["arm"],
                "arm_b": second["arm"],
                "difference": welch["difference"],
                "welch": welch,
                "test": test,
                "probability_of_improvement": stats.probability_of_improvement(matrix_a, matrix_b)
                if enough
                else None,
                "poi_note": None if enough else NEEDS_SEEDS_NOTE,
                "poi_tasks": tasks,
                "isolation": {key: pair[key] for key in ("verdict", "differences", "not_recorded")},
                "resolved": first["resolved"] and second["resolved"],
                "window_coverage": _window_coverage_note(first, second),
                "note": "; ".join(
                    note
                    for note in (
                        None if first["resolved"] and second["resolved"] else UNRESOLVED_NOTE,
                        _window_coverage_note(first, second),
                    )
                    if note
                )
                or None,
            }
        )
    return comparisons, not_compared


def _reference_entry(entry: dict, identity: RunIdentity) -> dict:
    rows = entry["evaluations"]
    level = stats.mean_sd_n([row["success"] for row in rows])
    return {
        "run": entry["run"],
        "agent": identity.agent,
        "label": identity.agent or entry["run"],
        "benchmark": identity.benchmark,
        "protocol": {
            key: entry["protocol"][key]
            for key in ("split", "temperature", "episodes", "turn_limit")
        },
        "mean": level["mean"],
        "sd": level["sd"],
        "n_evaluations": level["n"],
        "steps": sorted({row["step"] for row in rows}),
        "evaluation_ids": [row["evaluation_id"] for row in rows],
    }


def _untrained_levels(arms: list[dict], entries_by_run: dict[str, dict]) -> list[dict]:
    """Each arm's step-0 evaluations (the untrained policy), averaged over its seeds."""
    levels = []
    for arm in arms:
        per_seed = []
        for runs in arm["seed_runs"].values():
            values = [
                row["success"]
                for name in runs
                for row in entries_by_run[name]["evaluations"]
                if row["step"] == 0
            ]
            if values:
                per_seed.append(_mean(values))
        if per_seed:
            levels.append({"arm": arm["arm"], "mean": _mean(per_seed), "n_seeds": len(per_seed)})
    return levels


def _content_hashes(
    db: sqlite_utils.Database, run_ids: list[int], split: str | None
) -> dict[int, frozenset]:
    if not run_ids:
        return {}
    marks = ", ".join("?" for _ in run_ids)
    where = f"run_id IN ({marks}) AND {STANDING}" + (" AND split = ?" if split is not None else "")
    found: dict[int, set] = defaultdict(set)
    for row in db.query(
        f"SELECT run_id, content_hash FROM evaluations WHERE {where}",
        [*run_ids, *([split] if split is not None else [])],
    ):
        found[row["run_id"]].add(row["content_hash"])
    return {run_id: frozenset(values) for run_id, values in found.items()}


def compare_runs(
    db: sqlite_utils.Database,
    runs: Iterable[str] | None = None,
    window_start: int | None = None,
    *,
    split: str = "heldout",
    confidence: float = stats.DEFAULT_CONFIDENCE,
    bootstrap_reps: int = 2000,
    bootstrap_seed: int = 0,
    detect: float | None = None,
    include_failed: bool = False,
) -> dict:
    """The `ccpo compare --json` document (without schema_version) for the named runs
    (all runs when None or empty), in the order given (else by name).

    Keys: window_start (the one given, else None: each run's window then starts at
    the start its matrix recorded, else the default rule (`report/window.py`); `window.start` and
    `window.start_basis` say where), split, runs[], arms[], comparisons[], not_compared[],
    references[], reference_levels, left_out, isolation, power. Success rates are percent.

    Per run: its `identity` (store.identity), window {mean, sd, n, steps, evaluation_ids,
    episodes, successes, start, start_basis, protocol, trend, converged, headline}, window_task_types
    {key: {mean, sd, n, episodes}}, best {step, success, task_types, task_type_episodes,
    mean_turns, train_success_rate, evaluation_id, n_candidates, expected_max_bias_sd,
    expected_max_bias_points, expected_max_bias_points_binomial, bias_noise},
    single_eval_interval {at, episodes, episodes_basis, low, high, half_width} (None when the
    episodes per evaluation are not recorded), run_state, last_step, last_eval_step, total_steps,
    facts, conflicts, evaluations[] (the learning curve).

    Per arm (a comparison unit; `arm` is its display label, `arm_name` the arm file's name):
    n_seeds (distinct recorded seeds), mean, sd, n (over seed means from two seeds on, else over
    the evaluations; `sd_over` says which), seeds, seed_runs, seed_window_means (one per seed:
    the mean of that seed's runs), repeated_seeds, unseeded_runs, identical_runs, iqm, resolved
    (at least 3 seeds), note, fingerprints, and the unit's base_model, backend, benchmark, protocol
    (and its split, temperature, episodes, turn_limit as keys of their own); `label` the short
    label that tables and plots show (report/labels.py: it changes with the units present),
    `arm_stable` the arm with its overrides and `unit_key` the unit's identity hash (both stable).
    Runs carry their unit's `unit_label` and `unit_key`, comparisons `label_a` and `label_b`.
    comparisons: arm pairs that differ only in the arm, with Welch's test on seed means, the
    probability of improvement (None below two seeds per arm) and the pair's isolation verdict;
    not_compared: the other pairs and why. power: per compared pair the test, mdd, p and, with
    `detect`, seeds_needed. isolation.verdict is passes / fails / unverifiable. retracted: the runs
    left out because they were retracted ({run: reason, retracted_by, recorded_at}) and the
    retracted evaluations of the compared runs (never part of any number here);
    resolved_conflicts: per run, the settled conflicts (store/retractions.py).
    """
    # The status to show: a running run whose trainer is gone is interrupted (store/liveness.py).
    all_runs = annotate_runs(db, list_runs(db))
    wanted = list(runs or [])
    if wanted:
        by_name = {run["name"]: run for run in all_runs}
        missing = [name for name in wanted if name not in by_name]
        if missing:
            raise InvalidInput(f"no run named {', '.join(map(repr, missing))} in the database")
        chosen = [by_name[name] for name in dict.fromkeys(wanted)]
    else:
        chosen = all_runs
    # A retracted run (`ccpo runs retract RUN`) is left out of everything and listed under
    # `retracted`; a retracted evaluation never reaches the readers below (store/queries.py).
    retracted_runs = {run["name"]: run["retracted"] for run in chosen if run.get("retracted")}
    chosen = [run for run in chosen if not run.get("retracted")]
    for run in chosen:
        recorded = run_facts(db, run["id"])
        run["facts"], run["fact_conflicts"] = recorded["values"], recorded["conflicts"]
        if run["hardware"] is None:
            run["hardware"] = run["facts"].get("hardware")  # an ingested run records it as a fact
        # n_conflicts counts the open conflicts; a settled one (`ccpo runs resolve`) is no longer one.
        run["conflicting_steps"] = (
            sorted(
                {row["step"] for row in run_conflicts(db, run["id"]) if row["resolution"] is None}
            )
            if run["n_conflicts"]
            else []
        )
    identities = read_identities(db, chosen, split=split)
    evaluations = evaluations_for_runs(
        db, [run["id"] for run in chosen], split=split, provenance=False
    )
    run_entries = []
    for run in chosen:
        start, basis = run_window_start(
            window_start, run.get("config"), run["total_steps"], run["last_step"]
        )
        run_entries.append(
            _run_entry(
                run, identities[run["name"]], evaluations[run["id"]], start, basis, confidence
            )
        )
    entries_by_run = {entry["run"]: entry for entry in run_entries}
    failures = {run["name"]: run.get("failure") for run in chosen}
    left_out = {
        entry["run"]: _failed_reason(failures.get(entry["run"]))
        for entry in run_entries
        if entry["status"] == "failed" and not include_failed
    }
    references = [
        _reference_entry(entry, identities[entry["run"]])
        for entry in run_entries
        if identities[entry["run"]].is_reference and entry["run"] not in left_out
    ]
    trained = [
        entry
        for entry in run_entries
        if not identities[entry["run"]].is_reference and entry["run"] not in left_out
    ]
    labels = unit_labels(identities[entry["run"]] for entry in trained)
    unit_of = {entry["run"]: labels[identities[entry["run"]].unit] for entry in trained}
    for entry in run_entries:
        entry["arm_label"] = unit_of.get(entry["run"])
    grouped: dict[str, list[dict]] = defaultdict(list)
    for entry in trained:
        grouped[unit_of[entry["run"]]].append(entry)
    hashes = _content_hashes(db, [entry["run_id"] for entry in trained], split)
    arms = [
        _arm_entry(label, members, hashes, bootstrap_reps, bootstrap_seed)
        for label, members in grouped.items()
    ]
    arms.sort(key=lambda arm: (arm["mean"] is None, -(arm["mean"] or 0.0), arm["arm"]))
    _add_short_labels(arms, run_entries, unit_of)
    by_name = {run["name"]: run for run in chosen}

    def isolation_of(names: list[str]) -> dict:
        return isolation_check([by_name[name] for name in names], identities, unit_of)

    rollout_hashes = {run["name"]: run.get("step1_rollout_hash") for run in chosen}
    comparisons, not_compared = _arm_comparisons(arms, isolation_of, rollout_hashes)
    label_of = {arm["arm"]: arm["label"] for arm in arms}
    for row in comparisons + not_compared:
        row["label_a"], row["label_b"] = label_of[row["arm_a"]], label_of[row["arm_b"]]
    trained_names = [entry["run"] for entry in trained]
    protocols = {json.dumps(entry["window"]["protocol"], sort_keys=True) for entry in trained}
    starts = {entry["window"]["start"] for entry in run_entries}
    return {
        # The start every window shares (given, or the same share of equal totals), else None.
        "window_start": window_start
        if window_start is not None
        else (starts.pop() if len(starts) == 1 else None),
        "window_start_basis": "given"
        if window_start is not None
        else DEFAULT_WINDOW.describe(example=False),
        "split": split,
        "runs": run_entries,
        "arms": arms,
        "comparisons": comparisons,
        "not_compared": not_compared,
        "references": references,
        "reference_levels": {
            "untrained": _untrained_levels(arms, entries_by_run),
            "agents": [
                {"label": reference["label"], "mean": reference["mean"], "run": reference["run"]}
                for reference in references
                if reference["mean"] is not None
            ],
        },
        "left_out": left_out,
        "isolation": isolation_of(trained_names),
        "protocol_mixed": len(protocols) > 1 or any(entry["protocol_mixed"] for entry in trained),
        "conflicts": {
            entry["run"]: {"steps": entry["conflicting_steps"], "facts": entry["fact_conflicts"]}
            for entry in run_entries
            if entry["conflicting_steps"] or entry["fact_conflicts"]
        },
        # Minimum detectable difference per compared arm pair (and seeds needed for `detect` points).
        "power": power_report(arms, comparisons, detect),
        "unit_differences": _unit_difference_lines(trained, identities),
        # What was corrected: retracted runs and evaluations (left out above) and settled conflicts.
        "retracted": _retracted_section(db, retracted_runs, [run["id"] for run in chosen]),
        "resolved_conflicts": _resolved_section(db, chosen),
    }


def _add_short_labels(arms: list[dict], run_entries: list[dict], unit_of: dict[str, str]) -> None:
    """Each arm's short label and stable unit key (report/labels.py), its protocol fields as
    columns, and each trained run's unit label and key."""
    for arm, label in zip(arms, short_labels(arms)):
        arm.update(
            label=label,
            unit_key=unit_key(arm),
            arm_stable=arm_name(arm),
            **{
                key: arm["protocol"][key]
                for key in ("split", "temperature", "episodes", "turn_limit")
            },
        )
    by_unit = {arm["arm"]: arm for arm in arms}
    for entry in run_entries:
        unit_arm = by_unit.get(unit_of.get(entry["run"]))
        entry["unit_label"] = None if unit_arm is None else unit_arm["label"]
        entry["unit_key"] = None if unit_arm is None else unit_arm["unit_key"]


def _retracted_section(
    db: sqlite_utils.Database, runs: dict[str, dict], run_ids: list[int]
) -> dict:
    evaluations = retracted_evaluations(db, run_ids)
    return {
        "runs": {
            name: {key: entry[key] for key in ("reason", "retracted_by", "recorded_at")}
            for name, entry in runs.items()
        },
        "evaluations": [
            {
                key: entry[key]
                for key in (
                    "run",
                    "evaluation_id",
                    "step",
                    "split",
                    "eval_seed",
                    "reason",
                    "retracted_by",
                    "recorded_at",
                )
            }
            for entry in evaluations.values()
        ],
    }


def _resolved_section(db: sqlite_utils.Database, runs: list[dict]) -> dict[str, list[dict]]:
    names = {run["id"]: run["name"] for run in runs}
    found = resolutions(db, list(names))
    return {
        names[run_id]: [
            {
                key: row[key]
                for key in (
                    "step",
                    "split",
                    "eval_seed",
                    "kept_value",
                    "kept_evaluation_id",
                    "reason",
                    "resolved_by",
                    "recorded_at",
                )
            }
            for row in rows
        ]
        for run_id, rows in found.items()
    }


def _failed_reason(failure: dict | None) -> str:
    where = ""
    if failure:
        where = f" at step {failure.get('step')}" if failure.get("step") is not None else ""
        if failure.get("quantity"):
            where += f" ({failure['quantity']} not finite)"
    return f"the run failed{where}; compare it with --include-failed"


def _unit_difference_lines(
    trained: list[dict], identities: dict[str, RunIdentity]
) -> dict[str, list[str]]:
    """For runs of one arm name split into several arms: what sets each apart from the first."""
    by_name: dict[str, list[RunIdentity]] = defaultdict(list)
    for entry in trained:
        if entry["arm"] is not None:
            by_name[entry["arm"]].append(identities[entry["run"]])
    lines = {}
    for name, members in by_name.items():
        units: dict[ComparisonUnit, RunIdentity] = {}
        for identity in members:
            units.setdefault(identity.unit, identity)
        if len(units) > 1:
            first, *rest = units.values()
            lines[name] = [
                f"{other.run} vs {first.run}: " + "; ".join(unit_differences(other, first))
                for other in rest
            ]
    return lines


__all__ = ["MIN_SEEDS_RESOLVED", "UNRESOLVED_NOTE", "compare_runs", "task_type_keys"]
