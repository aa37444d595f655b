"""The tables of `ccpo runs list` and `ccpo runs show --metric` (`ccpo runs show` itself:
report/run_detail_tables.py).

Each is a `TableData` (report/tables.py). The per-type columns of a run's evaluations are its
benchmark's own (`benchmark_task_types`), never another benchmark's.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ccpo_cli.errors import UsageError
from ccpo_cli.report import tables
from ccpo_cli.report.tables import Cell, Column, TableData


def _at_step(value: Any, step: Any) -> Cell:
    return Cell(
        f"{tables.number_text(value)}@{step}" if value is not None else "-",
        (tables.raw_value(value), step),
    )


# `ccpo runs list` without --wide: the columns that fit 80 columns for runs of usual names.
NARROW_RUN_COLUMNS = ("run", "arm", "seed", "status", "step", "window")
# `ccpo runs list --sort`: column -> the run's field; success is sorted highest first.
RUN_SORT_FIELDS = {
    "run": "name",
    "arm": "arm",
    "seed": "seed",
    "status": "status",
    "step": "last_step",
    "last": "last_success",
    "best": "best_success",
    "window": "window_success",
    "created": "created_at",
    "updated": "updated_at",
}
_HIGHEST_FIRST = ("last", "best", "window")


def sorted_runs(runs: list[dict], by: str, limit: int | None = None) -> list[dict]:
    """`runs` ordered by the column `by` (a run without that value last), the first `limit`."""
    if by not in RUN_SORT_FIELDS:
        raise UsageError(f"--sort {by}: sort by one of {', '.join(RUN_SORT_FIELDS)}")
    field = RUN_SORT_FIELDS[by]
    known = [run for run in runs if run.get(field) is not None]
    unknown = [run for run in runs if run.get(field) is None]
    known.sort(key=lambda run: run[field], reverse=by in _HIGHEST_FIRST)
    ordered = known + unknown
    return ordered if limit is None else ordered[:limit]


def narrow_runs_table(runs: list[dict]) -> TableData:
    """The terminal's default `runs list`: NARROW_RUN_COLUMNS, a retracted run's status saying so."""
    shown = [{**run, "status": "retracted"} if run.get("retracted") else run for run in runs]
    table = runs_table(shown)
    return table.keeping(
        [index for index, column in enumerate(table.columns) if column.header in NARROW_RUN_COLUMNS]
    )


def runs_table(runs: list[dict]) -> TableData:
    table = TableData(
        "runs",
        f"{len(runs)} run(s) (held-out success %)",
        [
            tables.name_column("run"),
            tables.name_column("arm"),
            Column("seed"),
            Column("status", tables.NAME, "left"),
            Column("step", fields=("last_step", "total_steps")),
            Column("evals"),
            Column("last", fields=("last_success", "last_success_step")),
            Column("best", fields=("best_success", "best_success_step")),
            Column("window", fields=("window_success", "window_n")),
            Column("conflicts"),
            Column("retracted", tables.TEXT, "left"),
            Column("base model", tables.NAME, "left"),
            tables.name_column("benchmark"),
            tables.name_column("backend"),
            tables.name_column("created"),
            tables.name_column("updated"),
        ],
    )
    for run in runs:
        table.add(*_run_cells(run))
    return table


def _run_cells(run: dict) -> list[Cell]:
    """One run's row of `runs_table`: steps as last/total, success as value@step, the window
    with its count, and what of it is retracted."""
    last = run["last_step"] if run["last_step"] is not None else run["last_eval_step"]
    steps = tables.dash_or_text(last) + (f"/{run['total_steps']}" if run["total_steps"] else "")
    retracted = run.get("retracted")
    retracted_text = (
        "run" if retracted else (f"{run['n_retracted']} eval(s)" if run.get("n_retracted") else "")
    )
    window = run.get("window_success")
    return [
        tables.txt(run["name"]),
        tables.txt(run["arm"]),
        tables.num(run["seed"]),
        tables.txt(run["status"]),
        Cell(steps, (last, run["total_steps"])),
        tables.num(run["n_evaluations"]),
        _at_step(run.get("last_success"), run.get("last_success_step")),
        _at_step(run.get("best_success"), run.get("best_success_step")),
        Cell(
            f"{tables.number_text(window)} ({run.get('window_n')})" if window is not None else "-",
            (tables.raw_value(window), run.get("window_n") or 0),
        ),
        tables.num(run["n_conflicts"]),
        Cell(
            retracted_text,
            (retracted or {}).get("reason") if retracted else run.get("n_retracted") or 0,
        ),
        tables.txt(run["base_model"]),
        tables.txt(run.get("benchmark")),
        tables.txt(run.get("backend")),
        Cell((run.get("created_at") or "-")[:16].replace("T", " "), run.get("created_at")),
        Cell((run.get("updated_at") or "-")[:16].replace("T", " "), run.get("updated_at")),
    ]


def benchmark_task_types(
    benchmarks: Iterable[str | None], rows: Iterable[dict[str, Any]]
) -> tuple[str, ...]:
    """The per-type columns of runs of these benchmarks: each known benchmark's own task types,
    in its declared order (none for WebShop or Sokoban), and, for a run whose benchmark is not
    recorded, the types its rows hold; never another benchmark's columns."""
    from ccpo_cli.benchmarks import list_benchmarks, load_benchmark

    known = set(list_benchmarks())
    keys: dict[str, None] = {}
    unknown = False
    for name in benchmarks:
        if name in known:
            keys.update((task.key, None) for task in load_benchmark(name).task_types)
        else:
            unknown = True
    if unknown:
        for row in rows:
            keys.update((key, None) for key in (row.get("task_types") or {}))
    return tuple(keys)


def metric_series_tables(document: dict) -> list[TableData]:
    """`ccpo runs show RUN --metric KEY`: one table per scalar, a row per step (the value
    recorded first, its source file and line, how many other values that step has)."""
    series_tables = []
    for series in document["series"]:
        table = TableData(
            f"metric {series['metric']}",
            f"run {document['run']}: {series['metric']} ({len(series['points'])} step(s))",
            [
                Column("step"),
                Column("value"),
                tables.text_column("source"),
                Column("other values"),
            ],
        )
        for point in series["points"]:
            where = point["source_file"]
            if where is not None and point["source_line"] is not None:
                where = f"{where}:{point['source_line']}"
            table.add(
                tables.num(point["step"]),
                Cell(f"{point['value']:.6g}", tables.raw_value(point["value"])),
                tables.txt(where),
                tables.num(point["other_values"]),
            )
        series_tables.append(table)
    return series_tables
