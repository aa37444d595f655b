"""Text from files and from the Hub, made safe to print on a terminal.

A run name, a part's path, a log's key or a Hub's error message can hold control characters
(an escape sequence that moves the cursor, clears the screen or sets the window title, a
carriage return that hides what came before) or Unicode's bidirectional controls (a
right-to-left override, U+202E, that shows `gpj.exe` as `exe.jpg`). Wherever such text reaches a
terminal it goes through `escape_control` first: every C0 and C1 control character, DEL and
bidirectional or line-separating format character is shown as a visible `\\xNN` or `\\uNNNN`
(`\\n` and `\\t` too, so one message stays one line), everything else as it is. A table's cells
and notes (report/tables.py) and the console's log lines go through it, so a command's terminal
output never carries a raw control from runs.db.
"""

from __future__ import annotations

import re

# C0, DEL, C1; then the bidirectional marks, embeddings, overrides and isolates, the line and
# paragraph separators and the byte-order mark, which reorder or break what follows them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_CONTROL_BUT_NEWLINE = re.compile(
    r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ufeff]"
)


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def escape_control(text: object) -> str:
    """`text` as a string whose control characters are written as \\xNN (or \\uNNNN)."""
    return _CONTROL.sub(_visible, str(text))


def escape_control_lines(text: object) -> str:
    """`escape_control` that keeps line breaks: for a note or log message of several lines."""
    return _CONTROL_BUT_NEWLINE.sub(_visible, str(text))
