"""Docs/publishing.md and docs/sync.md state the one retry rule exactly as the code
has it (hub_access.RetryRule): its statuses, attempts, backoff and Retry-After cap.

Asked for in issue 30.
"""

from __future__ import annotations

import re

import pytest

from ccpo_cli.hub_access import DEFAULT_RULE
from ccpo_cli.paths import configs_dir

WORDS = {
    2: "two",
    3: "three",
    4: "four",
    5: "five",
    6: "six",
    7: "seven",
    8: "eight",
    9: "nine",
    10: "ten",
}


def _paragraph(document: str) -> str:
    text = (configs_dir().parent / "docs" / document).read_text(encoding="utf-8")
    paragraphs = [p for p in re.split(r"\n\s*\n", text) if "RetryRule" in p]
    assert paragraphs, f"{document} does not state the retry rule"
    return " ".join(paragraphs[0].split())


@pytest.mark.parametrize("document", ["publishing.md", "sync.md"])
def test_the_docs_state_the_retry_rule_the_code_has(document):
    rule = DEFAULT_RULE
    text = _paragraph(document)
    # The statuses named before the rule says what follows (refusals are named after it).
    retried = re.split(r"is tried again|with exponential backoff", text)[0]
    statuses = [int(number) for number in re.findall(r"\b([1-5]\d\d)\b", retried)]
    assert set(rule.statuses) <= set(statuses), (sorted(rule.statuses), text)
    assert set(statuses) <= set(rule.commit_statuses), (
        "a status the rule does not retry is named as retried"
    )
    assert "5xx" not in text, "the rule retries some 5xx answers, not all of them"
    assert f"{WORDS[rule.attempts]} attempts" in text
    assert f"{rule.first_wait_s:g} s doubling" in text and f"{rule.max_wait_s:g} s" in text
    assert f"{rule.retry_after_max_s:g} s" in text and "Retry-After" in text
