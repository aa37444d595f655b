"""The tables of `ccpo runs list` and `ccpo runs show`.

Each is a `TableData` (report/tables.py). The per-type columns of a run's evaluations are its
benchmark's own (`benchmark_task_types`), never another benchmark's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from ccpo_cli.errors import UsageError
from ccpo_cli.report.tables import (
    NAME,
    TEXT,
    Cell,
    Column,
    TableData,
    dash_or_text,
    name_column,
    num,
    number_text,
    raw_value,
    text_column,
    txt,
)


def _at_step(value: Any, step: Any) -> Cell:
    return Cell(
        f"{number_text(value)}@{step}" if value is not None else "-", (raw_value(value), step)
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
            name_column("run"),
            name_column("arm"),
            Column("seed"),
            Column("status", NAME, "left"),
            Column("step", fields=("last_step", "total_steps")),
            Column("evals"),
            Column("last", fields=("last_success", "last_success_step")),
            Column("best", fields=("best_success", "best_success_step")),
            Column("window", fields=("window_success", "window_n")),
            Column("conflicts"),
            Column("retracted", TEXT, "left"),
            Column("base model", NAME, "left"),
            name_column("benchmark"),
            name_column("backend"),
            name_column("created"),
            name_column("updated"),
        ],
    )
    for run in runs:
        last = run["last_step"] if run["last_step"] is not None else run["last_eval_step"]
        steps = dash_or_text(last) + (f"/{run['total_steps']}" if run["total_steps"] else "")
        retracted = run.get("retracted")
        retracted_text = (
            "run"
            if retracted
            else (f"{run['n_retracted']} eval(s)" if run.get("n_retracted") else "")
        )
        window = run.get("window_success")
        table.add(
            txt(run["name"]),
            txt(run["arm"]),
            num(run["seed"]),
            txt(run["status"]),
            Cell(steps, (last, run["total_steps"])),
            num(run["n_evaluations"]),
            _at_step(run.get("last_success"), run.get("last_success_step")),
            _at_step(run.get("best_success"), run.get("best_success_step")),
            Cell(
                f"{number_text(window)} ({run.get('window_n')})" if window is not None else "-",
                (raw_value(window), run.get("window_n") or 0),
            ),
            num(run["n_conflicts"]),
            Cell(
                retracted_text,
                (retracted or {}).get("reason") if retracted else run.get("n_retracted") or 0,
            ),
            txt(run["base_model"]),
            txt(run.get("benchmark")),
            txt(run.get("backend")),
            Cell((run.get("created_at") or "-")[:16].replace("T", " "), run.get("created_at")),
            Cell((run.get("updated_at") or "-")[:16].replace("T", " "), run.get("updated_at")),
        )
    return table


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


def _evaluation_cells(
    row: dict[str, Any], with_split: bool, task_keys: Sequence[str]
) -> list[Cell]:
    cells = [txt(row["split"])] if with_split else []
    cells += [
        num(row["step"]),
        num(row["success_rate"]),
        num(row["episodes"]),
        num(row["mean_turns"]),
    ]
    cells += [
        num(row["task_types"][key]["success"]) if key in row["task_types"] else num(None)
        for key in task_keys
    ]
    return cells


def metric_series_tables(document: dict) -> list[TableData]:
    """`ccpo runs show RUN --metric KEY`: one table per scalar, a row per step (the value
    recorded first, its source file and line, how many other values that step has)."""
    tables = []
    for series in document["series"]:
        table = TableData(
            f"metric {series['metric']}",
            f"run {document['run']}: {series['metric']} ({len(series['points'])} step(s))",
            [
                Column("step"),
                Column("value"),
                text_column("source"),
                Column("other values"),
            ],
        )
        for point in series["points"]:
            where = point["source_file"]
            if where is not None and point["source_line"] is not None:
                where = f"{where}:{point['source_line']}"
            table.add(
                num(point["step"]),
                Cell(f"{point['value']:.6g}", raw_value(point["value"])),
                txt(where),
                num(point["other_values"]),
            )
        tables.append(table)
    return tables


def run_detail_tables(document: dict) -> list[Any]:
    """`ccpo runs show`: settings, evaluations (retracted ones marked), conflicts, corrections.
    The per-type columns are the run's benchmark's own (`benchmark_task_types`)."""
    run = document["run"]
    task_keys = benchmark_task_types(
        [(document.get("identity") or {}).get("benchmark", run.get("benchmark"))],
        document["evaluations"],
    )
    settings_table = TableData(
        "settings",
        f"run {run['name']}",
        [name_column("field"), text_column("value")],
        show_header=False,
    )
    identity = document.get("identity") or {}
    arm = identity.get("arm") or {}
    protocol = identity.get("protocol") or {}
    settings_table.add("kind", txt(identity.get("kind") or run.get("kind")))
    settings_table.add("arm", txt(arm.get("label") or run.get("arm")))
    for key in (
        "arm_fingerprint",
        "seed",
        "base_model",
        "benchmark",
        "backend",
        "status",
        "last_step",
        "total_steps",
        "hardware",
        "data_order_seed",
        "step1_rollout_hash",
        "git_commit",
        "git_dirty",
        "uid",
        "host",
        "created_at",
        "updated_at",
        "n_evaluations",
        "n_retracted",
        "n_conflicts",
        "n_settled_conflicts",
    ):
        settings_table.add(key, txt(run.get(key)))
    if protocol:

        def said(
            key: str,
        ) -> str:  # what the run does not record is said to be not recorded, never a default
            return f"{key.replace('_', ' ')} " + (
                "not recorded" if protocol.get(key) is None else str(protocol[key])
            )

        episodes = said("episodes")
        if protocol.get("episodes") is not None and protocol.get("episodes_basis") not in (
            None,
            "recorded",
        ):
            episodes += f" ({protocol['episodes_basis']})"
        settings_table.add(
            "protocol",
            txt(f"{said('split')}, {said('temperature')}, {episodes}, {said('turn_limit')}"),
        )
    if run.get("retracted"):
        retracted = run["retracted"]
        settings_table.add(
            "retracted",
            txt(f"{retracted['reason']} ({retracted['retracted_by']}, {retracted['recorded_at']})"),
        )
    items: list[Any] = [settings_table]
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    if config or document.get("facts"):
        from ccpo_cli.report.diffs import flatten

        config_table = TableData(
            "config", "config", [name_column("key"), text_column("value")], show_header=False
        )
        for key, value in sorted(flatten(config).items()):
            config_table.add(
                txt(key),
                Cell(
                    json.dumps(value, default=str)
                    if isinstance(value, list)
                    else dash_or_text(value),
                    json.dumps(value, default=str) if isinstance(value, list) else value,
                ),
            )
        for key, value in sorted((document.get("facts") or {}).items()):
            config_table.add(txt(f"facts.{key}"), txt(value))
        items.append(config_table)
    splits = sorted({row["split"] for row in document["evaluations"]})
    with_split = len(splits) > 1
    columns = ([name_column("split")] if with_split else []) + [
        Column("step"),
        Column("success"),
        Column("eps"),
        Column("turns"),
        *(Column(key) for key in task_keys),
    ]
    # The retraction goes beside the success it retracts, so that it is on the same part of the
    # table as its row in a narrow terminal (a retracted row must never look standing).
    marker = len(columns) - len(task_keys) - 2
    columns.insert(marker, Column("retracted", TEXT, "left"))
    evaluations = TableData(
        "evaluations", "evaluations (success %; sources and ids in --json)", columns
    )
    for row in document["evaluations"]:
        retraction = row.get("retracted")
        cells = _evaluation_cells(row, with_split, task_keys)
        cells.insert(
            marker,
            txt(
                retraction["reason"] if retraction else None,
                retraction["reason"] if retraction else "",
            ),
        )
        evaluations.add(*cells)
    items.append(evaluations)
    if document["conflicts"]:
        conflicts = TableData(
            "conflicts",
            "conflicting results (kept, not applied)",
            [
                Column("id"),
                Column("step"),
                Column("kept eval"),
                Column("success %"),
                name_column("source"),
                text_column("settled"),
            ],
        )
        for row in document["conflicts"]:
            source = f"{row['source_file']}:{row['source_line']}" if row["source_file"] else "-"
            settled = row.get("resolution")
            conflicts.add(
                num(row["id"]),
                num(row["step"]),
                num(row["kept_evaluation_id"]),
                num(row["content"].get("success_rate")),
                Cell(source, source if row["source_file"] else None),
                txt(
                    f"kept {number_text(settled['kept_value'])} ({settled['resolved_by']})"
                    if settled
                    else None,
                    None if not settled else f"kept {settled['kept_value']}",
                ),
            )
        items.append(conflicts)
    if document.get("resolutions"):
        resolutions = TableData(
            "resolutions",
            "settled conflicts",
            [
                Column("step"),
                name_column("split"),
                Column("seed"),
                Column("kept"),
                name_column("by"),
                name_column("at"),
                text_column("reason"),
            ],
        )
        for row in document["resolutions"]:
            resolutions.add(
                num(row["step"]),
                txt(row["split"]),
                num(row["eval_seed"]),
                num(row["kept_value"]),
                txt(row["resolved_by"]),
                txt(row["recorded_at"]),
                txt(row["reason"]),
            )
        items.append(resolutions)
    return items
