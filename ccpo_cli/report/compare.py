"""The comparison behind `ccpo compare`, the tables, the plot, the power section and the cards.

`compare_runs` reads runs.db once and returns a typed `Comparison` (report/comparison.py): per
run its window and the best evaluation with its selection bias; per arm the across-seed summary
(report/arm_summary.py); pairwise arm statistics; the reference runs; and an isolation check that
lists everything besides the estimator that differs between the compared runs. Every number
carries the evaluation ids it came from; `Comparison.as_json()` writes the `--json` document.

What is pooled with what is decided by each run's recorded identity (`store.identity`): an
"arm" of this document is a comparison unit, the runs that share arm fingerprint, base model,
backend, benchmark and evaluation protocol. Runs that differ in any of these are never pooled;
an arm trained with `--set` is its own arm. Within an arm, seeds are the distinct recorded seed
values: repeated runs of one seed are averaged into that seed and flagged, and a run without a
seed counts as none. Arms are compared pairwise only when they differ in the arm alone.
Evaluation-only runs (`ccpo eval` of the oracle, the random agent or a checkpoint) are
references, never arms. Failed runs are left out unless asked for.

One concern, kept in one file past 400 lines: building one comparison from runs.db. Each step
reads what the step before it decided (identities, then units and their labels, then pairs and
the power of each pair), and `compare_runs`'s docstring is the field list of the document.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import replace
from itertools import combinations

import sqlite_utils

from ccpo_cli import stats
from ccpo_cli.errors import InvalidInput
from ccpo_cli.report.arm_summary import (
    MIN_SEEDS_INTERVAL,
    NEEDS_SEEDS_NOTE,
    UNRESOLVED_NOTE,
    arm_summary,
)
from ccpo_cli.report.comparison import (
    SETTING_FIELDS,
    ArmSummary,
    Comparison,
    CurvePoint,
    NotCompared,
    PairComparison,
    Reference,
    RunEntry,
    UntrainedLevel,
)
from ccpo_cli.report.isolation import isolation_check
from ccpo_cli.report.labels import short_labels, unit_key
from ccpo_cli.report.power import power_report, shared_rollout_seeds
from ccpo_cli.report.window import (
    DEFAULT_WINDOW,
    run_state,
    run_window_start,
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


def _run_entry(
    run: dict,
    identity: RunIdentity,
    evaluations: list[dict],
    window_start: int,
    start_basis: str,
    confidence: float,
) -> RunEntry:
    measured = window_entry(evaluations, identity.protocol, window_start, start_basis, confidence)
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
    return RunEntry(
        identity=identity,
        status=run["status"],
        run_state=run_state(run["status"], last_step, totals),
        window=measured["window"],
        window_task_types=measured["window_task_types"],
        best=measured["best"],
        single_eval_interval=measured["single_eval_interval"],
        protocols=measured["protocols"],
        protocol_mixed=measured["protocol_mixed"],
        last_step=last_step,
        last_eval_step=last_eval_step,
        total_steps=run["total_steps"],
        total_steps_recorded=totals,
        facts=run.get("facts") or {},
        conflicts=run["n_conflicts"],
        conflicting_steps=run.get("conflicting_steps", []),
        fact_conflicts=run.get("fact_conflicts", {}),
        evaluations=[
            CurvePoint(
                evaluation_id=row["id"],
                step=row["step"],
                success=row["success_rate"],
                mean_turns=row["mean_turns"],
                episodes=row["episodes"],
                successes=row["successes"],
            )
            for row in evaluations
        ],
    )


def _window_coverage_note(first: ArmSummary, second: ArmSummary) -> str | None:
    """Said when two arms' windows cover different steps: their means are then not of one stretch
    of training (a run cut at step 115 beside one that reached 150)."""
    a, b = first.window_steps, second.window_steps
    if a is None or b is None or a == b:
        return None
    return f"the windows cover different steps: {first.name} steps {a[0]}-{a[1]}, {second.name} steps {b[0]}-{b[1]}"


def _setting_differences(first: ArmSummary, second: ArmSummary) -> list[str]:
    """What besides the arm sets two units apart (`ComparisonUnit.setting()`, field by field)."""
    return [
        name
        for name, a, b in zip(SETTING_FIELDS, first.unit.setting(), second.unit.setting())
        if a != b
    ]


def pair_resolved(first: ArmSummary, second: ArmSummary, test: dict) -> bool:
    """Resolved: at least MIN_SEEDS_RESOLVED seeds per arm and the test's interval at the stated
    confidence excludes zero. Three seeds alone resolve nothing (+3.9, CI -5.2 to 12.9 is not)."""
    low, high = test.get("ci_low"), test.get("ci_high")
    return (
        first.resolved
        and second.resolved
        and low is not None
        and high is not None
        and (low > 0 or high < 0)
    )


def _arm_comparisons(
    arms: list[ArmSummary],
    isolation_of: Callable[[list[str]], dict],
    rollout_hashes: dict[str, str | None],
) -> tuple[list[PairComparison], list[NotCompared]]:
    comparisons: list[PairComparison] = []
    not_compared: list[NotCompared] = []
    for first, second in combinations(arms, 2):
        unseeded = [arm.name for arm in (first, second) if not arm.n_seeds]
        if unseeded:
            not_compared.append(
                NotCompared(
                    first,
                    second,
                    [],
                    f"not compared: {' and '.join(unseeded)} "
                    f"{'has' if len(unseeded) == 1 else 'have'} no recorded seed",
                )
            )
            continue
        unrecorded = [arm.name for arm in (first, second) if not arm.arm_recorded]
        if unrecorded:  # nothing says such a pair differs in the arm: a difference would be a claim without evidence
            not_compared.append(
                NotCompared(
                    first,
                    second,
                    ["arm not recorded"],
                    f"not compared: the arm of {' and '.join(unrecorded)} is not recorded",
                )
            )
            continue
        # Pairing is the unit's to decide: two units are compared when their setting agrees.
        differs = _setting_differences(first, second)
        if differs:
            not_compared.append(
                NotCompared(
                    first,
                    second,
                    differs,
                    f"not compared: they differ in {', '.join(differs)}, not only in the arm",
                )
            )
            continue
        x, y = first.seed_task_types, second.seed_task_types
        tasks = [task for task in (x[0] if x else {}) if all(task in row for row in x + y)]
        if tasks:
            matrix_a = [[row[task] for task in tasks] for row in x]
            matrix_b = [[row[task] for task in tasks] for row in y]
        else:
            tasks = ["all"]
            matrix_a = [[mean] for mean in first.seed_window_means]
            matrix_b = [[mean] for mean in second.seed_window_means]
        welch = stats.welch_t_test(first.seed_window_means, second.seed_window_means)
        # Paired or Welch is decided once (stats.two_arm_test): seeds whose runs of both arms
        # recorded the same first rollouts were paired by their design (a matrix), and are tested so.
        test = stats.two_arm_test(
            first.seed_means,
            second.seed_means,
            paired_by_design=shared_rollout_seeds(first, second, rollout_hashes),
        )
        enough = min(first.n_seeds, second.n_seeds) >= MIN_SEEDS_INTERVAL
        pair = isolation_of(first.runs + second.runs)
        coverage = _window_coverage_note(first, second)
        both_resolved = pair_resolved(first, second, test)
        comparisons.append(
            PairComparison(
                first=first,
                second=second,
                difference=welch["difference"],
                welch=welch,
                test=test,
                probability_of_improvement=stats.probability_of_improvement(matrix_a, matrix_b)
                if enough
                else None,
                poi_note=None if enough else NEEDS_SEEDS_NOTE,
                poi_tasks=tasks,
                isolation={key: pair[key] for key in ("verdict", "differences", "not_recorded")},
                resolved=both_resolved,
                window_coverage=coverage,
                note="; ".join(
                    note
                    for note in (
                        None
                        if both_resolved
                        else UNRESOLVED_NOTE
                        if not (first.resolved and second.resolved)
                        else "unresolved: the interval covers zero",
                        coverage,
                    )
                    if note
                )
                or None,
            )
        )
    return comparisons, not_compared


def _reference_entry(entry: RunEntry) -> Reference:
    level = stats.mean_sd_n([row["success"] for row in entry.evaluations])
    return Reference(
        identity=entry.identity,
        mean=level["mean"],
        sd=level["sd"],
        n_evaluations=level["n"],
        steps=sorted({row["step"] for row in entry.evaluations}),
        evaluation_ids=[row["evaluation_id"] for row in entry.evaluations],
        evaluation_seeds=entry.window.evaluation_seeds,
    )


def _untrained_levels(
    arms: list[ArmSummary], entries_by_run: dict[str, RunEntry]
) -> list[UntrainedLevel]:
    """Each arm's step-0 evaluations (the untrained policy), averaged over its seeds."""
    levels = []
    for arm in arms:
        per_seed = []
        for runs in arm.seed_runs.values():
            values = [
                row["success"]
                for name in runs
                for row in entries_by_run[name].evaluations
                if row["step"] == 0
            ]
            if values:
                per_seed.append(sum(values) / len(values))
        if per_seed:
            levels.append(UntrainedLevel(arm.name, sum(per_seed) / len(per_seed), len(per_seed)))
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
) -> Comparison:
    """The comparison of the named runs (all runs when None or empty), in the order given (else
    by name). Its `as_json()` is the `ccpo compare --json` document (without schema_version);
    the names below are that document's keys and the `Comparison`'s fields alike (the document's
    `comparisons` are the `pairs`, its `reference_levels.untrained` the `untrained` levels).

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
    comparisons: arm pairs that differ only in the arm (`ComparisonUnit.setting()` agrees), with
    Welch's test on seed means and the `test` `stats.two_arm_test` chose (paired on the seeds the
    design paired, else Welch), the probability of improvement (None below two seeds per arm) and the pair's isolation verdict;
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
    entries_by_run = {entry.run: entry for entry in run_entries}
    failures = {run["name"]: run.get("failure") for run in chosen}
    left_out = {
        entry.run: _failed_reason(failures.get(entry.run))
        for entry in run_entries
        if entry.status == "failed" and not include_failed
    }
    references = [
        _reference_entry(entry)
        for entry in run_entries
        if entry.is_reference and entry.run not in left_out
    ]
    trained = [
        entry for entry in run_entries if not entry.is_reference and entry.run not in left_out
    ]
    labels = unit_labels(entry.identity for entry in trained)
    unit_of = {entry.run: labels[entry.identity.unit] for entry in trained}
    # Grouped by the unit identity, the one the cards select by (cards/selection.py); the label
    # only names it.
    grouped: dict[str, list[RunEntry]] = defaultdict(list)
    for entry in trained:
        grouped[labels[entry.identity.unit]].append(entry)
    hashes = _content_hashes(db, [entry.run_id for entry in trained], split)
    arms = [
        arm_summary(label, members, hashes, bootstrap_reps, bootstrap_seed)
        for label, members in grouped.items()
    ]
    arms.sort(key=lambda arm: (arm.mean is None, -(arm.mean or 0.0), arm.name))
    arms = _with_short_labels(arms)
    by_unit = {arm.name: arm for arm in arms}
    run_entries = [
        replace(
            entry,
            arm_label=unit_of.get(entry.run),
            unit_label=None if unit_arm is None else unit_arm.label,
            unit_key=None if unit_arm is None else unit_arm.unit_key,
        )
        for entry in run_entries
        for unit_arm in [by_unit.get(unit_of.get(entry.run, ""))]
    ]
    by_name = {run["name"]: run for run in chosen}

    # Checked: the trained runs compared (no reference, no failed run) with an evaluation in the
    # window; a seed with nothing in the window contributes no number, so it is not checked.
    evaluated = {entry.run for entry in trained if entry.window.n}

    def isolation_of(names: list[str]) -> dict:
        checked = [by_name[name] for name in names if name in evaluated]
        return isolation_check(checked, identities, unit_of)

    rollout_hashes = {run["name"]: run.get("step1_rollout_hash") for run in chosen}
    comparisons, not_compared = _arm_comparisons(arms, isolation_of, rollout_hashes)
    trained_names = [entry.run for entry in trained]
    protocols = {json.dumps(entry.window.protocol, sort_keys=True) for entry in trained}
    starts = {entry.window.start for entry in run_entries}
    return Comparison(
        # The start every window shares (given, or the same share of equal totals), else None.
        window_start=window_start
        if window_start is not None
        else (starts.pop() if len(starts) == 1 else None),
        window_start_basis="given"
        if window_start is not None
        else DEFAULT_WINDOW.describe(example=False),
        split=split,
        runs=run_entries,
        arms=arms,
        pairs=comparisons,
        not_compared=not_compared,
        references=references,
        untrained=_untrained_levels(arms, entries_by_run),
        left_out=left_out,
        isolation=isolation_of(trained_names),
        protocol_mixed=len(protocols) > 1 or any(entry.protocol_mixed for entry in trained),
        conflicts={
            entry.run: {"steps": entry.conflicting_steps, "facts": entry.fact_conflicts}
            for entry in run_entries
            if entry.conflicting_steps or entry.fact_conflicts
        },
        # Minimum detectable difference per compared arm pair (and seeds needed for `detect` points).
        power=power_report(comparisons, detect),
        unit_differences=_unit_difference_lines(trained),
        # What was corrected: retracted runs and evaluations (left out above) and settled conflicts.
        retracted=_retracted_section(db, retracted_runs, [run["id"] for run in chosen]),
        resolved_conflicts=_resolved_section(db, chosen),
    )


def _with_short_labels(arms: list[ArmSummary]) -> list[ArmSummary]:
    """Each arm with its short label and stable unit key (report/labels.py)."""
    return [
        replace(arm, label=label, unit_key=unit_key(arm))
        for arm, label in zip(arms, short_labels(arms))
    ]


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


def _unit_difference_lines(trained: list[RunEntry]) -> dict[str, list[str]]:
    """For runs of one arm name split into several arms: what sets each apart from the first."""
    by_name: dict[str, list[RunIdentity]] = defaultdict(list)
    for entry in trained:
        if entry.arm_name is not None:
            by_name[entry.arm_name].append(entry.identity)
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


__all__ = ["compare_runs"]
