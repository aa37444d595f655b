"""The arms table and the caveats a card states, decided from the comparison (`Comparison`):
whether an isolated GRPO run exists, and what the compared runs were checked to share."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ccpo_cli.cards.method import estimator_family
from ccpo_cli.cards.selection import ResolvedArm
from ccpo_cli.estimator_registry import GRPO_FAMILY
from ccpo_cli.report.isolation import shown_differences

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import ArmSummary, Comparison


@dataclass(frozen=True)
class ArmRow:
    """One row of a card's side-by-side table: the unit's numbers as the card prints them."""

    label: str
    mean: str
    sd: str
    n: int
    n_seeds: int
    this: bool  # the card's own unit
    family: str  # cards/method.py estimator_family: from the recorded flags, else not recorded
    arm: ArmSummary

    def as_template(self) -> dict[str, Any]:
        """The row as the card template reads it."""
        return {
            "label": self.label,
            "mean": self.mean,
            "sd": self.sd,
            "n": self.n,
            "n_seeds": self.n_seeds,
            "this": self.this,
            "family": self.family,
        }


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def arm_rows(
    comparison: Comparison, resolved: Mapping[str, ResolvedArm], this_arm: str
) -> list[ArmRow]:
    """The side-by-side table: one row per arm (comparison unit) with a window, in the
    comparison's order; `this_arm` is the card's own unit label."""
    rows = []
    for arm in comparison.arms:  # already ordered by window mean, best first
        if not arm.n:
            continue
        info = resolved.get(arm.name)
        rows.append(
            ArmRow(
                label=f"{info.label} (`{arm.name}`)"
                if info and info.label != arm.name
                else f"`{arm.name}`",
                mean=fmt(arm.mean),
                sd=fmt(arm.sd),
                n=arm.n,
                n_seeds=arm.n_seeds,
                this=arm.name == this_arm,
                family=estimator_family(arm.arm_name, info.flags if info else {}),
                arm=arm,
            )
        )
    return rows


def grpo_caveat(
    arms_rows: list[ArmRow],
    excluded: Mapping[str, list[str]],
    identities: Mapping[str, Any],
    arm_mean: float,
) -> dict[str, Any]:
    """A claim against GRPO needs an isolated GRPO run; without one, say why there is none. The
    difference is arm minus arm: `arm_mean` is this run's arm level, never the run's own window."""
    grpo_rows = [row for row in arms_rows if row.family == GRPO_FAMILY and not row.this]
    if grpo_rows:
        row = grpo_rows[0]
        assert row.arm.mean is not None  # arm_rows keeps the arms with a window
        return {
            "present": True,
            "label": row.label,
            "mean": row.mean,
            "sd": row.sd,
            "n": row.n,
            "n_seeds": f"{row.n_seeds} seed{'s' if row.n_seeds != 1 else ''}",
            "difference": f"{arm_mean - row.arm.mean:+.1f}",
            "this_mean": fmt(arm_mean),
        }
    rejected = [
        name
        for name in excluded
        if identities[name].arm is not None
        and estimator_family(identities[name].arm.name, identities[name].arm.flags or {})
        == GRPO_FAMILY
    ]
    if rejected:
        return {
            "present": False,
            "rejected": f"run `{rejected[0]}`",
            "rejected_reason": shown_differences(excluded[rejected[0]]),
        }
    return {"present": False}


def isolation_statement(run_rows: list[Mapping[str, Any]], isolation: Mapping[str, Any]) -> str:
    """What the side-by-side comparison isolates, by the check's verdict: a claim only when the
    check passes on recorded evidence, and the missing evidence named when it cannot."""
    if isolation.get("verdict") != "passes":
        missing = ", ".join(isolation.get("not_recorded") or []) or "some evidence"
        return (
            f"ccpo cannot verify that these {len(run_rows)} runs differ only in the estimator: nothing recorded "
            f"differs, but {missing} {'was' if len(isolation.get('not_recorded') or []) == 1 else 'were'} not "
            "recorded for every run. Read the differences between arms as unverified."
        )
    shared = []
    for column, label in (
        ("hardware", "hardware"),
        ("seed", "seed"),
        ("data_order_seed", "data order"),
        ("base_model", "base model"),
    ):
        values = {row.get(column) for row in run_rows}
        if len(values) == 1 and None not in values:
            shared.append(label)
    statement = (
        f"What the comparison between arms does isolate is the estimator: the {len(run_rows)} runs passed "
        "ccpo's isolation check (they differ only in estimator flags)"
    )
    if shared:
        listed = shared[0] if len(shared) == 1 else ", ".join(shared[:-1]) + " and " + shared[-1]
        statement += f" and share {listed}"
    hashes = {row.get("step1_rollout_hash") for row in run_rows}
    if len(hashes) == 1 and None not in hashes:
        statement += "; they recorded identical rollouts at step 1, before any gradient was applied"
    return statement + "."


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
        step
        for entry in comparison.runs
        if entry.arm_label == arm
        for step in entry.window.get("steps") or []
    ]
    return (min(steps), max(steps)) if steps else None


def window_steps_note(comparison: Comparison, arms_rows: list[ArmRow]) -> str:
    """When the arms' windows cover different training steps (a resumed log's 65-145 beside a
    5-25), the sentence that says so; empty when every pair overlaps over at least half of the
    steps the two span together."""
    ranges = {row.label: _step_range(comparison, row.arm.name) for row in arms_rows}
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
