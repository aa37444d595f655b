"""The power table `ccpo compare` prints (rich), from the document's `power` section."""

from __future__ import annotations

from rich import box
from rich.table import Table


def _points(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def power_table(power: dict) -> Table:
    detect = power["detect"]
    title = (f"power: minimum detectable difference (points; {power['power']:.0%} power, "
             f"{power['sided']} alpha {power['alpha']:g})")
    table = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    table.add_column("a vs b", no_wrap=True)
    columns = ["test", "seeds", "a - b", "sd", "p", "MDD"]
    if detect is not None:
        columns.append(f"seeds/arm for {detect:g}")
    columns.append("note")
    for column in columns:
        table.add_column(column, no_wrap=column != "note", justify="left" if column in ("test", "note") else "right")
    for row in power["pairs"]:
        seeds = str(row["n_pairs"]) + " pairs" if row["test"] == "paired t" else f"{row['n_a']}+{row['n_b']}"
        notes = [row["note"]] if row["note"] else []
        if row["seeds_left_out"]:
            notes.append(f"unpaired seeds left out: {', '.join(map(str, row['seeds_left_out']))}")
        cells = [f"{row['arm_a']} vs {row['arm_b']}", row["test"] or "-", seeds, _points(row["observed_difference"]),
                 _points(row["sd"]), "-" if row["p"] is None else f"{row['p']:.3f}", _points(row["mdd"])]
        if detect is not None:
            needed = row["seeds_needed"]
            cells.append("-" if row["mdd"] is None else (str(needed) if needed is not None else "> 10000"))
        cells.append("; ".join(notes))
        table.add_row(*cells)
    return table
