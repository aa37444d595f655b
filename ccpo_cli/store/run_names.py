"""Run names for shell completion, read at once: the standard library's sqlite3, read-only.

A TAB must answer before the user notices, so this reader opens the file read-only (it never
creates, migrates or stamps one: that is `store.db.open_db`'s job), reads the names that start
with what was typed, and answers nothing rather than an error for a file that is missing, locked
or not a runs database (completion must never print a traceback into a prompt).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

# A prompt shows a screenful; more names than this are narrowed down by typing.
MAX_NAMES = 200


def run_names(db_path: str | Path, prefix: str = "", *, limit: int = MAX_NAMES) -> list[str]:
    """The names of the runs in `db_path` that start with `prefix`, sorted; [] when unreadable."""
    path = Path(db_path)
    if not path.is_file():
        return []
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=0.2)
    except sqlite3.Error:
        return []
    try:
        # A prefix match by characters, case-sensitive, with no wildcard (LIKE would read % and _).
        rows = connection.execute(
            "SELECT name FROM runs WHERE substr(name, 1, ?) = ? ORDER BY name LIMIT ?",
            (len(prefix), prefix, int(limit)),
        ).fetchall()
    except sqlite3.Error:
        return []
    finally:
        connection.close()
    return [str(row[0]) for row in rows]
