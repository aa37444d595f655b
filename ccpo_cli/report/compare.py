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
the power of each pair), and `Comparison`'s docstring is the field list of the document.
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
        **measured,
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


def _not_compared(first: ArmSummary, second: ArmSummary) -> NotCompared | None:
    """Why two units are not compared (no recorded seed, no recorded arm, or a setting that
    differs besides the arm), or None when they are."""
    unseeded = [arm.name for arm in (first, second) if not arm.n_seeds]
    if unseeded:
        return NotCompared(
            first,
            second,
            [],
            f"not compared: {' and '.join(unseeded)} "
            f"{'has' if len(unseeded) == 1 else 'have'} no recorded seed",
        )
    unrecorded = [arm.name for arm in (first, second) if not arm.arm_recorded]
    if unrecorded:  # nothing says such a pair differs in the arm: a difference would be a claim without evidence
        return NotCompared(
            first,
            second,
            ["arm not recorded"],
            f"not compared: the arm of {' and '.join(unrecorded)} is not recorded",
        )
    # Pairing is the unit's to decide: two units are compared when their setting agrees.
    differs = _setting_differences(first, second)
    if differs:
        return NotCompared(
            first,
            second,
            differs,
            f"not compared: they differ in {', '.join(differs)}, not only in the arm",
        )
    return None


def _improvement_matrices(
    first: ArmSummary, second: ArmSummary
) -> tuple[list[str], list[list[float]], list[list[float]]]:
    """The tasks of the probability of improvement and each arm's seeds x tasks scores: the task
    types every seed of both arms reports, else one task ("all") of the seed window means."""
    x, y = first.seed_task_types, second.seed_task_types
    tasks = [task for task in (x[0] if x else {}) if all(task in row for row in x + y)]
    if tasks:
        return (
            tasks,
            [[row[task] for task in tasks] for row in x],
            [[row[task] for task in tasks] for row in y],
        )
    return (
        ["all"],
        [[mean] for mean in first.seed_window_means],
        [[mean] for mean in second.seed_window_means],
    )


def _pair_note(
    first: ArmSummary, second: ArmSummary, resolved: bool, coverage: str | None
) -> str | None:
    """Why a compared pair's difference is not a result (too few seeds, or an interval that
    covers zero), and whether its windows cover different steps."""
    unresolved = (
        None
        if resolved
        else UNRESOLVED_NOTE
        if not (first.resolved and second.resolved)
        else "unresolved: the interval covers zero"
    )
    return "; ".join(note for note in (unresolved, coverage) if note) or None


def _pair_comparison(
    first: ArmSummary,
    second: ArmSummary,
    isolation_of: Callable[[list[str]], dict],
    rollout_hashes: dict[str, str | None],
) -> PairComparison:
    tasks, matrix_a, matrix_b = _improvement_matrices(first, second)
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
    resolved = pair_resolved(first, second, test)
    return PairComparison(
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
        resolved=resolved,
        window_coverage=coverage,
        note=_pair_note(first, second, resolved, coverage),
    )


def _arm_comparisons(
    arms: list[ArmSummary],
    isolation_of: Callable[[list[str]], dict],
    rollout_hashes: dict[str, str | None],
) -> tuple[list[PairComparison], list[NotCompared]]:
    """Every pair of units: compared when they differ in the arm alone, else why not."""
    comparisons: list[PairComparison] = []
    not_compared: list[NotCompared] = []
    for first, second in combinations(arms, 2):
        reason = _not_compared(first, second)
        if reason is not None:
            not_compared.append(reason)
        else:
            comparisons.append(_pair_comparison(first, second, isolation_of, rollout_hashes))
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


def _untrained_levels(arms: list[ArmSummary], entries: list[RunEntry]) -> list[UntrainedLevel]:
    """Each arm's step-0 evaluations (the untrained policy), averaged over its seeds."""
    entries_by_run = {entry.run: entry for entry in entries}
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
    by name); its `as_json()` is the `ccpo compare --json` document (without schema_version),
    whose keys the `Comparison`'s docstring lists (report/comparison.py). Failed runs are left
    out unless `include_failed`; `detect` adds the seeds needed to detect that difference."""
    chosen, retracted_runs = _chosen_runs(db, runs)
    identities = read_identities(db, chosen, split=split)
    run_entries = _run_entries(db, chosen, identities, window_start, split, confidence)
    left_out = {} if include_failed else _failed_runs(chosen, run_entries)
    kept = [entry for entry in run_entries if entry.run not in left_out]
    references = [_reference_entry(entry) for entry in kept if entry.is_reference]
    trained = [entry for entry in kept if not entry.is_reference]
    unit_of, arms = _unit_summaries(db, trained, split, bootstrap_reps, bootstrap_seed)
    run_entries = _with_unit_labels(run_entries, unit_of, arms)
    isolation_of = _isolation_checker(chosen, trained, identities, unit_of)
    rollout_hashes = {run["name"]: run.get("step1_rollout_hash") for run in chosen}
    comparisons, not_compared = _arm_comparisons(arms, isolation_of, rollout_hashes)
    return Comparison(
        window_start=_shared_window_start(window_start, run_entries),
        # The rule each window not given a start follows (report/window.py).
        window_start_basis="given" if window_start is not None else DEFAULT_BASIS,
        split=split,
        runs=run_entries,
        arms=arms,
        pairs=comparisons,
        not_compared=not_compared,
        references=references,
        untrained=_untrained_levels(arms, run_entries),
        left_out=left_out,
        isolation=isolation_of([entry.run for entry in trained]),
        protocol_mixed=_protocol_mixed(trained),
        conflicts=_conflicts_section(run_entries),
        # Minimum detectable difference per compared arm pair (and seeds needed for `detect` points).
        power=power_report(comparisons, detect),
        unit_differences=_unit_difference_lines(trained),
        # What was corrected: retracted runs and evaluations (left out above) and settled conflicts.
        retracted=_retracted_section(db, retracted_runs, [run["id"] for run in chosen]),
        resolved_conflicts=_resolved_section(db, chosen),
    )


def _chosen_runs(
    db: sqlite_utils.Database, runs: Iterable[str] | None
) -> tuple[list[dict], dict[str, dict]]:
    """The runs compared (those named, in their order, else all) with their recorded facts, and
    the retracted ones left out: a retracted run (`ccpo runs retract RUN`) is left out of
    everything and listed under `retracted`."""
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
    # A retracted evaluation never reaches the readers below (store/queries.py).
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
    return chosen, retracted_runs


def _run_entries(
    db: sqlite_utils.Database,
    chosen: list[dict],
    identities: dict[str, RunIdentity],
    window_start: int | None,
    split: str,
    confidence: float,
) -> list[RunEntry]:
    """One entry per run, each with the window its start rule gives (`run_window_start`)."""
    evaluations = evaluations_for_runs(
        db, [run["id"] for run in chosen], split=split, provenance=False
    )
    entries = []
    for run in chosen:
        start, basis = run_window_start(
            window_start, run.get("config"), run["total_steps"], run["last_step"]
        )
        entries.append(
            _run_entry(
                run, identities[run["name"]], evaluations[run["id"]], start, basis, confidence
            )
        )
    return entries


DEFAULT_BASIS = DEFAULT_WINDOW.describe(example=False)


def _protocol_mixed(trained: list[RunEntry]) -> bool:
    """Whether the compared windows, or any run's evaluations, mix evaluation protocols."""
    protocols = {json.dumps(entry.window.protocol, sort_keys=True) for entry in trained}
    return len(protocols) > 1 or any(entry.protocol_mixed for entry in trained)


def _shared_window_start(given: int | None, entries: list[RunEntry]) -> int | None:
    """The start every window shares (given, or the same share of equal totals), else None."""
    if given is not None:
        return given
    starts = {entry.window.start for entry in entries}
    return starts.pop() if len(starts) == 1 else None


def _isolation_checker(
    chosen: list[dict],
    trained: list[RunEntry],
    identities: dict[str, RunIdentity],
    unit_of: dict[str, str],
) -> Callable[[list[str]], dict]:
    """The isolation check of a set of runs (report/isolation.py). Checked: the trained runs
    compared (no reference, no failed run) with an evaluation in the window; a seed with nothing
    in the window contributes no number, so it is not checked."""
    by_name = {run["name"]: run for run in chosen}
    evaluated = {entry.run for entry in trained if entry.window.n}

    def isolation_of(names: list[str]) -> dict:
        checked = [by_name[name] for name in names if name in evaluated]
        return isolation_check(checked, identities, unit_of)

    return isolation_of


def _unit_summaries(
    db: sqlite_utils.Database,
    trained: list[RunEntry],
    split: str,
    bootstrap_reps: int,
    bootstrap_seed: int,
) -> tuple[dict[str, str], list[ArmSummary]]:
    """Each trained run's unit (its full label, `store.identity.unit_labels`), and one summary
    per unit, best window mean first, with its short label. Grouped by the unit identity, the
    one the cards select by (cards/selection.py); the label only names it."""
    labels = unit_labels(entry.identity for entry in trained)
    unit_of = {entry.run: labels[entry.identity.unit] for entry in trained}
    grouped: dict[str, list[RunEntry]] = defaultdict(list)
    for entry in trained:
        grouped[unit_of[entry.run]].append(entry)
    hashes = _content_hashes(db, [entry.identity.run_id for entry in trained], split)
    arms = [
        arm_summary(label, members, hashes, bootstrap_reps, bootstrap_seed)
        for label, members in grouped.items()
    ]
    arms.sort(key=lambda arm: (arm.mean is None, -(arm.mean or 0.0), arm.name))
    return unit_of, _with_short_labels(arms)


def _with_unit_labels(
    entries: list[RunEntry], unit_of: dict[str, str], arms: list[ArmSummary]
) -> list[RunEntry]:
    """Each run with its unit's full label, short label and stable key (None for a reference
    or a left-out run)."""
    by_unit = {arm.name: arm for arm in arms}
    return [
        replace(
            entry,
            arm_label=unit_of.get(entry.run),
            unit_label=None if unit_arm is None else unit_arm.label,
            unit_key=None if unit_arm is None else unit_arm.unit_key,
        )
        for entry in entries
        for unit_arm in [by_unit.get(unit_of.get(entry.run, ""))]
    ]


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


def _conflicts_section(entries: list[RunEntry]) -> dict[str, dict]:
    """Per run with conflicting records: the steps whose evaluations conflict, and the facts."""
    return {
        entry.run: {"steps": entry.conflicting_steps, "facts": entry.fact_conflicts}
        for entry in entries
        if entry.conflicting_steps or entry.fact_conflicts
    }


def _failed_runs(chosen: list[dict], entries: list[RunEntry]) -> dict[str, str]:
    """The failed runs left out of the comparison, with why (`--include-failed` keeps them)."""
    failures = {run["name"]: run.get("failure") for run in chosen}
    return {
        entry.run: _failed_reason(failures.get(entry.run))
        for entry in entries
        if entry.status == "failed"
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
