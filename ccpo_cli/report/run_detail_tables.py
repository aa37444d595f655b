"""The tables and notes of `ccpo runs show`, from the document `store/run_detail.py` builds.

Each table is a `TableData` (report/tables.py); the notes are lines printed after the tables.
The per-type columns of the evaluations are the run's benchmark's own (`benchmark_task_types`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ccpo_cli.report import tables
from ccpo_cli.report.run_tables import benchmark_task_types
from ccpo_cli.report.tables import Cell, Column, TableData
from ccpo_cli.terminal_text import escape_control

# The run's fields the settings table lists, in this order, after its kind and arm.
SETTINGS_FIELDS = (
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
)


def run_detail_tables(document: dict, asked_as: str) -> list[Any]:
    """`ccpo runs show RUN`: settings, config, evaluations (retracted ones marked), conflicts
    and their settlements, then the notes (`run_detail_notes`); `asked_as` is RUN as given."""
    items: list[Any] = [_settings_table(document)]
    config_table = _config_table(document)
    if config_table is not None:
        items.append(config_table)
    items.append(_evaluations_table(document))
    if document["conflicts"]:
        items.append(_conflicts_table(document["conflicts"]))
    if document.get("resolutions"):
        items.append(_resolutions_table(document["resolutions"]))
    return items + run_detail_notes(document, asked_as)


def _settings_table(document: dict) -> TableData:
    """The run's identity and record, its protocol (what it does not record is said to be not
    recorded, never a default) and its retraction."""
    run = document["run"]
    table = TableData(
        "settings",
        f"run {run['name']}",
        [tables.name_column("field"), tables.text_column("value")],
        show_header=False,
    )
    identity = document.get("identity") or {}
    arm = identity.get("arm") or {}
    table.add("kind", tables.txt(identity.get("kind") or run.get("kind")))
    table.add("arm", tables.txt(arm.get("label") or run.get("arm")))
    for key in SETTINGS_FIELDS:
        table.add(key, tables.txt(run.get(key)))
    protocol = identity.get("protocol") or {}
    if protocol:
        table.add("protocol", tables.txt(_protocol_text(protocol)))
    if run.get("retracted"):
        retracted = run["retracted"]
        table.add(
            "retracted",
            tables.txt(
                f"{retracted['reason']} ({retracted['retracted_by']}, {retracted['recorded_at']})"
            ),
        )
    return table


def _protocol_text(protocol: dict) -> str:
    """Split, temperature, episodes (with their basis when not recorded) and turn limit."""

    def said(key: str) -> str:
        return f"{key.replace('_', ' ')} " + (
            "not recorded" if protocol.get(key) is None else str(protocol[key])
        )

    episodes = said("episodes")
    if protocol.get("episodes") is not None and protocol.get("episodes_basis") not in (
        None,
        "recorded",
    ):
        episodes += f" ({protocol['episodes_basis']})"
    return f"{said('split')}, {said('temperature')}, {episodes}, {said('turn_limit')}"


def _config_table(document: dict) -> TableData | None:
    """The training config, flattened, and the protocol facts; None when the run has neither."""
    run = document["run"]
    config = run.get("config") if isinstance(run.get("config"), dict) else {}
    if not (config or document.get("facts")):
        return None
    from ccpo_cli.report.diffs import flatten

    table = TableData(
        "config",
        "config",
        [tables.name_column("key"), tables.text_column("value")],
        show_header=False,
    )
    for key, value in sorted(flatten(config).items()):
        listed = json.dumps(value, default=str) if isinstance(value, list) else None
        table.add(tables.txt(key), Cell(listed or tables.dash_or_text(value), listed or value))
    for key, value in sorted((document.get("facts") or {}).items()):
        table.add(tables.txt(f"facts.{key}"), tables.txt(value))
    return table


def _evaluations_table(document: dict) -> TableData:
    """Every evaluation, a split column when there are several, the benchmark's task types."""
    run = document["run"]
    task_keys = benchmark_task_types(
        [(document.get("identity") or {}).get("benchmark", run.get("benchmark"))],
        document["evaluations"],
    )
    with_split = len({row["split"] for row in document["evaluations"]}) > 1
    columns = ([tables.name_column("split")] if with_split else []) + [
        Column("step"),
        Column("success"),
        Column("eps"),
        Column("turns"),
        *(Column(key) for key in task_keys),
    ]
    # The retraction goes beside the success it retracts, so that it is on the same part of the
    # table as its row in a narrow terminal (a retracted row must never look standing).
    marker = len(columns) - len(task_keys) - 2
    columns.insert(marker, Column("retracted", tables.TEXT, "left"))
    table = TableData("evaluations", "evaluations (success %; sources and ids in --json)", columns)
    for row in document["evaluations"]:
        retraction = row.get("retracted")
        cells = _evaluation_cells(row, with_split, task_keys)
        cells.insert(
            marker,
            tables.txt(
                retraction["reason"] if retraction else None,
                retraction["reason"] if retraction else "",
            ),
        )
        table.add(*cells)
    return table


def _evaluation_cells(
    row: dict[str, Any], with_split: bool, task_keys: Sequence[str]
) -> list[Cell]:
    cells = [tables.txt(row["split"])] if with_split else []
    cells += [
        tables.num(row["step"]),
        tables.num(row["success_rate"]),
        tables.num(row["episodes"]),
        tables.num(row["mean_turns"]),
    ]
    cells += [
        tables.num(row["task_types"][key]["success"])
        if key in row["task_types"]
        else tables.num(None)
        for key in task_keys
    ]
    return cells


def _conflicts_table(conflicts: list[dict]) -> TableData:
    def source(row: dict) -> Cell:
        where = f"{row['source_file']}:{row['source_line']}" if row["source_file"] else "-"
        return Cell(where, where if row["source_file"] else None)

    def settled(row: dict) -> Cell:
        kept = row.get("resolution")
        if not kept:
            return tables.txt(None, None)
        return tables.txt(
            f"kept {tables.number_text(kept['kept_value'])} ({kept['resolved_by']})",
            f"kept {kept['kept_value']}",
        )

    columns = [
        ("id", tables.NUMBER, lambda row: tables.num(row["id"])),
        ("step", tables.NUMBER, lambda row: tables.num(row["step"])),
        ("kept eval", tables.NUMBER, lambda row: tables.num(row["kept_evaluation_id"])),
        ("success %", tables.NUMBER, lambda row: tables.num(row["content"].get("success_rate"))),
        ("source", tables.NAME, source),
        ("settled", tables.TEXT, settled),
    ]
    return tables.table_of(
        conflicts, columns, name="conflicts", title="conflicting results (kept, not applied)"
    )


def _resolutions_table(resolutions: list[dict]) -> TableData:
    columns = [
        ("step", tables.NUMBER, lambda row: tables.num(row["step"])),
        ("split", tables.NAME, lambda row: tables.txt(row["split"])),
        ("seed", tables.NUMBER, lambda row: tables.num(row["eval_seed"])),
        ("kept", tables.NUMBER, lambda row: tables.num(row["kept_value"])),
        ("by", tables.NAME, lambda row: tables.txt(row["resolved_by"])),
        ("at", tables.NAME, lambda row: tables.txt(row["recorded_at"])),
        ("reason", tables.TEXT, lambda row: tables.txt(row["reason"])),
    ]
    return tables.table_of(resolutions, columns, name="resolutions", title="settled conflicts")


def run_detail_notes(document: dict, asked_as: str) -> list[str]:
    """The lines after the tables: why the run stopped, the dataset commits its pulled rows came
    from, rows a pull held, and fields another machine recorded with another value. Names and
    values come from files and other machines: escaped for the terminal."""
    run = document["run"]
    notes = []
    if run.get("interrupted_because"):
        notes.append(f"interrupted: {run['interrupted_because']}")
    if run.get("failure"):
        notes.append(f"failed: {run['failure']['message']}")
    for source in document["dataset_sources"]:
        notes.append(
            escape_control(
                f"pulled from {source['repo_id']} at commit {source['commit_id']}: "
                f"{source['rows']} rows, first merged {source['first_merged_at']}"
            )
        )
    for held in document["held_from_sync"]:
        settle = (
            f"; ccpo sync accept {asked_as} --id {held['id']} merges it"
            if held["state"] == "held"
            else f" by {held['settled_by']}"
        )
        notes.append(
            escape_control(
                f"{held['state']} from sync: a {held['table']} row {held['summary']} of "
                f"{held['part']} at commit {held['commit_id']}, not written by this machine"
                f"{settle}"
            )
        )
    for conflict in document["field_conflicts"]:
        notes.append(
            escape_control(
                f"{conflict['field']} recorded elsewhere as {conflict['remote_value']!r} "
                f"(here {conflict['local_value']!r}; {conflict['origin']})"
            )
        )
    return notes
