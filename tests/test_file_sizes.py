"""Every module of ccpo_cli/ over 400 lines says, in its module docstring, why it is one file: the phrase "One concern, kept in one file past 400 lines:" and then the reason. A
large file without a reason is split by job instead."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ccpo_cli"
LIMIT = 400
PHRASE = "One concern, kept in one file past 400 lines:"
# A reason is a sentence, not a word: this many characters after the phrase at least.
MIN_REASON_CHARS = 40


def _long_modules() -> list[Path]:
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if len(path.read_text(encoding="utf-8").splitlines()) > LIMIT
    )


def _reason(path: Path) -> str | None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    if PHRASE not in docstring:
        return None
    return " ".join(docstring.split(PHRASE, 1)[1].split())


def test_every_module_past_400_lines_says_why_it_is_one_file():
    missing, too_short = [], []
    for path in _long_modules():
        name = path.relative_to(PACKAGE).as_posix()
        reason = _reason(path)
        if reason is None:
            missing.append(name)
        elif len(reason) < MIN_REASON_CHARS:
            too_short.append(f"{name} ({reason!r})")
    assert not missing, (
        f"over {LIMIT} lines without {PHRASE!r} in the module docstring (give the reason, or "
        f"split the file by job): {', '.join(missing)}"
    )
    assert not too_short, f"a reason is a sentence: {', '.join(too_short)}"


def test_the_check_finds_a_long_module_without_a_reason(tmp_path):
    long = tmp_path / "long.py"
    long.write_text('"""A module."""\n' + "x = 1\n" * (LIMIT + 1), encoding="utf-8")
    assert _reason(long) is None
    given = tmp_path / "given.py"
    given.write_text(
        f'"""A module.\n\n{PHRASE} the tables and the rules that read\nthem are one concern."""\n',
        encoding="utf-8",
    )
    assert _reason(given) == "the tables and the rules that read them are one concern."
