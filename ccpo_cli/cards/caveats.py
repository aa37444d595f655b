"""The caveats a card states beside its claims (cards/claims.py), from the comparison
(`Comparison`): conflicting records, corrections, and windows of different stretches of training."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ccpo_cli.cards.claims import ArmSeedsClaim
    from ccpo_cli.report.comparison import Comparison


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def conflict_lines(comparison: Comparison) -> list[str]:
    """One sentence per run with conflicting records: re-recorded steps that disagree, and facts
    (total steps, split, ...) recorded with two values."""
    lines = []
    for run, conflict in comparison.conflicts.items():
        parts = []
        if conflict.get("steps"):
            parts.append(
                "evaluations at step"
                + ("s " if len(conflict["steps"]) > 1 else " ")
                + ", ".join(map(str, conflict["steps"]))
                + " were recorded twice with different results "
                "(the first recorded is used)"
            )
        for key, values in (conflict.get("facts") or {}).items():
            use = (
                "a final card needs the run to reach the largest"
                if key == "total_steps"
                else "the first is used"
            )
            parts.append(
                f"{key.replace('_', ' ')} was recorded as {' and as '.join(map(str, values))} ({use})"
            )
        lines.append(f"run `{run}`: " + "; ".join(parts))
    return lines


def correction_lines(comparison: Comparison) -> list[str]:
    """One sentence per correction of the record the card's numbers reflect (issue 23): retracted
    evaluations and runs (left out of every number) and settled conflicts (the value kept)."""
    retracted = comparison.retracted
    lines = [
        f"run `{run}` was retracted ({entry['reason']}; {entry['retracted_by']}, {entry['recorded_at'][:10]})"
        for run, entry in (retracted.get("runs") or {}).items()
    ]
    lines += [
        f"run `{entry['run']}`: the evaluation at step {entry['step']} was retracted ({entry['reason']}; "
        f"{entry['retracted_by']}, {entry['recorded_at'][:10]})"
        for entry in retracted.get("evaluations") or []
    ]
    for run, rows in comparison.resolved_conflicts.items():
        lines += [
            f"run `{run}`: the conflict at step {row['step']} was settled keeping {fmt(row['kept_value'])} "
            f"({row['resolved_by']}, {row['recorded_at'][:10]}{'; ' + row['reason'] if row['reason'] else ''})"
            for row in rows
        ]
    return lines


def _step_range(comparison: Comparison, arm: str) -> tuple[int, int] | None:
    steps = [
        step for entry in comparison.runs if entry.arm_label == arm for step in entry.window.steps
    ]
    return (min(steps), max(steps)) if steps else None


def window_steps_note(comparison: Comparison, arms: list[ArmSeedsClaim]) -> str:
    """When the arms' windows cover different training steps (a resumed log's 65-145 beside a
    5-25), the sentence that says so; empty when every pair overlaps over at least half of the
    steps the two span together."""
    ranges = {arm.label: _step_range(comparison, arm.arm) for arm in arms}
    known = {label: span for label, span in ranges.items() if span is not None}
    spans = list(known.values())
    comparable = all(
        min(a[1], b[1]) - max(a[0], b[0]) >= 0.5 * (max(a[1], b[1]) - min(a[0], b[0]))
        for index, a in enumerate(spans)
        for b in spans[index + 1 :]
    )
    if comparable:
        return ""
    listed = "; ".join(f"{label}: steps {low}-{high}" for label, (low, high) in known.items())
    return (
        f"The arms' windows cover different stretches of training ({listed}), so their means are of "
        "different training: they are set side by side, not compared."
    )
