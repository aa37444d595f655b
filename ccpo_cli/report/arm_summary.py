"""One comparison unit summarised across its seeds: the `ArmSummary` of the compare document.

Within a unit, seeds are the distinct recorded seed values: repeated runs of one seed are
averaged into that seed and flagged, the copies of one log recorded twice count once, and a run
without a seed counts as none. From two seeds on the level and spread are over the seeds' window
means; with one seed (or none recorded) they are over that seed's evaluations, and the sd says
which. The IQM interval is rliable's stratified bootstrap over task types (docs/statistics.md).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ccpo_cli import stats
from ccpo_cli.report.comparison import ArmSummary, RunEntry

MIN_SEEDS_RESOLVED = 3
UNRESOLVED_NOTE = "unresolved until replicated"
# An interval across seeds, or P(a > b), from one seed per arm is degenerate (zero width, 0 or 1).
MIN_SEEDS_INTERVAL = 2
NEEDS_SEEDS_NOTE = "needs ≥ 2 seeds"
NO_SEED_NOTE = "no recorded seed: runs without a seed count as no seed"


def _seed_groups(members: list[RunEntry]) -> tuple[dict, list[RunEntry]]:
    """{seed: [entries with a window]} in seed order, and the entries with a window but no seed."""
    seeds: dict = defaultdict(list)
    unseeded = []
    for entry in members:
        if not entry.window.n:
            continue
        if entry.seed is None:
            unseeded.append(entry)
        else:
            seeds[entry.seed].append(entry)
    return dict(sorted(seeds.items())), unseeded


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values)


def _window_mean(entries: Iterable[RunEntry]) -> float:
    """The mean of the runs' window means (every run here has evaluations in its window)."""
    return _mean(entry.window.mean for entry in entries if entry.window.mean is not None)


def _seed_task_types(entries: list[RunEntry]) -> dict[str, float]:
    """Per task type, the mean over a seed's runs of their window means (types every run has)."""
    keys = [
        key
        for key in entries[0].window_task_types
        if all(key in entry.window_task_types for entry in entries)
    ]
    return {key: _mean(entry.window_task_types[key]["mean"] for entry in entries) for key in keys}


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


def _identical_runs(entries: list[RunEntry], hashes: dict[int, frozenset]) -> list[list[str]]:
    """Groups of runs whose evaluations are the same rows (the same log recorded twice)."""
    by_content: dict[frozenset, list[str]] = defaultdict(list)
    for entry in entries:
        content = hashes.get(entry.identity.run_id)
        if content:
            by_content[content].append(entry.run)
    return [names for names in by_content.values() if len(names) > 1]


def arm_summary(
    label: str,
    members: list[RunEntry],
    hashes: dict[int, frozenset],
    bootstrap_reps: int,
    bootstrap_seed: int,
) -> ArmSummary:
    """The unit named `label` from its runs (`members`, all of one `ComparisonUnit`): its seeds
    (repeated runs of a seed averaged into it, copies of one log counted once), its level and
    spread, and the IQM with its stratified-bootstrap interval over task types."""
    seeds, unseeded, identical = _without_copies(*_seed_groups(members), hashes)
    seed_means = [_window_mean(runs) for runs in seeds.values()]
    n_seeds = len(seeds)
    # Runs without a recorded seed are no seed: they enter an arm's level only when it has no seed at all.
    with_window = [entry for runs in seeds.values() for entry in runs] or unseeded
    summary = _level(seed_means, with_window, unseeded)
    seed_runs = {seed: [entry.run for entry in runs] for seed, runs in seeds.items()}
    repeated = {seed: runs for seed, runs in seed_runs.items() if len(runs) > 1}
    seed_types = [_seed_task_types(runs) for runs in seeds.values()]
    return ArmSummary(
        name=label,
        identity=members[0].identity,
        n_seeds=n_seeds,
        **summary,
        runs=[entry.run for entry in members],
        seeds=list(seeds),
        seed_runs=seed_runs,
        seed_window_means=seed_means,
        repeated_seeds=repeated,
        unseeded_runs=[entry.run for entry in unseeded],
        identical_runs=identical,
        n_evaluations=sum(entry.window.n for entry in with_window),
        evaluation_ids=[i for entry in with_window for i in entry.window.evaluation_ids],
        fingerprints=sorted(
            {entry.arm.fingerprint for entry in members if entry.arm and entry.arm.fingerprint}
        ),
        window_steps=_window_steps(with_window),
        resolved=n_seeds >= MIN_SEEDS_RESOLVED,
        note=None
        if n_seeds >= MIN_SEEDS_RESOLVED
        else (NO_SEED_NOTE if not n_seeds else UNRESOLVED_NOTE),
        seed_notes=_seed_notes(identical, repeated, unseeded),
        headline=bool(with_window) and all(entry.window.headline for entry in with_window),
        headline_note=next(
            (entry.window.headline_note for entry in with_window if not entry.window.headline),
            None,
        ),
        seed_task_types=seed_types,
        iqm=_iqm(seed_types, seed_means, bootstrap_reps, bootstrap_seed),
    )


def _without_copies(
    seeds: dict, unseeded: list[RunEntry], hashes: dict[int, frozenset]
) -> tuple[dict, list[RunEntry], list[list[str]]]:
    """The seeds and unseeded runs with each log recorded twice counted once, and the groups of
    copies. One log recorded twice under one seed is one run: its copies add no evaluation. (Two
    seeds whose rows happen to agree stay two seeds.)"""
    identical = [
        group for runs in [*seeds.values(), unseeded] for group in _identical_runs(runs, hashes)
    ]
    copies = {name for group in identical for name in group[1:]}
    kept_seeds = {
        seed: kept
        for seed, runs in seeds.items()
        if (kept := [entry for entry in runs if entry.run not in copies])
    }
    return kept_seeds, [entry for entry in unseeded if entry.run not in copies], identical


def _level(
    seed_means: list[float], with_window: list[RunEntry], unseeded: list[RunEntry]
) -> dict[str, Any]:
    """The unit's mean, sd, n and what the sd is over: its seed means from two seeds on; with one
    seed (or none recorded) its runs' mean, and the spread of their evaluations."""
    if len(seed_means) >= 2:
        return dict(stats.mean_sd_n(seed_means), sd_over="seeds")
    if not with_window:
        return {"mean": None, "sd": None, "n": 0, "sd_over": None}
    pooled = stats.mean_sd_n([value for entry in with_window for value in entry.window.values])
    mean = seed_means[0] if seed_means else _window_mean(unseeded)
    return {"mean": mean, "sd": pooled["sd"], "n": pooled["n"], "sd_over": "evaluations"}


def _seed_notes(
    identical: list[list[str]], repeated: dict[Any, list[str]], unseeded: list[RunEntry]
) -> list[str]:
    """What the unit's seeds are made of besides one run each: copies counted once, repeated
    runs averaged into their seed, runs without a seed."""
    notes = [
        f"runs {', '.join(group)} hold the same evaluations (one log recorded {len(group)} times): "
        "counted once"
        for group in identical
    ]
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
            f"({', '.join(entry.run for entry in unseeded)}) counted as no seed"
        )
    return notes


def _iqm(
    seed_types: list[dict[str, float]],
    seed_means: list[float],
    bootstrap_reps: int,
    bootstrap_seed: int,
) -> dict[str, Any] | None:
    """The IQM over the seeds and task types with its stratified-bootstrap interval (None
    without a seed; no interval below MIN_SEEDS_INTERVAL seeds)."""
    if not seed_means:
        return None
    tasks, matrix = _seed_type_matrix(seed_types, seed_means)
    iqm = stats.stratified_bootstrap_iqm(matrix, reps=bootstrap_reps, seed=bootstrap_seed)
    enough = len(seed_means) >= MIN_SEEDS_INTERVAL
    if not enough:
        # Resampling one seed gives back that seed: a zero-width interval, not a result.
        iqm.update(ci_low=None, ci_high=None)
    return dict(iqm, tasks=tasks, note=None if enough else NEEDS_SEEDS_NOTE)


def _window_steps(entries: list[RunEntry]) -> list[int] | None:
    """The first and last step the arm's windows cover (None without an evaluation in one)."""
    steps = [step for entry in entries for step in entry.window.steps]
    return [min(steps), max(steps)] if steps else None


__all__ = [
    "MIN_SEEDS_INTERVAL",
    "MIN_SEEDS_RESOLVED",
    "NEEDS_SEEDS_NOTE",
    "NO_SEED_NOTE",
    "UNRESOLVED_NOTE",
    "arm_summary",
]
