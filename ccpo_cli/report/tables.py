"""The tables of `ccpo runs`, `ccpo compare`, `ccpo eval`, `ccpo arms`, `ccpo games check` and
`ccpo sync pull`, and their formats: a terminal table, CSV and Markdown.

One rendering path per table: each table is built once as a `TableData` (its columns and, per
cell, the text a person reads and the raw value a program reads) and then handed to a formatter
(sqlite-utils' `--table/--csv/--fmt` is the model):

- `terminal_renderables`: rich tables that fit the terminal by wrapping, never by cutting.
  Numbers and names are never wrapped or shortened; text columns (notes, descriptions) wrap at
  words; a table still too wide for the terminal is split into several, each repeating the first
  column (the row's name), so that no cell is ever cut.
- `csv_text`: one table as CSV with the raw values (percent unrounded, empty for missing; a
  composite cell such as `83.5±6.5 (10)` becomes one field per part).
- `markdown_text`: every table as a GitHub pipe table (the rounded texts), with its title.

Lines that are not tables (notes, the isolation verdict) are plain strings among the tables.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ccpo_cli.errors import UsageError
from ccpo_cli.report.labels import (
    LABEL_FIELDS,
    NOT_RECORDED,
    arm_name,
    identity_values,
    legend_rows,
    needs_legend,
)
from ccpo_cli.report.window import DEFAULT_WINDOW

NUMBER, NAME, TEXT = "number", "name", "text"
# A wrapping column is never narrower than this (a word longer than it folds).
MIN_TEXT_WIDTH = 12
# Box SIMPLE_HEAD with padding (0, 1) and pad_edge=False: 3 characters between columns, 2 at the edges.
_BETWEEN, _EDGES = 3, 2


def _number(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def _text(value: Any) -> str:
    return "-" if value is None else str(value)


def _raw(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class Cell:
    """What a person reads (`text`) and what a program reads (`value`: a number unrounded, a
    string, None; or a tuple, one value per CSV field of a composite column)."""

    text: str
    value: Any = None


def num(value: Any, digits: int = 1) -> Cell:
    return Cell(_number(value, digits), _raw(value))


def txt(value: Any, shown: str | None = None) -> Cell:
    return Cell(_text(value) if shown is None else shown, value)


# How a column's cells are aligned; Markdown and LaTeX tell right from everything else.
Justify = Literal["left", "right"]


@dataclass(frozen=True)
class Column:
    header: str
    kind: str = NUMBER  # NUMBER and NAME cells are never wrapped or cut; TEXT cells wrap at words
    justify: Justify = "right"
    fields: tuple[str, ...] = ()  # CSV: the fields of a composite cell (its value is a tuple)
    key: str | None = None  # CSV: the header when the snake_case of `header` would not say it

    @property
    def csv_fields(self) -> tuple[str, ...]:
        return self.fields or (self.key or snake_case(self.header),)


def snake_case(header: str) -> str:
    """A header as a CSV column name: `held-out mean` -> `held_out_mean`."""
    return "_".join("".join(char if char.isalnum() else " " for char in header.lower()).split())


def name_column(header: str) -> Column:
    return Column(header, NAME, "left")


def text_column(header: str) -> Column:
    return Column(header, TEXT, "left")


@dataclass
class TableData:
    name: str  # what `--table NAME` picks for CSV
    title: str
    columns: list[Column]
    rows: list[list[Cell]] = field(default_factory=list)
    show_header: bool = True

    def add(self, *cells: Cell | str) -> None:
        self.rows.append([cell if isinstance(cell, Cell) else Cell(cell, cell) for cell in cells])


# ----------------------------------------------------------------------------- formats


def pick_table(items: Iterable[Any], name: str | None) -> TableData:
    """The table `--table NAME` names (the first one when None)."""
    tables = [item for item in items if isinstance(item, TableData)]
    if not tables:
        raise UsageError("this command printed no table to write as CSV")
    if name is None:
        return tables[0]
    for table in tables:
        if table.name == name:
            return table
    raise UsageError(
        f"--table {name}: this command's tables are {', '.join(table.name for table in tables)}"
    )


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return repr(value)  # every digit: a paper rounds, a script should not have to guess
    if isinstance(value, (list, tuple)):
        return "; ".join(str(item) for item in value)
    return value


def csv_text(table: TableData) -> str:
    """The table as CSV (RFC 4180 quoting), header first, raw values."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    header: list[str] = []
    for column in table.columns:
        header.extend(column.csv_fields)
    writer.writerow(header)
    for row in table.rows:
        values: list[Any] = []
        for column, cell in zip(table.columns, row):
            if column.fields:
                parts = (
                    cell.value if isinstance(cell.value, tuple) else (None,) * len(column.fields)
                )
                values.extend(_csv_value(part) for part in parts)
            else:
                values.append(_csv_value(cell.value))
        writer.writerow(values)
    return buffer.getvalue()


def _markdown_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def markdown_text(items: Iterable[Any]) -> str:
    """Every table as a pipe table under its title in bold; other lines as paragraphs."""
    blocks = []
    for item in items:
        if isinstance(item, TableData):
            lines = [f"**{_markdown_cell(item.title)}**", ""] if item.title else []
            headers = (
                [column.header for column in item.columns]
                if item.show_header
                else [""] * len(item.columns)
            )
            lines.append("| " + " | ".join(_markdown_cell(header) for header in headers) + " |")
            lines.append(
                "|"
                + "|".join(
                    "---:" if column.justify == "right" else "---" for column in item.columns
                )
                + "|"
            )
            for row in item.rows:
                lines.append("| " + " | ".join(_markdown_cell(cell.text) for cell in row) + " |")
            blocks.append("\n".join(lines))
        else:
            blocks.append("\n".join(line.rstrip() for line in str(item).splitlines()))
    return "\n\n".join(blocks) + "\n"


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
}


def _latex_cell(text: str) -> str:
    escaped = "".join(_LATEX_ESCAPES.get(char, char) for char in text.replace("\n", " "))
    return escaped.replace("±", r"$\pm$").replace("·", r"$\cdot$").replace("≥", r"$\geq$")


def latex_text(items: Iterable[Any]) -> str:
    """Every table as a booktabs `tabular` (\\usepackage{booktabs}) under its title as a comment;
    other lines as comments. The rounded texts, as a paper prints them."""
    blocks = []
    for item in items:
        if not isinstance(item, TableData):
            blocks.append("\n".join(f"% {line}" for line in str(item).splitlines()))
            continue
        spec = "".join("r" if column.justify == "right" else "l" for column in item.columns)
        lines = [f"% {item.title}"] if item.title else []
        lines += [f"\\begin{{tabular}}{{{spec}}}", "\\toprule"]
        if item.show_header:
            lines += [
                " & ".join(_latex_cell(column.header) for column in item.columns) + r" \\",
                "\\midrule",
            ]
        lines += [" & ".join(_latex_cell(cell.text) for cell in row) + r" \\" for row in item.rows]
        lines += ["\\bottomrule", "\\end{tabular}"]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def _natural_width(table: TableData, index: int) -> int:
    cells = [row[index].text for row in table.rows]
    header = table.columns[index].header if table.show_header else ""
    return (
        max(
            [len(header), *(len(line) for text in cells for line in text.splitlines() or [""])],
            default=1,
        )
        or 1
    )


def _least_width(table: TableData, index: int) -> int:
    """The narrowest a column may become: all of a number or a name, the longest word of text."""
    column = table.columns[index]
    natural = _natural_width(table, index)
    if column.kind != TEXT:
        return natural
    words = [len(word) for row in table.rows for word in row[index].text.split()]
    words += [len(word) for word in column.header.split()] if table.show_header else []
    return min(natural, max(MIN_TEXT_WIDTH, min(max(words, default=1), 3 * MIN_TEXT_WIDTH)))


def _table_width(widths: Sequence[int]) -> int:
    return sum(widths) + _BETWEEN * (len(widths) - 1) + _EDGES


def _column_groups(table: TableData, width: int) -> list[list[int]]:
    """The column indexes of each printed part: all in one when they fit at their least widths,
    else as many as fit after the first column, which every part repeats."""
    least = [_least_width(table, index) for index in range(len(table.columns))]
    if _table_width(least) <= width or len(least) <= 1:
        return [list(range(len(least)))]
    groups: list[list[int]] = []
    current = [0]
    for index in range(1, len(least)):
        if len(current) > 1 and _table_width([least[i] for i in current + [index]]) > width:
            groups.append(current)
            current = [0]
        current.append(index)
    groups.append(current)
    return groups


def _widths(table: TableData, indexes: list[int], width: int) -> dict[int, int]:
    """Every column its natural width when the part fits; else text columns share what the
    numbers and names leave (each at least its least width)."""
    natural = {index: _natural_width(table, index) for index in indexes}
    if _table_width(list(natural.values())) <= width:
        return natural
    least = {index: _least_width(table, index) for index in indexes}
    wrapping = [index for index in indexes if table.columns[index].kind == TEXT]
    widths = {index: natural[index] if index not in wrapping else least[index] for index in indexes}
    spare = width - _table_width(list(widths.values()))
    # Hand the room left over to the text columns, the one furthest from its natural width first.
    while spare > 0 and wrapping:
        short = [index for index in wrapping if widths[index] < natural[index]]
        if not short:
            break
        index = max(short, key=lambda i: natural[i] - widths[i])
        widths[index] += 1
        spare -= 1
    return widths


def _rich_table(table: TableData, indexes: list[int], width: int, part: int, parts: int):
    from rich import box
    from rich.table import Table

    title = table.title + (f" ({part}/{parts})" if parts > 1 else "")
    rich_table = Table(
        title=title or None,
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        pad_edge=False,
        show_header=table.show_header,
        title_justify="left",
    )
    widths = _widths(table, indexes, width)
    for index in indexes:
        column = table.columns[index]
        wraps = column.kind == TEXT
        rich_table.add_column(
            column.header,
            justify=column.justify,
            no_wrap=not wraps,
            overflow="fold",
            min_width=widths[index],
            max_width=widths[index] if wraps else None,
        )
    for row in table.rows:
        rich_table.add_row(*(row[index].text for index in indexes))
    return rich_table


def _without_blank_text_columns(table: TableData) -> TableData:
    # A notes column with nothing in it costs a terminal its room (CSV and Markdown keep it).
    keep = [
        index
        for index, column in enumerate(table.columns)
        if column.kind != TEXT or any(row[index].text.strip() for row in table.rows)
    ]
    if len(keep) == len(table.columns):
        return table
    return TableData(
        table.name,
        table.title,
        [table.columns[index] for index in keep],
        [[row[index] for index in keep] for row in table.rows],
        table.show_header,
    )


def terminal_renderables(items: Iterable[Any], width: int | None) -> Iterator[Any]:
    """Rich renderables of the items for a console `width` characters wide (None: 160)."""
    from rich.text import Text

    width = width or 160
    for item in items:
        if isinstance(item, TableData):
            item = _without_blank_text_columns(item)
            if not item.columns:
                continue
            groups = _column_groups(item, width)
            for part, indexes in enumerate(groups, start=1):
                yield _rich_table(item, indexes, width, part, len(groups))
        else:
            yield Text(str(item))


# ----------------------------------------------------------------------------- the tables


def _at_step(value: Any, step: Any) -> Cell:
    return Cell(f"{_number(value)}@{step}" if value is not None else "-", (_raw(value), step))


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
        steps = _text(last) + (f"/{run['total_steps']}" if run["total_steps"] else "")
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
                f"{_number(window)} ({run.get('window_n')})" if window is not None else "-",
                (_raw(window), run.get("window_n") or 0),
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


def differences_table(differences: Sequence[Any], first: str, second: str, what: str) -> TableData:
    """`runs diff` / `arms diff`: one row per field that differs."""
    table = TableData(
        "differences",
        f"{what} {first} vs {second}: {len(differences)} difference(s)",
        [name_column("field"), text_column(first), text_column(second), text_column("note")],
    )
    for difference in differences:
        shown = [
            json.dumps(value, default=str) if isinstance(value, (list, dict)) else value
            for value in (difference.first, difference.second)
        ]
        table.add(
            txt(difference.field),
            Cell(_text(shown[0]), _raw(difference.first)),
            Cell(_text(shown[1]), _raw(difference.second)),
            txt(difference.note),
        )
    return table


def arms_list_table(arms: list[dict]) -> TableData:
    table = TableData(
        "arms",
        "",
        [
            name_column("arm"),
            name_column("estimator"),
            name_column("fingerprint"),
            text_column("description"),
        ],
    )
    for arm in arms:
        table.add(
            txt(arm["arm"]),
            txt(arm["estimator"]),
            Cell(arm["fingerprint"][:12], arm["fingerprint"]),
            txt(arm["description"]),
        )
    return table


def arm_flags_table(flags: dict[str, Any], inert: dict[str, str]) -> TableData:
    table = TableData(
        "flags",
        "",
        [name_column("flag"), Column("value", NAME, "left"), text_column("inert because")],
    )
    for name, value in flags.items():
        shown = '""' if value == "" else str(value)
        table.add(txt(name), Cell(shown, value), txt(inert.get(name, ""), inert.get(name, "")))
    return table


def sync_table(counts: dict[str, dict[str, int]]) -> TableData:
    """What a `ccpo sync pull` merged, per table: new rows, rows already here, conflicts, ..."""
    order = ("new", "updated", "same", "duplicate", "conflict")
    outcomes = sorted(
        {outcome for table in counts.values() for outcome in table},
        key=lambda name: order.index(name) if name in order else len(order),
    )
    table = TableData(
        "merged", "merged rows", [name_column("table"), *(Column(outcome) for outcome in outcomes)]
    )
    for name in ("runs", "evaluations", "conflicts", "facts", "publications"):
        if name in counts:
            table.add(txt(name), *(num(counts[name].get(outcome, 0)) for outcome in outcomes))
    return table


def games_check_table(folder: str, by_type: dict[str, dict[str, int]]) -> TableData:
    table = TableData(
        "games",
        f"{folder}: planner walkthrough check",
        [name_column("type"), Column("games"), Column("won")],
    )
    for key, row in sorted(by_type.items()):
        table.add(txt(key), num(row["games"]), num(row["ok"]))
    return table


def _task_types() -> tuple[str, ...]:
    # Imported here: the benchmark files are read only by the tables with per-type columns
    # (`ccpo runs list` shows none of them and should not pay for the YAML reader).
    from ccpo_cli.task_types import TASK_TYPES

    return tuple(TASK_TYPES)


def _benchmark_task_types(
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


def run_detail_tables(document: dict) -> list[Any]:
    """`ccpo runs show`: settings, evaluations (retracted ones marked), conflicts, corrections.
    The per-type columns are the run's benchmark's own (`_benchmark_task_types`)."""
    run = document["run"]
    task_keys = _benchmark_task_types(
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
                    json.dumps(value, default=str) if isinstance(value, list) else _text(value),
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
        Column("retracted", TEXT, "left"),
    ]
    evaluations = TableData(
        "evaluations", "evaluations (success %; sources and ids in --json)", columns
    )
    for row in document["evaluations"]:
        retraction = row.get("retracted")
        evaluations.add(
            *_evaluation_cells(row, with_split, task_keys),
            txt(
                retraction["reason"] if retraction else None,
                retraction["reason"] if retraction else "",
            ),
        )
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
                    f"kept {_number(settled['kept_value'])} ({settled['resolved_by']})"
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


def _window_title(document: dict) -> str:
    start = document.get("window_start")
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
    return Column("arm", TEXT, "left", fields=UNIT_FIELDS)


def _unit_cell(arm: dict | None, shown: str) -> Cell:
    if arm is None:
        return Cell(shown, (None,) * len(UNIT_FIELDS))
    values = identity_values(arm)
    return Cell(shown, (arm_name(arm), arm.get("label"), *(values[name] for name in LABEL_FIELDS)))


def arms_table(document: dict) -> TableData:
    table = TableData(
        "arms",
        f"arms side by side (window {_window_title(document)})",
        [
            _unit_column(),
            Column("held-out mean"),
            Column("sd"),
            Column("n", fields=("n", "n_over")),
            Column("seeds"),
            text_column("note"),
        ],
    )
    for arm in document["arms"]:
        over = "evals" if arm["sd_over"] == "evaluations" else "seeds"
        notes = "; ".join(note for note in (arm["note"], *arm.get("seed_notes", ())) if note)
        table.add(
            _unit_cell(arm, arm.get("label") or arm["arm"]),
            num(arm["mean"]),
            num(arm["sd"]),
            Cell(f"{arm['n']} {over}", (arm["n"], arm["sd_over"])),
            num(arm["n_seeds"]),
            txt(notes, notes),
        )
    return table


_LEGEND_FIELDS = ("arm", "arm_fingerprint", *LABEL_FIELDS, "unit_key")


def _mean_interval(arm: dict) -> tuple[float | None, float | None, str]:
    """(low, high, over) of the 95 % t interval of an arm's mean: over its seed means from two
    seeds on, else over its window evaluations."""
    n, sd, mean = arm["n"], arm["sd"], arm["mean"]
    if mean is None or sd is None or not n or n < 2:
        return None, None, ""
    from ccpo_cli.stats import t_quantile

    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return mean - half, mean + half, "seeds" if arm["sd_over"] == "seeds" else "evaluations"


def arms_ci_table(document: dict) -> TableData:
    """The arms as a paper reports them: mean ± the half width of its 95 % t interval."""
    table = TableData(
        "arms",
        f"held-out success (%), window {_window_title(document)}: mean ± 95 % t interval",
        [
            _unit_column(),
            Column("mean ± CI", fields=("mean", "ci_low", "ci_high")),
            Column("over", NAME, "left"),
            Column("n"),
            Column("seeds"),
        ],
    )
    for arm in document["arms"]:
        low, high, over = _mean_interval(arm)
        shown = (
            "-"
            if arm["mean"] is None
            else (
                f"{arm['mean']:.1f} ± {(high - low) / 2:.1f}"
                if low is not None and high is not None  # both or neither (_mean_interval)
                else f"{arm['mean']:.1f}"
            )
        )
        table.add(
            _unit_cell(arm, arm.get("label") or arm["arm"]),
            Cell(shown, (_raw(arm["mean"]), low, high)),
            txt(over or "-", over or None),
            num(arm["n"]),
            num(arm["n_seeds"]),
        )
    return table


def latex_comparison_tables(document: dict) -> list[Any]:
    """`ccpo compare --format latex`: the arms with mean ± CI, the legend, the arm differences."""
    if not document["runs"]:
        return comparison_tables(document)
    items: list[Any] = [arms_ci_table(document)]
    if needs_legend(document["arms"]):
        items.append(units_legend_table(document))
    if document["comparisons"]:
        items.append(comparisons_table(document))
    return items


def units_legend_table(document: dict) -> TableData:
    """Under the arms table: each short label's full identity (one wrapping cell in a terminal,
    one CSV column per field)."""
    table = TableData(
        "units",
        "legend: each label's full identity",
        [text_column("label"), Column("identity", TEXT, "left", fields=_LEGEND_FIELDS)],
    )
    for row in legend_rows(document["arms"]):
        shown = {key: NOT_RECORDED if row[key] is None else str(row[key]) for key in _LEGEND_FIELDS}
        text = f"arm {shown['arm']} ({shown['arm_fingerprint'][:12]}), " + ", ".join(
            f"{key.replace('_', ' ')} {shown[key]}" for key in LABEL_FIELDS
        )
        table.add(txt(row["label"]), Cell(text, tuple(row[key] for key in _LEGEND_FIELDS)))
    return table


def references_table(document: dict) -> TableData:
    table = TableData(
        "references",
        "reference runs (evaluation only: not arms)",
        [
            name_column("run"),
            name_column("agent"),
            Column("held-out mean"),
            Column("sd"),
            Column("evals"),
            Column("episodes"),
        ],
    )
    for row in document["references"]:
        table.add(
            txt(row["run"]),
            txt(row["agent"] or "not recorded", row["agent"] or "not recorded"),
            num(row["mean"]),
            num(row["sd"]),
            num(row["n_evaluations"]),
            num(row["protocol"]["episodes"]),
        )
    return table


def _run_arm(run: dict) -> str:
    if run.get("kind") == "evaluation":
        return "(reference)"
    return _text(run.get("unit_label") or run.get("arm_label") or run["arm"])


def per_run_table(document: dict) -> TableData:
    table = TableData(
        "runs",
        "per run: window mean±sd (n evals), best and its expected inflation",
        [
            name_column("run"),
            _unit_column(),
            Column("seed"),
            Column("window", fields=("window_mean", "window_sd", "window_n")),
            Column("trend", NAME),
            Column("best@step", fields=("best", "best_step")),
            Column("bias", key="best_bias_points"),
            Column("1 eval", key="single_eval_half_width"),
            Column("step", fields=("last_step", "total_steps")),
        ],
    )
    unit_of = {arm["arm"]: arm for arm in document["arms"]}
    for run in document["runs"]:
        window, best, interval = run["window"], run["best"], run["single_eval_interval"]
        trend = window.get("trend") or {}
        # "rising"/"falling": the slope interval excludes 0, so the window is not converged.
        trend_text = trend.get("direction") or ("too few" if window["n"] else "-")
        bias = best["expected_max_bias_points"] if best else None
        table.add(
            txt(run["run"]),
            _unit_cell(unit_of.get(run.get("arm_label")), _run_arm(run)),
            num(run["seed"]),
            Cell(
                f"{_number(window['mean'])}±{_number(window['sd'])} ({window['n']})",
                (_raw(window["mean"]), _raw(window["sd"]), window["n"]),
            ),
            Cell(trend_text, trend.get("direction")),
            Cell(
                f"{_number(best['success'])}@{best['step']}" if best else "-",
                (best["success"], best["step"]) if best else (None, None),
            ),
            Cell(f"+{_number(bias)}" if bias is not None else "-", _raw(bias)),
            Cell(
                f"±{_number(interval['half_width'])}" if interval else "-",
                _raw(interval["half_width"]) if interval else None,
            ),
            Cell(
                f"{_text(run['last_step'])}/{_text(run['total_steps'])}",
                (run["last_step"], run["total_steps"]),
            ),
        )
    return table


def best_rows_table(document: dict) -> TableData:
    """The card's "best single evaluation" row for every run (biased upward; see the bias), with
    the per-type columns of the runs' benchmarks."""
    task_keys = _benchmark_task_types(
        [run.get("benchmark") for run in document["runs"]],
        [{"task_types": run["best"]["task_types"]} for run in document["runs"] if run["best"]],
    )
    table = TableData(
        "best",
        "best single evaluation per run (not the result: see the window)",
        [
            name_column("run"),
            Column("step"),
            Column("held-out"),
            Column("turns"),
            *(Column(key) for key in task_keys),
        ],
    )
    for run in document["runs"]:
        best = run["best"]
        if best is None:
            continue
        table.add(
            txt(run["run"]),
            num(best["step"]),
            num(best["success"]),
            num(best["mean_turns"]),
            *[num(best["task_types"].get(key)) for key in task_keys],
        )
    return table


def comparisons_table(document: dict) -> TableData:
    table = TableData(
        "comparisons",
        "arm differences (window means across seeds)",
        [
            Column("a vs b", NAME, "left", fields=("arm_a", "arm_b", "label_a", "label_b")),
            Column("a - b", key="difference"),
            text_column("test"),
            Column("t"),
            Column("df"),
            Column("p"),
            Column("95% CI", fields=("ci_low", "ci_high")),
            Column("P(a>b)", key="probability_of_improvement"),
            text_column("note"),
        ],
    )
    stable = {arm["arm"]: arm_name(arm) for arm in document["arms"]}
    for row in document["comparisons"]:
        # The test compare chose (paired where the design paired the seeds, else Welch).
        welch = row.get("test") or dict(row["welch"], test="Welch t")
        interval = (
            f"[{_number(welch['ci_low'])}, {_number(welch['ci_high'])}]"
            if welch["ci_low"] is not None
            else "-"
        )
        poi = row["probability_of_improvement"]
        verdict = (row.get("isolation") or {}).get("verdict")
        notes = "; ".join(
            note
            for note in (
                row["note"] or "",
                f"isolation {verdict}" if verdict and verdict != "passes" else "",
            )
            if note
        )
        label_a, label_b = row.get("label_a") or row["arm_a"], row.get("label_b") or row["arm_b"]
        table.add(
            Cell(
                f"{label_a} vs {label_b}",
                (stable.get(row["arm_a"]), stable.get(row["arm_b"]), label_a, label_b),
            ),
            num(row["difference"]),
            txt(welch["test"], welch["test"]),
            num(welch["t"], 2),
            num(welch["df"]),
            num(welch["p"], 3),
            Cell(interval, (_raw(welch["ci_low"]), _raw(welch["ci_high"]))),
            Cell(_number(poi, 2) if poi is not None else (row.get("poi_note") or "-"), _raw(poi)),
            txt(notes, notes),
        )
    return table


def isolation_text(document: dict) -> str:
    isolation = document["isolation"]
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
    if document.get("protocol_mixed"):
        lines.append(
            "  mixed evaluation protocols (panel size, split or temperature): each window uses one protocol"
        )
    for run, conflict in (document.get("conflicts") or {}).items():
        lines.append(
            f"  conflicts recorded for {run}: steps {conflict['steps']} {conflict['facts'] or ''}".rstrip()
        )
    return "\n".join(lines)


def retraction_lines(document: dict) -> list[str]:
    """What the comparison left out because it was retracted (`ccpo runs retract`)."""
    retracted = document.get("retracted") or {}
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


def comparison_tables(document: dict) -> list[Any]:
    """Everything `ccpo compare` prints, in order: tables (TableData) and lines (str)."""
    if not document["runs"]:
        lines = retraction_lines(document)
        return (
            ["no runs to compare: every one asked for is retracted", *lines]
            if lines
            else ["no runs in the database"]
        )
    items: list[Any] = [arms_table(document)]
    if needs_legend(document["arms"]):
        items.append(units_legend_table(document))
    if document.get("references"):
        items.append(references_table(document))
    items += [per_run_table(document), best_rows_table(document)]
    if document["comparisons"]:
        items.append(comparisons_table(document))
    if document.get("power", {}).get("pairs"):
        from ccpo_cli.report.power_tables import power_table

        items.append(power_table(document["power"]))
    items += [
        f"{row.get('label_a') or row['arm_a']} vs {row.get('label_b') or row['arm_b']}: {row['note']}"
        for row in document.get("not_compared") or []
    ]
    items += [f"left out: {run}: {why}" for run, why in (document.get("left_out") or {}).items()]
    items += retraction_lines(document)
    items.append(isolation_text(document))
    items.append(
        "Read the window mean, not the best point: the best of n evaluations is biased upward by "
        "the expected maximum of n normals (in sd)."
    )
    return items


def eval_tables(document: dict) -> list[Any]:
    """`ccpo eval`: the model line, per seed, per task type, and the summary line."""
    task_keys = _task_types()
    items: list[Any] = []
    checkpoint = document.get("checkpoint")
    if checkpoint:
        items.append(
            f"model: {checkpoint['merged_folder']} ({'reused merge' if checkpoint['reused_merge'] else 'merged'} "
            f"from {checkpoint['source']}, step {checkpoint['step']}; record {checkpoint['record']})"
        )
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
            num(row["seed"]),
            num(row["episodes"]),
            num(row["successes"]),
            num(row["success"]),
            Cell(
                f"{_number(interval['low'])}-{_number(interval['high'])}",
                (_raw(interval["low"]), _raw(interval["high"])),
            ),
            num(row["mean_turns"]),
            num(row["invalid_turn_rate"]),
        )
    items.append(seeds)
    seed_numbers = [row["seed"] for row in document["evaluations"]]
    types = TableData(
        "task_types",
        "per task type (success %)",
        [
            name_column("type"),
            Column("episodes/seed"),
            *(Column(f"seed {seed}") for seed in seed_numbers),
            Column("mean ± sd", fields=("mean", "sd")),
        ],
    )
    for key in task_keys:
        if key not in document["task_types"]:
            continue
        cells = [row["task_types"].get(key) for row in document["evaluations"]]
        aggregate = document["task_types"][key]
        types.add(
            txt(key),
            num(cells[0]["episodes"] if cells[0] else None),
            *[num(cell["success"] if cell else None) for cell in cells],
            Cell(
                f"{_number(aggregate['mean'])} ± {_number(aggregate['sd'])}",
                (_raw(aggregate["mean"]), _raw(aggregate["sd"])),
            ),
        )
    items.append(types)
    items.append(
        f"success over {document['n_seeds']} seed(s): {_number(document['mean'])} % "
        f"± {_number(document['sd'])} (sd over seeds)"
    )
    return items


def table_of(
    rows: Iterable[dict],
    columns: Sequence[tuple[str, str, Callable[[Any], Cell]]],
    *,
    name: str,
    title: str,
) -> TableData:
    """A table of dict rows: (header, kind, cell of the row) per column."""
    table = TableData(
        name,
        title,
        [
            Column(header, kind, "right" if kind == NUMBER else "left")
            for header, kind, _ in columns
        ],
    )
    for row in rows:
        table.add(*(make(row) for _, _, make in columns))
    return table
