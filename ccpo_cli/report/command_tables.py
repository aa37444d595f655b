"""The tables of `ccpo eval`, `ccpo arms`, `ccpo runs diff`, `ccpo games check` and `ccpo sync pull`.

Each is a `TableData` (report/tables.py), so every format a table has comes with it. The runs
tables (`ccpo runs list` and `ccpo runs show`) are in report/run_tables.py and
report/run_detail_tables.py.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ccpo_cli.report import tables
from ccpo_cli.report.tables import Cell, Column, TableData


def differences_table(differences: Sequence[Any], first: str, second: str, what: str) -> TableData:
    """`runs diff` / `arms diff`: one row per field that differs, the two sides side by side
    (never in separate parts of a narrow terminal: long values fold instead)."""
    table = TableData(
        "differences",
        f"{what} {first} vs {second}: {len(differences)} difference(s)",
        [
            tables.text_column("field"),
            tables.text_column(first),
            tables.text_column(second),
            tables.text_column("note"),
        ],
        whole=True,
    )
    for difference in differences:
        shown = [
            json.dumps(value, default=str) if isinstance(value, (list, dict)) else value
            for value in (difference.first, difference.second)
        ]
        table.add(
            tables.txt(difference.field),
            Cell(tables.dash_or_text(shown[0]), tables.raw_value(difference.first)),
            Cell(tables.dash_or_text(shown[1]), tables.raw_value(difference.second)),
            tables.txt(difference.note),
        )
    return table


def folded_differences(differences: Sequence[Any], first: str, second: str, what: str) -> list:
    """The terminal's `runs diff`: the fields both sides recorded differently as the table, and
    those one side never recorded folded into one line per side (CSV and JSON keep every row)."""
    from ccpo_cli.report.diffs import NOT_RECORDED

    missing = {
        side: [d.field for d in differences if getattr(d, side) == NOT_RECORDED]
        for side in ("first", "second")
    }
    both = [d for d in differences if NOT_RECORDED not in (d.first, d.second)]
    items: list[Any] = []
    if both:
        table = differences_table(both, first, second, what)
        table.title = f"{what} {first} vs {second}: {len(differences)} difference(s)"
        items.append(table)
    for side, name, other in (("first", first, second), ("second", second, first)):
        if missing[side]:
            items.append(
                f"{len(missing[side])} field(s) recorded for {other}, not recorded for {name}: "
                + ", ".join(missing[side])
            )
    return items


def arms_list_table(arms: list[dict]) -> TableData:
    columns = [
        ("arm", tables.NAME, lambda arm: tables.txt(arm["arm"])),
        ("estimator", tables.NAME, lambda arm: tables.txt(arm["estimator"])),
        ("fingerprint", tables.NAME, lambda arm: Cell(arm["fingerprint"][:12], arm["fingerprint"])),
        ("description", tables.TEXT, lambda arm: tables.txt(arm["description"])),
    ]
    return tables.table_of(arms, columns, name="arms", title="")


def arm_flags_table(flags: dict[str, Any], inert: dict[str, str]) -> TableData:
    table = TableData(
        "flags",
        "",
        [
            tables.name_column("flag"),
            Column("value", tables.NAME, "left"),
            tables.text_column("inert because"),
        ],
    )
    for name, value in flags.items():
        shown = '""' if value == "" else str(value)
        table.add(
            tables.txt(name),
            Cell(shown, value),
            tables.txt(inert.get(name, ""), inert.get(name, "")),
        )
    return table


def sync_table(counts: dict[str, dict[str, int]]) -> TableData:
    """What a `ccpo sync pull` merged, per table: new rows, rows already here, conflicts, ..."""
    order = ("new", "updated", "same", "duplicate", "conflict")
    outcomes = sorted(
        {outcome for table in counts.values() for outcome in table},
        key=lambda name: order.index(name) if name in order else len(order),
    )
    table = TableData(
        "merged",
        "merged rows",
        [tables.name_column("table"), *(Column(outcome) for outcome in outcomes)],
    )
    for name in ("runs", "evaluations", "conflicts", "facts", "publications"):
        if name in counts:
            table.add(
                tables.txt(name),
                *(tables.num(counts[name].get(outcome, 0)) for outcome in outcomes),
            )
    return table


def games_check_table(folder: str, by_type: dict[str, dict[str, int]]) -> TableData:
    table = TableData(
        "games",
        f"{folder}: planner walkthrough check",
        [tables.name_column("type"), Column("games"), Column("won")],
    )
    for key, row in sorted(by_type.items()):
        table.add(tables.txt(key), tables.num(row["games"]), tables.num(row["ok"]))
    return table


def _task_types() -> tuple[str, ...]:
    # Imported here: the benchmark files are read only by the tables with per-type columns
    # (`ccpo runs list` shows none of them and should not pay for the YAML reader).
    from ccpo_cli.task_types import TASK_TYPES

    return tuple(TASK_TYPES)


def eval_tables(document: dict) -> list[Any]:
    """`ccpo eval`: the model line, per seed, per task type, and the summary line."""
    items: list[Any] = []
    checkpoint = document.get("checkpoint")
    if checkpoint:
        items.append(
            f"model: {checkpoint['merged_folder']} ({'reused merge' if checkpoint['reused_merge'] else 'merged'} "
            f"from {checkpoint['source']}, step {checkpoint['step']}; record {checkpoint['record']})"
        )
    items.append(_eval_seeds_table(document))
    items.append(_eval_task_types_table(document))
    items.append(
        f"success over {document['n_seeds']} seed(s): {tables.number_text(document['mean'])} % "
        f"± {tables.number_text(document['sd'])} (sd over seeds)"
    )
    return items


def _eval_seeds_table(document: dict) -> TableData:
    """A row per evaluation seed: episodes, wins, success with its Wilson interval, turns."""
    seeds = TableData(
        "seeds",
        f"{document['agent']} on {document['games']} (run {document['run']}, step {document['step']})",
        [
            Column("seed"),
            Column("episodes"),
            Column("wins"),
            Column("success %"),
            Column("Wilson 95%", fields=("wilson_low", "wilson_high")),
            Column("mean turns"),
            Column("invalid %"),
        ],
    )
    for row in document["evaluations"]:
        interval = row["wilson_95"]
        seeds.add(
            tables.num(row["seed"]),
            tables.num(row["episodes"]),
            tables.num(row["successes"]),
            tables.num(row["success"]),
            Cell(
                f"{tables.number_text(interval['low'])}-{tables.number_text(interval['high'])}",
                (tables.raw_value(interval["low"]), tables.raw_value(interval["high"])),
            ),
            tables.num(row["mean_turns"]),
            tables.num(row["invalid_turn_rate"]),
        )
    return seeds


def _eval_task_types_table(document: dict) -> TableData:
    """A row per task type the evaluation played: each seed's success, their mean ± sd."""
    seed_numbers = [row["seed"] for row in document["evaluations"]]
    types = TableData(
        "task_types",
        "per task type (success %)",
        [
            tables.name_column("type"),
            Column("episodes/seed"),
            *(Column(f"seed {seed}") for seed in seed_numbers),
            Column("mean ± sd", fields=("mean", "sd")),
        ],
    )
    for key in _task_types():
        if key not in document["task_types"]:
            continue
        cells = [row["task_types"].get(key) for row in document["evaluations"]]
        aggregate = document["task_types"][key]
        types.add(
            tables.txt(key),
            tables.num(cells[0]["episodes"] if cells[0] else None),
            *[tables.num(cell["success"] if cell else None) for cell in cells],
            Cell(
                f"{tables.number_text(aggregate['mean'])} ± {tables.number_text(aggregate['sd'])}",
                (tables.raw_value(aggregate["mean"]), tables.raw_value(aggregate["sd"])),
            ),
        )
    return types
