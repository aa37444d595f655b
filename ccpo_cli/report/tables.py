"""What a table is and its formats: a terminal table, CSV, Markdown and LaTeX.

The tables themselves are built where their documents are read: `report/compare_tables.py` for
`ccpo compare` and `ccpo matrix`, `report/command_tables.py` for `ccpo runs`, `ccpo eval`,
`ccpo arms`, `ccpo games check` and `ccpo sync pull`, `report/power_tables.py` for the power
section.

One concern, kept in one file past 400 lines: one table and its formats, which share the cell
and column types and the terminal's width rules.

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
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from ccpo_cli.errors import UsageError
from ccpo_cli.terminal_text import escape_control, escape_control_lines

NUMBER, NAME, TEXT = "number", "name", "text"
# A wrapping column is never narrower than this (a word longer than it folds).
MIN_TEXT_WIDTH = 12
# Box SIMPLE_HEAD with padding (0, 1) and pad_edge=False: 3 characters between columns, 2 at the edges.
_BETWEEN, _EDGES = 3, 2


def number_text(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def dash_or_text(value: Any) -> str:
    return "-" if value is None else str(value)


def raw_value(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value


@dataclass(frozen=True)
class Cell:
    """What a person reads (`text`) and what a program reads (`value`: a number unrounded, a
    string, None; or a tuple, one value per CSV field of a composite column)."""

    text: str
    value: Any = None


def num(value: Any, digits: int = 1) -> Cell:
    return Cell(number_text(value, digits), raw_value(value))


def txt(value: Any, shown: str | None = None) -> Cell:
    # What a person reads never carries a raw terminal control (a name pulled from a part can).
    return Cell(escape_control(dash_or_text(value) if shown is None else shown), value)


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
    whole: bool = False  # never in parts: text columns fold to fit (`runs diff`'s A beside B)

    def add(self, *cells: Cell | str) -> None:
        self.rows.append([cell if isinstance(cell, Cell) else Cell(cell, cell) for cell in cells])

    def keeping(self, keep: list[int]) -> TableData:  # only the columns at `keep`, in order
        columns, rows = [self.columns[i] for i in keep], [[r[i] for i in keep] for r in self.rows]
        return replace(self, columns=columns, rows=rows)


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
    if table.whole or _table_width(least) <= width or len(least) <= 1:
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
    if table.whole and wrapping and _table_width(list(widths.values())) > width:
        # below their least widths: the text columns share what the others leave, equally
        fixed = _table_width([widths[i] for i in indexes if i not in wrapping])
        share = width - fixed - _BETWEEN * len(wrapping)
        for index in wrapping:
            widths[index] = min(natural[index], max(4, share // len(wrapping)))
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
    from rich.text import Text

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
        # Text, not str: a cell is shown as written, never read as console markup.
        rich_table.add_row(*(Text(escape_control(row[index].text)) for index in indexes))
    return rich_table


def _without_blank_text_columns(table: TableData) -> TableData:
    # A notes column with nothing in it costs a terminal its room (CSV and Markdown keep it).
    keep = [
        index
        for index, column in enumerate(table.columns)
        if column.kind != TEXT or any(row[index].text.strip() for row in table.rows)
    ]
    return table if len(keep) == len(table.columns) else table.keeping(keep)


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
            yield Text(escape_control_lines(item))


# ----------------------------------------------------------------------------- the tables


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
