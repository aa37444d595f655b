"""Text from files and from the Hub, made safe to print on a terminal.

A run name, a part's path, a log's key or a Hub's error message can hold control characters
(an escape sequence that moves the cursor, rewrites the line or sets the window title, a
carriage return that hides what came before). Wherever such text reaches a terminal it goes
through `escape_control` first: every C0 and C1 control character and DEL is shown as a
visible `\\xNN` (`\\n` and `\\t` too, so one message stays one line), everything else as it is.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def escape_control(text: object) -> str:
    """`text` as a string whose control characters are written as \\xNN."""
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", str(text))
