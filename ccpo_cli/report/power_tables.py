"""The power table `ccpo compare` prints, from the document's `power` section (a `TableData`,
so it has the same terminal, CSV and Markdown forms as the other tables: report/tables.py)."""

from __future__ import annotations

from ccpo_cli.report.tables import Cell, Column, TableData, name_column, num, text_column, txt


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def power_table(power: dict) -> TableData:
    detect = power["detect"]
    title = (
        f"power: minimum detectable difference (points; {power['power']:.0%} power, "
        f"{power['sided']} alpha {power['alpha']:g})"
    )
    columns = [
        name_column("a vs b"),
        Column("test", "name", "left"),
        Column("seeds", fields=("n_a", "n_b")),
        Column("a - b"),
        Column("sd"),
        Column("p"),
        Column("MDD"),
    ]
    if detect is not None:
        columns.append(Column(f"seeds/arm for {detect:g}"))
    columns.append(text_column("note"))
    table = TableData("power", title, columns)
    for row in power["pairs"]:
        seeds = (
            str(row["n_pairs"]) + " pairs"
            if row["test"] == "paired t"
            else f"{row['n_a']}+{row['n_b']}"
        )
        notes = [row["note"]] if row["note"] else []
        if row.get("power_method"):
            notes.append(f"MDD {row['power_method']}")
        if row["seeds_left_out"]:
            notes.append(f"unpaired seeds left out: {', '.join(map(str, row['seeds_left_out']))}")
        cells = [
            txt(f"{row['arm_a']} vs {row['arm_b']}"),
            txt(row["test"] or "-", row["test"]),
            Cell(seeds, (row["n_a"], row["n_b"])),
            Cell(_points(row["observed_difference"]), row["observed_difference"]),
            Cell(_points(row["sd"]), row["sd"]),
            num(row["p"], 3),
            Cell(_points(row["mdd"]), row["mdd"]),
        ]
        if detect is not None:
            needed = row["seeds_needed"]
            shown = (
                "-" if row["mdd"] is None else (str(needed) if needed is not None else "> 10000")
            )
            cells.append(Cell(shown, needed))
        cells.append(txt("; ".join(notes), "; ".join(notes)))
        table.add(*cells)
    return table
