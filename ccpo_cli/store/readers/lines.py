"""Physical lines of a text file, read one at a time with a bounded buffer.

NUL bytes are dropped (the line is reported as cleaned), a line that is not UTF-8 or longer
than MAX_LINE_BYTES is skipped, a UTF-8 byte-order mark on the first line is ignored.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from ccpo_cli.store.readers.base import MAX_LINE_BYTES, Cleaned, ReadStats, Skipped

_DRAIN_CHUNK = 1024 * 1024
BOM = "\ufeff"


class Line(NamedTuple):
    number: int
    text: str  # without its line ending
    terminated: bool  # False for a last line without a newline (a file still being written)


def read_lines(path: Path, stats: ReadStats | None = None) -> Iterator[Line | Skipped | Cleaned]:
    stats = stats if stats is not None else ReadStats()
    with path.open("rb") as handle:
        number = 0
        while True:
            raw = handle.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            number += 1
            stats.lines = number
            if stats.progress is not None:
                stats.progress(len(raw))
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                _drain_line(handle, stats)
                yield Skipped(number, f"line longer than {MAX_LINE_BYTES} bytes")
                continue
            if b"\x00" in raw:
                raw = raw.replace(b"\x00", b"")
                if not raw.strip():
                    yield Skipped(number, "only NUL bytes (binary content)")
                    continue
                yield Cleaned(number)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield Skipped(number, "not UTF-8 text (binary content?)")
                continue
            if number == 1 and text.startswith(BOM):
                text = text[1:]
            terminated = text.endswith("\n")
            yield Line(number, text.rstrip("\r\n") if terminated else text, terminated)


def text_lines(path: Path, stats: ReadStats | None = None) -> Iterator[Line | Skipped | Cleaned]:
    """`read_lines` without its blank lines (a record format gives them no meaning)."""
    for item in read_lines(path, stats):
        if not isinstance(item, Line) or item.text.strip():
            yield item


def _drain_line(handle, stats: ReadStats) -> None:
    """Read past the rest of an over-long line without keeping it."""
    while True:
        chunk = handle.readline(_DRAIN_CHUNK)
        if stats.progress is not None and chunk:
            stats.progress(len(chunk))
        if not chunk or chunk.endswith(b"\n"):
            return
