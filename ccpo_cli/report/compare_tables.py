"""The tables of `ccpo compare` (and of `ccpo matrix`'s comparison), built from a `Comparison`.

Each is a `TableData` of report/tables.py, so the terminal, CSV, Markdown and LaTeX formats are
the ones every other table gets. The unit column shows each arm's short label (report/labels.py)
and, in CSV, one field per identity field, so a script groups by model or backend without parsing
a label.

One concern, kept in one file past 400 lines: everything `ccpo compare` prints, in the order it
prints it, each table read from the same `Comparison`.
"""

from __future__ import annotations

import math
from typing import Any

from ccpo_cli.report import tables
from ccpo_cli.report.comparison import ArmSummary, Comparison, PairComparison, RunEntry
from ccpo_cli.report.labels import (
    LABEL_FIELDS,
    NOT_RECORDED,
    identity_values,
    legend_rows,
    needs_legend,
)
from ccpo_cli.report.run_tables import benchmark_task_types
from ccpo_cli.report.tables import Cell, Column, TableData
from ccpo_cli.report.window import DEFAULT_WINDOW


def _window_title(comparison: Comparison) -> str:
    start = comparison.window_start
    return (
        f"step >= {start}"
        if start is not None
        else "from " + DEFAULT_WINDOW.describe("each run's", example=False)
    )


# CSV: a unit's column is the stable arm, the short label and one column per identity field, so
# that a script groups by model or backend without parsing a label.
UNIT_FIELDS = ("arm", "label", *LABEL_FIELDS)


def _unit_column() -> Column:
    # TEXT: a long label wraps between its parts rather than pushing the numbers to another page.
    return Column("arm", tables.TEXT, "left", fields=UNIT_FIELDS)


def _unit_cell(arm: ArmSummary | None, shown: str) -> Cell:
    if arm is None:
        return Cell(shown, (None,) * len(UNIT_FIELDS))
    values = identity_values(arm)
    return Cell(shown, (arm.arm_stable, arm.label, *(values[name] for name in LABEL_FIELDS)))


def arms_table(comparison: Comparison) -> TableData:
    table = TableData(
        "arms",
        f"arms side by side (window {_window_title(comparison)})",
        [
            _unit_column(),
            Column("held-out mean"),
            Column("sd"),
            Column("n", fields=("n", "n_over")),
            Column("seeds"),
            tables.text_column("note"),
        ],
    )
    for arm in comparison.arms:
        over = "evals" if arm.sd_over == "evaluations" else "seeds"
        notes = "; ".join(note for note in (arm.note, *arm.seed_notes) if note)
        table.add(
            _unit_cell(arm, arm.label or arm.name),
            tables.num(arm.mean),
            tables.num(arm.sd),
            Cell(f"{arm.n} {over}", (arm.n, arm.sd_over)),
            tables.num(arm.n_seeds),
            tables.txt(notes, notes),
        )
    return table


_LEGEND_FIELDS = ("arm", "arm_fingerprint", *LABEL_FIELDS, "unit_key")


def _mean_interval(arm: ArmSummary) -> tuple[float | None, float | None, str]:
    """(low, high, over) of the 95 % t interval of an arm's mean: over its seed means from two
    seeds on, else over its window evaluations."""
    n, sd, mean = arm.n, arm.sd, arm.mean
    if mean is None or sd is None or not n or n < 2:
        return None, None, ""
    from ccpo_cli.stats import t_quantile

    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half, "seeds" if arm.sd_over == "seeds" else "evaluations"


def arms_ci_table(comparison: Comparison) -> TableData:
    """The arms as a paper reports them: mean ± the half width of its 95 % t interval."""
    table = TableData(
        "arms",
        f"held-out success (%), window {_window_title(comparison)}: mean ± 95 % t interval",
        [
            _unit_column(),
            Column("mean ± CI", fields=("mean", "ci_low", "ci_high")),
            Column("over", tables.NAME, "left"),
            Column("n"),
            Column("seeds"),
        ],
    )
    for arm in comparison.arms:
        low, high, over = _mean_interval(arm)
        shown = (
            "-"
            if arm.mean is None
            else (
                f"{arm.mean:.1f} ± {(high - low) / 2:.1f}"
                if low is not None and high is not None  # both or neither (_mean_interval)
                else f"{arm.mean:.1f}"
            )
        )
        table.add(
            _unit_cell(arm, arm.label or arm.name),
            Cell(shown, (tables.raw_value(arm.mean), low, high)),
            tables.txt(over or "-", over or None),
            tables.num(arm.n),
            tables.num(arm.n_seeds),
        )
    return table


def latex_comparison_tables(comparison: Comparison) -> list[Any]:
    """`ccpo compare --format latex`: the arms with mean ± CI, the legend, the arm differences."""
    if not comparison.runs:
        return comparison_tables(comparison)
    items: list[Any] = [arms_ci_table(comparison)]
    if needs_legend(comparison.arms):
        items.append(units_legend_table(comparison))
    if comparison.pairs:
        items.append(comparisons_table(comparison))
    return items


def units_legend_table(comparison: Comparison) -> TableData:
    """Under the arms table: each short label's full identity (one wrapping cell in a terminal,
    one CSV column per field)."""
    table = TableData(
        "units",
        "legend: each label's full identity",
        [
            tables.text_column("label"),
            Column("identity", tables.TEXT, "left", fields=_LEGEND_FIELDS),
        ],
    )
    for row in legend_rows(comparison.arms):
        shown = {key: NOT_RECORDED if row[key] is None else str(row[key]) for key in _LEGEND_FIELDS}
        text = f"arm {shown['arm']} ({shown['arm_fingerprint'][:12]}), " + ", ".join(
            f"{key.replace('_', ' ')} {shown[key]}" for key in LABEL_FIELDS
        )
        table.add(tables.txt(row["label"]), Cell(text, tuple(row[key] for key in _LEGEND_FIELDS)))
    return table


def references_table(comparison: Comparison) -> TableData:
    table = TableData(
        "references",
        "reference runs (evaluation only: not arms)",
        [
            tables.name_column("run"),
            tables.name_column("agent"),
            Column("held-out mean"),
            Column("sd"),
            Column("evals"),
            Column("episodes"),
        ],
    )
    for reference in comparison.references:
        table.add(
            tables.txt(reference.run),
            tables.txt(reference.agent or NOT_RECORDED, reference.agent or NOT_RECORDED),
            tables.num(reference.mean),
            tables.num(reference.sd),
            tables.num(reference.n_evaluations),
            tables.num(reference.identity.protocol.episodes),
        )
    return table


def _run_arm(run: RunEntry) -> str:
    if run.is_reference:
        return "(reference)"
    return tables.dash_or_text(run.unit_label or run.arm_label or run.arm_name)


def per_run_table(comparison: Comparison) -> TableData:
    table = TableData(
        "runs",
        "per run: window mean±sd (n evals), best and its expected inflation",
        [
            tables.name_column("run"),
            _unit_column(),
            Column("seed"),
            Column("window", fields=("window_mean", "window_sd", "window_n")),
            Column("trend", tables.NAME),
            Column("best@step", fields=("best", "best_step")),
            Column("bias", key="best_bias_points"),
            Column("1 eval", key="single_eval_half_width"),
            Column("step", fields=("last_step", "total_steps")),
        ],
    )
    for run in comparison.runs:
        window, best, interval = run.window, run.best, run.single_eval_interval
        direction = window.trend.direction
        # "rising"/"falling": the slope interval excludes 0, so the window is not converged.
        trend_text = direction or ("too few" if window.n else "-")
        bias = best.expected_max_bias_points if best else None
        table.add(
            tables.txt(run.run),
            _unit_cell(comparison.find_arm(run.arm_label), _run_arm(run)),
            tables.num(run.seed),
            Cell(
                f"{tables.number_text(window.mean)}±{tables.number_text(window.sd)} ({window.n})",
                (tables.raw_value(window.mean), tables.raw_value(window.sd), window.n),
            ),
            Cell(trend_text, direction),
            Cell(
                f"{tables.number_text(best.success)}@{best.step}" if best else "-",
                (best.success, best.step) if best else (None, None),
            ),
            Cell(
                f"+{tables.number_text(bias)}" if bias is not None else "-", tables.raw_value(bias)
            ),
            Cell(
                f"±{tables.number_text(interval['half_width'])}" if interval else "-",
                tables.raw_value(interval["half_width"]) if interval else None,
            ),
            Cell(
                f"{tables.dash_or_text(run.last_step)}/{tables.dash_or_text(run.total_steps)}",
                (run.last_step, run.total_steps),
            ),
        )
    return table


def best_rows_table(comparison: Comparison) -> TableData:
    """The card's "best single evaluation" row for every run (biased upward; see the bias), with
    the per-type columns of the runs' benchmarks."""
    task_keys = benchmark_task_types(
        [run.identity.benchmark for run in comparison.runs],
        [{"task_types": run.best.task_types} for run in comparison.runs if run.best],
    )
    table = TableData(
        "best",
        "best single evaluation per run (not the result: see the window)",
        [
            tables.name_column("run"),
            Column("step"),
            Column("held-out"),
            Column("turns"),
            *(Column(key) for key in task_keys),
        ],
    )
    for run in comparison.runs:
        best = run.best
        if best is None:
            continue
        table.add(
            tables.txt(run.run),
            tables.num(best.step),
            tables.num(best.success),
            tables.num(best.mean_turns),
            *[tables.num(best.task_types.get(key)) for key in task_keys],
        )
    return table


def _no_interval(pair: PairComparison) -> str:
    """Why a difference has no test, interval or p (every difference says one or the other)."""
    thin = [arm.label or arm.name for arm in (pair.first, pair.second) if arm.n_seeds < 2]
    if thin:
        return f"no test: {' and '.join(thin)} {'has' if len(thin) == 1 else 'have'} one seed"
    return "no test: the seed means do not vary"


def comparisons_table(comparison: Comparison) -> TableData:
    table = TableData(
        "comparisons",
        "arm differences (window means across seeds)",
        [
            Column("a vs b", tables.NAME, "left", fields=("arm_a", "arm_b", "label_a", "label_b")),
            Column("a - b", key="difference"),
            tables.text_column("test"),
            Column("t"),
            Column("df"),
            Column("p"),
            Column("95% CI", fields=("ci_low", "ci_high")),
            Column("P(a>b)", key="probability_of_improvement"),
            tables.text_column("note"),
        ],
    )
    for row in comparison.pairs:
        # The test compare chose (paired where the design paired the seeds, else Welch).
        welch = row.test
        interval = (
            f"[{tables.number_text(welch['ci_low'])}, {tables.number_text(welch['ci_high'])}]"
            if welch["ci_low"] is not None
            else "-"
        )
        poi = row.probability_of_improvement
        notes = _pair_notes(row)
        label_a, label_b = row.first.label or row.first.name, row.second.label or row.second.name
        table.add(
            Cell(
                f"{label_a} vs {label_b}",
                (row.first.arm_stable, row.second.arm_stable, label_a, label_b),
            ),
            tables.num(row.difference),
            tables.txt(welch["test"], welch["test"]),
            tables.num(welch["t"], 2),
            tables.num(welch["df"]),
            tables.num(welch["p"], 3),
            Cell(interval, (tables.raw_value(welch["ci_low"]), tables.raw_value(welch["ci_high"]))),
            Cell(
                tables.number_text(poi, 2) if poi is not None else (row.poi_note or "-"),
                tables.raw_value(poi),
            ),
            tables.txt(notes, notes),
        )
    return table


def _pair_notes(row: PairComparison) -> str:
    """A compared pair's notes: why it has no interval, the comparison's note, and an isolation
    check that did not pass."""
    verdict = row.verdict
    return "; ".join(
        note
        for note in (
            _no_interval(row) if row.test["ci_low"] is None else "",
            row.note or "",
            f"isolation {verdict}" if verdict and verdict != "passes" else "",
        )
        if note
    )


def isolation_text(comparison: Comparison) -> str:
    isolation = comparison.isolation
    if isolation.get("note"):
        return f"isolation: {isolation['note']}"
    verdict = isolation.get("verdict", "passes" if isolation["estimator_only"] else "fails")
    if verdict == "passes":
        lines = ["isolation passes: the compared runs differ only in the estimator"]
    elif verdict == "fails":
        lines = ["isolation fails: the runs also differ in:"]
    else:
        lines = ["isolation unverifiable: nothing recorded differs, but some evidence is missing"]
    lines += [f"  - {difference}" for difference in isolation["differences"]]
    if isolation["not_recorded"]:
        lines.append(f"  not recorded (cannot be checked): {', '.join(isolation['not_recorded'])}")
    if comparison.protocol_mixed:
        lines.append(
            "  mixed evaluation protocols (panel size, split or temperature): each window uses one protocol"
        )
    for run, conflict in comparison.conflicts.items():
        lines.append(
            f"  conflicts recorded for {run}: steps {conflict['steps']} {conflict['facts'] or ''}".rstrip()
        )
    return "\n".join(lines)


def retraction_lines(comparison: Comparison) -> list[str]:
    """What the comparison left out because it was retracted (`ccpo runs retract`)."""
    retracted = comparison.retracted
    lines = [
        f"retracted, left out: run {name}: {entry['reason']} ({entry['retracted_by']}, {entry['recorded_at']})"
        for name, entry in (retracted.get("runs") or {}).items()
    ]
    for entry in retracted.get("evaluations") or []:
        lines.append(
            f"retracted, left out: {entry['run']} step {entry['step']} (evaluation {entry['evaluation_id']}): "
            f"{entry['reason']} ({entry['retracted_by']}, {entry['recorded_at']})"
        )
    return lines


def comparison_tables(comparison: Comparison) -> list[Any]:
    """Everything `ccpo compare` prints, in order: tables (TableData) and lines (str)."""
    if not comparison.runs:
        lines = retraction_lines(comparison)
        return (
            ["no runs to compare: every one asked for is retracted", *lines]
            if lines
            else ["no runs in the database"]
        )
    items: list[Any] = [arms_table(comparison)]
    if needs_legend(comparison.arms):
        items.append(units_legend_table(comparison))
    if comparison.references:
        items.append(references_table(comparison))
    items += [per_run_table(comparison), best_rows_table(comparison)]
    if comparison.pairs:
        items.append(comparisons_table(comparison))
    if comparison.power.get("pairs"):
        from ccpo_cli.report.power_tables import power_table

        items.append(power_table(comparison.power))
    items += [
        f"{row.first.label or row.first.name} vs {row.second.label or row.second.name}: {row.note}"
        for row in comparison.not_compared
    ]
    items += [f"left out: {run}: {why}" for run, why in comparison.left_out.items()]
    items += retraction_lines(comparison)
    items.append(isolation_text(comparison))
    items.append(
        "Read the window mean, not the best point: the best of n evaluations is biased upward by "
        "the expected maximum of n normals (in sd)."
    )
    return items


__all__ = [
    "arms_ci_table",
    "arms_table",
    "best_rows_table",
    "comparison_tables",
    "comparisons_table",
    "isolation_text",
    "latex_comparison_tables",
    "per_run_table",
    "references_table",
    "retraction_lines",
    "units_legend_table",
]
