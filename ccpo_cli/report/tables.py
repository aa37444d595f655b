"""Rich tables for `ccpo runs` and `ccpo compare` (stdout); numbers as percent, one decimal."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ccpo_cli.task_types import TASK_TYPES


def _number(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _table(title: str, **options: Any) -> Table:
    # No vertical rules: the tables must fit an 80-column terminal or a CI log.
    return Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False, **options)


def _name_width(values) -> int:
    # Names are what a reader searches for: never cut them short.
    return max((len(str(value)) for value in values if value is not None), default=1)


def runs_table(runs: list[dict]) -> Table:
    table = _table(f"{len(runs)} run(s)")
    table.add_column("run", no_wrap=True, min_width=_name_width(run["name"] for run in runs))
    table.add_column("arm", no_wrap=True, min_width=_name_width(run["arm"] for run in runs))
    for column in ("seed", "status", "step", "evals", "conflicts"):
        table.add_column(column, justify="left" if column == "status" else "right")
    table.add_column("base model", overflow="fold")
    for run in runs:
        last = run["last_step"] if run["last_step"] is not None else run["last_eval_step"]
        steps = _text(last) + (f"/{run['total_steps']}" if run["total_steps"] else "")
        table.add_row(run["name"], _text(run["arm"]), _text(run["seed"]), _text(run["status"]), steps,
                      str(run["n_evaluations"]), str(run["n_conflicts"]), _text(run["base_model"]))
    return table


def sync_table(counts: dict[str, dict[str, int]]) -> Table:
    """What a `ccpo sync pull` merged, per table: new rows, rows already here, conflicts, ..."""
    outcomes = sorted({outcome for table in counts.values() for outcome in table},
                      key=lambda name: ("new", "updated", "same", "duplicate", "conflict").index(name)
                      if name in ("new", "updated", "same", "duplicate", "conflict") else 9)
    table = _table("merged rows")
    table.add_column("table", no_wrap=True)
    for outcome in outcomes:
        table.add_column(outcome, justify="right")
    for name in ("runs", "evaluations", "conflicts", "facts", "publications"):
        if name in counts:
            table.add_row(name, *(str(counts[name].get(outcome, 0)) for outcome in outcomes))
    return table


def run_detail_tables(document: dict) -> list[Table]:
    run = document["run"]
    settings_table = _table(f"run {run['name']}", show_header=False)
    settings_table.add_column("field")
    settings_table.add_column("value")
    identity = document.get("identity") or {}
    arm = identity.get("arm") or {}
    protocol = identity.get("protocol") or {}
    settings_table.add_row("kind", _text(identity.get("kind") or run.get("kind")))
    settings_table.add_row("arm", _text(arm.get("label") or run.get("arm")))
    for key in ("arm_fingerprint", "seed", "base_model", "benchmark", "backend", "status", "last_step",
                "total_steps", "hardware", "data_order_seed", "step1_rollout_hash", "git_commit", "git_dirty",
                "uid", "host", "created_at", "updated_at", "n_evaluations", "n_conflicts"):
        settings_table.add_row(key, _text(run.get(key)))
    if protocol:
        episodes = _text(protocol.get("episodes"))
        if protocol.get("episodes_basis") not in (None, "recorded"):
            episodes += f" ({protocol['episodes_basis']})"
        settings_table.add_row("protocol", f"split {_text(protocol.get('split'))}, temperature "
                               f"{_text(protocol.get('temperature'))}, episodes {episodes}, turn limit "
                               f"{_text(protocol.get('turn_limit'))}")
    splits = sorted({row["split"] for row in document["evaluations"]})
    evaluations = _table("evaluations (success %; sources and ids in --json)")
    columns = (["split"] if len(splits) > 1 else []) + ["step", "success", "eps", "turns", *TASK_TYPES]
    for column in columns:
        evaluations.add_column(column, justify="left" if column == "split" else "right")
    for row in document["evaluations"]:
        cells = [row["split"]] if len(splits) > 1 else []
        cells += [str(row["step"]), _number(row["success_rate"]), _text(row["episodes"]), _number(row["mean_turns"])]
        cells += [_number(row["task_types"][key]["success"]) if key in row["task_types"] else "-" for key in TASK_TYPES]
        evaluations.add_row(*cells)
    tables = [settings_table, evaluations]
    if document["conflicts"]:
        conflicts = _table("conflicting results (kept, not applied)")
        for column in ("id", "step", "kept eval", "success %", "source"):
            conflicts.add_column(column)
        for row in document["conflicts"]:
            conflicts.add_row(str(row["id"]), str(row["step"]), str(row["kept_evaluation_id"]),
                              _number(row["content"].get("success_rate")),
                              f"{row['source_file']}:{row['source_line']}" if row["source_file"] else "-")
        tables.append(conflicts)
    return tables


def _window_title(document: dict) -> str:
    start = document.get("window_start")
    return f"step >= {start}" if start is not None else "from 7/15 of each run's total steps"


def arms_table(document: dict) -> Table:
    table = _table(f"arms side by side (window {_window_title(document)})")
    table.add_column("arm", no_wrap=True, min_width=_name_width(arm["arm"] for arm in document["arms"]))
    for column in ("held-out mean", "sd", "n", "seeds", "note"):
        table.add_column(column, justify="left" if column == "note" else "right")
    for arm in document["arms"]:
        n_label = f"{arm['n']}" + (" evals" if arm["sd_over"] == "evaluations" else " seeds")
        notes = [note for note in (arm["note"], *arm.get("seed_notes", ())) if note]
        table.add_row(arm["arm"], _number(arm["mean"]), _number(arm["sd"]), n_label, str(arm["n_seeds"]),
                      "; ".join(notes))
    return table


def references_table(document: dict) -> Table:
    table = _table("reference runs (evaluation only: not arms)")
    table.add_column("run", no_wrap=True, min_width=_name_width(row["run"] for row in document["references"]))
    for column in ("agent", "held-out mean", "sd", "evals", "episodes"):
        table.add_column(column, justify="left" if column == "agent" else "right")
    for row in document["references"]:
        table.add_row(row["run"], _text(row["agent"] or "not recorded"), _number(row["mean"]), _number(row["sd"]),
                      str(row["n_evaluations"]), _text(row["protocol"]["episodes"]))
    return table


def _run_arm(run: dict) -> str:
    if run.get("kind") == "evaluation":
        return "(reference)"
    return _text(run.get("arm_label") or run["arm"])


def per_run_table(document: dict) -> Table:
    table = _table("per run: window mean±sd (n evals), best and its expected inflation")
    table.add_column("run", no_wrap=True, min_width=_name_width(run["run"] for run in document["runs"]))
    table.add_column("arm", no_wrap=True, min_width=_name_width(_run_arm(run) for run in document["runs"]))
    for column in ("seed", "window", "trend", "best@step", "bias", "1 eval", "step"):
        table.add_column(column, justify="right", no_wrap=True)
    for run in document["runs"]:
        window, best, interval = run["window"], run["best"], run["single_eval_interval"]
        window_text = f"{_number(window['mean'])}±{_number(window['sd'])} ({window['n']})"
        best_text = f"{_number(best['success'])}@{best['step']}" if best else "-"
        bias_text = (
            f"+{_number(best['expected_max_bias_points'])}"
            if best and best["expected_max_bias_points"] is not None else "-"
        )
        trend = window.get("trend") or {}
        # "rising"/"falling": the slope interval excludes 0, so the window is not converged.
        trend_text = trend.get("direction") or ("too few" if window["n"] else "-")
        table.add_row(
            run["run"], _run_arm(run), _text(run["seed"]), window_text, trend_text, best_text, bias_text,
            f"±{_number(interval['half_width'])}" if interval else "-",
            f"{_text(run['last_step'])}/{_text(run['total_steps'])}",
        )
    return table


def best_rows_table(document: dict) -> Table:
    """The card's "best single evaluation" row for every run (biased upward; see the bias)."""
    table = _table("best single evaluation per run (not the result: see the window)")
    table.add_column("run", no_wrap=True, min_width=_name_width(run["run"] for run in document["runs"]))
    for column in ("step", "held-out", "turns", *TASK_TYPES):
        table.add_column(column, justify="right", no_wrap=True)
    for run in document["runs"]:
        best = run["best"]
        if best is None:
            continue
        table.add_row(run["run"], str(best["step"]), _number(best["success"]), _number(best["mean_turns"]),
                      *[_number(best["task_types"].get(key)) for key in TASK_TYPES])
    return table


def comparisons_table(document: dict) -> Table:
    table = _table("arm differences (window means across seeds)")
    table.add_column("a vs b", no_wrap=True)
    for column in ("a - b", "t", "df", "p", "95% CI", "P(a>b)", "note"):
        table.add_column(column, no_wrap=column != "note")
    for row in document["comparisons"]:
        welch = row["welch"]
        interval = f"[{_number(welch['ci_low'])}, {_number(welch['ci_high'])}]" if welch["ci_low"] is not None else "-"
        poi = row["probability_of_improvement"]
        poi_text = _number(poi, 2) if poi is not None else (row.get("poi_note") or "-")
        verdict = (row.get("isolation") or {}).get("verdict")
        notes = [row["note"] or "", f"isolation {verdict}" if verdict and verdict != "passes" else ""]
        table.add_row(f"{row['arm_a']} vs {row['arm_b']}", _number(row["difference"]), _number(welch["t"], 2),
                      _number(welch["df"]), _number(welch["p"], 3), interval, poi_text,
                      "; ".join(note for note in notes if note))
    return table


def isolation_text(document: dict) -> Text:
    isolation = document["isolation"]
    if isolation.get("note"):
        return Text(f"isolation: {isolation['note']}")
    verdict = isolation.get("verdict", "passes" if isolation["estimator_only"] else "fails")
    if verdict == "passes":
        text = Text("isolation passes: the compared runs differ only in the estimator")
    elif verdict == "fails":
        text = Text("isolation fails: the runs also differ in:")
    else:
        text = Text("isolation unverifiable: nothing recorded differs, but some evidence is missing")
    for difference in isolation["differences"]:
        text.append(f"\n  - {difference}")
    if isolation["not_recorded"]:
        text.append(f"\n  not recorded (cannot be checked): {', '.join(isolation['not_recorded'])}")
    if document.get("protocol_mixed"):
        text.append("\n  mixed evaluation protocols (panel size, split or temperature): each window uses one protocol")
    for run, conflict in (document.get("conflicts") or {}).items():
        text.append(f"\n  conflicts recorded for {run}: steps {conflict['steps']} {conflict['facts'] or ''}".rstrip())
    return text


def comparison_renderables(document: dict) -> Iterator[Any]:
    """Everything `ccpo compare` prints, in order."""
    if not document["runs"]:
        yield Text("no runs in the database")
        return
    yield arms_table(document)
    if document.get("references"):
        yield references_table(document)
    yield per_run_table(document)
    yield best_rows_table(document)
    if document["comparisons"]:
        yield comparisons_table(document)
    if document.get("power", {}).get("pairs"):
        from ccpo_cli.report.power_tables import power_table

        yield power_table(document["power"])
    for row in document.get("not_compared") or []:
        yield Text(f"{row['arm_a']} vs {row['arm_b']}: {row['note']}")
    for run, why in (document.get("left_out") or {}).items():
        yield Text(f"left out: {run}: {why}")
    yield isolation_text(document)
    yield Text(
        "Read the window mean, not the best point: the best of n evaluations is biased upward by "
        "the expected maximum of n normals (in sd)."
    )
