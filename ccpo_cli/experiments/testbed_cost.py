"""What a testbed design costs and the signal it buys per CPU-minute.

This module owns the testbed's cost side: the CPU seconds of a block (the warm-up and each
arm's fork) as the trainer recorded them, a cost model fitted on the runs that recorded their
CPU for those that did not (`CostModel`), designs read out of longer runs (`SubDesign`), and a
design's point on the design curve. A paired t grows as (effect/sd)·√pairs, and a budget of B
CPU-minutes buys B/c pairs of blocks costing c, so (effect/sd)²/c is what a design earns per
CPU-minute, and (effect/sd)·√(B/c) is the t a matrix of B CPU-minutes is expected to reach.
It is apart from the controls (testbed.py), which judge a difference whatever it cost.
Pure functions of the loaded runs (testbed_runs.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ccpo_cli.experiments.testbed import differences, paired_stats
from ccpo_cli.experiments.testbed_runs import MatrixData, RunData

# The budget a "30-minute matrix" of this project's 2-core machine is: 2 cores for 30 minutes.
THIRTY_MINUTE_CPU_MINUTES = 60.0


@dataclass(frozen=True)
class CostModel:
    """CPU seconds per training decision and per evaluation turn, fitted on runs that recorded
    their CPU; used for runs that did not (trained before the trainer counted it)."""

    per_decision_s: float | None
    per_eval_turn_s: float | None
    fitted_on: int

    def step(self, run: RunData, step: int) -> float | None:
        if step in run.step_cpu_s:
            return run.step_cpu_s[step]
        if self.per_decision_s is None or step not in run.step_decisions:
            return None
        return self.per_decision_s * run.step_decisions[step]

    def evaluation(self, run: RunData, step: int, fraction: float = 1.0) -> float | None:
        if step in run.eval_cpu_s:
            return run.eval_cpu_s[step] * fraction
        if self.per_eval_turn_s is None or step not in run.eval_turns:
            return None
        return self.per_eval_turn_s * run.eval_turns[step] * fraction


def fit_cost_model(runs: Iterable[RunData]) -> CostModel:
    decisions = cpu = turns = eval_cpu = 0.0
    fitted = 0
    for run in runs:
        shared = [step for step in run.step_cpu_s if step in run.step_decisions]
        if shared:
            fitted += 1
        decisions += sum(run.step_decisions[step] for step in shared)
        cpu += sum(run.step_cpu_s[step] for step in shared)
        evaluated = [step for step in run.eval_cpu_s if step in run.eval_turns]
        turns += sum(run.eval_turns[step] for step in evaluated)
        eval_cpu += sum(run.eval_cpu_s[step] for step in evaluated)
    return CostModel(
        cpu / decisions if decisions else None, eval_cpu / turns if turns else None, fitted
    )


@dataclass(frozen=True)
class SubDesign:
    """A design read out of longer runs: the forks train `horizon` steps after a fork at
    `warm_start`, the window averages the evaluations `eval_offsets` steps after the fork, each
    on `panel` games (None: the whole panel). Runs trained longer, or evaluated more often, give
    exactly this design's training and, with the panel subset, the same evaluation protocol
    (other sampling draws for a subset: the panel index seeds them)."""

    warm_start: int
    horizon: int
    eval_offsets: tuple[int, ...]
    panel: int | None = None

    @property
    def label(self) -> str:
        evaluations = ",".join(str(self.warm_start + offset) for offset in self.eval_offsets)
        return (
            f"K={self.warm_start} H={self.horizon} evals@{evaluations} "
            f"panel={'all' if self.panel is None else self.panel}"
        )


def block_cpu_seconds(
    data: MatrixData,
    labels: Sequence[str],
    seed: int,
    design: SubDesign,
    model: CostModel,
    panel_fraction: float = 1.0,
) -> float | None:
    """CPU seconds of one block of `design` with these arms: the warm-up's K steps, and each
    arm's `horizon` steps after the fork with its window's evaluations."""
    total = 0.0
    if design.warm_start:
        warm = data.warmup_of(labels[0], seed)
        if warm is None:
            return None
        for step in range(1, design.warm_start + 1):
            cost = model.step(warm, step)
            if cost is None:
                return None
            total += cost
    for label in labels:
        run = data.runs[label][seed]
        for step in range(run.start_step + 1, run.start_step + design.horizon + 1):
            cost = model.step(run, step)
            if cost is None:
                return None
            total += cost
        for offset in design.eval_offsets:
            cost = model.evaluation(run, run.start_step + offset, panel_fraction)
            if cost is None:
                return None
            total += cost
    return total


def design_point(
    data: MatrixData,
    arm_a: str,
    arm_b: str,
    design: SubDesign,
    model: CostModel,
    panels: Mapping[int, set[str]] | None = None,
    budget_cpu_minutes: float = THIRTY_MINUTE_CPU_MINUTES,
) -> dict[str, Any]:
    """One point of the design curve: the paired comparison a − b in `design`, its block cost
    and the signal it buys per CPU-minute."""
    games = None if design.panel is None else (panels or {}).get(design.panel)
    found = differences(data, arm_a, arm_b, design.eval_offsets, games)
    result = paired_stats(list(found.values()))
    full = max(
        (
            len(run.evaluations.get(run.start_step + design.eval_offsets[0], {}))
            for run in data.runs[arm_a].values()
        ),
        default=0,
    )
    fraction = 1.0 if games is None or not full else len(games) / full
    costs = [
        block_cpu_seconds(data, [arm_a, arm_b], seed, design, model, fraction) for seed in found
    ]
    known = [cost for cost in costs if cost is not None]
    block_minutes = statistics.fmean(known) / 60 if known else None
    ratio = result["effect_to_sd"]
    merit = None if ratio is None or not block_minutes else ratio**2 / block_minutes
    return {
        "design": design.label,
        "warm_start": design.warm_start,
        "horizon": design.horizon,
        "eval_steps": [design.warm_start + offset for offset in design.eval_offsets],
        "panel": design.panel,
        "arms": [arm_a, arm_b],
        "seeds": sorted(found),
        **result,
        "block_cpu_minutes": block_minutes,
        "effect_to_sd_squared_per_cpu_minute": merit,
        f"expected_t_in_{budget_cpu_minutes:g}_cpu_minutes": None
        if merit is None
        else math.copysign(math.sqrt(merit * budget_cpu_minutes), ratio),
        "pairs_in_budget": None if not block_minutes else int(budget_cpu_minutes // block_minutes),
    }


def seeds_within_budget(
    data: MatrixData, labels: Sequence[str], design: SubDesign, model: CostModel, cpu_minutes: float
) -> tuple[list[int], float]:
    """The seeds a matrix of these arms in `design` completes within `cpu_minutes`, seed-major
    (the matrix's own rule: no block starts that would end past the budget, by the costliest
    block so far), and the CPU minutes they take."""
    spent, costliest, kept = 0.0, 0.0, []
    for seed in data.seeds(*labels):
        cost = block_cpu_seconds(data, labels, seed, design, model)
        if cost is None:
            continue
        if kept and spent + costliest > cpu_minutes * 60:
            break
        kept.append(seed)
        spent += cost
        costliest = max(costliest, cost)
    return kept, spent / 60
