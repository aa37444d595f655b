"""Test files say what behaviour they hold: a module docstring opens with the behaviour, and the
issue that asked for it, when named, comes after."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_test_file_opens_with_the_behaviour_it_checks():
    opening_with_an_issue = []
    for path in sorted(TESTS.glob("test_*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert doc, f"{path.name}: no module docstring saying what it checks"
        if re.match(r"\s*issues?\s+\d", doc, flags=re.IGNORECASE):
            opening_with_an_issue.append(path.name)
    assert opening_with_an_issue == [], opening_with_an_issue
