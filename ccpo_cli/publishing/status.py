"""What `ccpo runs show RUN` says about a run's Hub publications: every entry of its outbox
with its state, why (for failed and skipped ones), its commit and tag, and its attempts."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def outbox_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(
        title="Hub publications (every attempt in --json)", title_justify="left", show_lines=False
    )
    for column in ("step", "what", "repo", "state", "attempts", "commit", "tag", "why"):
        table.add_column(
            column, justify="right" if column in ("step", "attempts") else "left", overflow="fold"
        )
    for row in rows:
        outcomes = [attempt["outcome"] for attempt in row["attempt_log"]]
        attempts = str(len(outcomes)) + (
            f" ({outcomes[-1]})" if outcomes and outcomes[-1] in ("running", "interrupted") else ""
        )
        table.add_row(
            str(row["step"]),
            f"{row['role']} {row['kind']}",
            row["repo_id"],
            row["state"],
            attempts,
            (row["commit_id"] or "-")[:12],
            row["tag"] or "-",
            row["reason"] or "",
        )
    return table
