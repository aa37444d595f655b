"""Turn a model's free-text response into one ALFWorld command, as verl-agent does.

The rules (facts from verl-agent's ALFWorld projection; docs/alfworld-games.md,
"Prompts and action projection"):

* the whole response is lower-cased, and the command is the text between the first `<action>`
  and the first `</action>` after it, stripped of surrounding whitespace;
* with no such pair the response is invalid and the command sent to the game is its last 30
  characters (the game usually answers "Nothing happens.");
* a response lacking `<think>` or `</think>` (checked on the original, not lower-cased, text)
  is invalid, and so is one containing a CJK ideograph;
* membership in the admissible list is *not* checked: a well-formed but inadmissible command
  is valid, and the game answers "Nothing happens.".

Both tags are searched independently (the first of each), as verl-agent does: when the
closing tag comes first the slice is empty, so the command is "" and the response still counts
as valid if its think tags are there. Kept on purpose, so that validity flags (and with them
the 0.1 penalty) match what a verl-agent run would have recorded.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

ACTION_OPEN = "<action>"
ACTION_CLOSE = "</action>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
FALLBACK_CHARS = 30

# CJK Unified Ideographs, the range verl-agent rejects.
_CJK = re.compile("[\u4e00-\u9fff]")


class Projection(NamedTuple):
    command: str
    is_valid: bool


def _action_between_tags(lowered: str) -> str | None:
    start = lowered.find(ACTION_OPEN)
    if start == -1:
        return None
    body_start = start + len(ACTION_OPEN)
    end = lowered.find(ACTION_CLOSE)
    if end == -1:
        return None
    return lowered[body_start:end].strip()


def project_action(response: str) -> Projection:
    """The env command for one response and whether the response counts as a valid action."""
    lowered = response.lower()
    command = _action_between_tags(lowered)
    if command is None:
        return Projection(lowered[-FALLBACK_CHARS:], False)
    has_think_tags = THINK_OPEN in response and THINK_CLOSE in response
    is_valid = has_think_tags and _CJK.search(response) is None
    return Projection(command, is_valid)


def project_actions(responses: Sequence[str]) -> list[Projection]:
    return [project_action(response) for response in responses]
