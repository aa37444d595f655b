"""Memoized parsing for TextWorld's PDDL engine, installed per process.

Most of an engine step goes into TatSu re-parsing the same strings: the text grammar's symbol
strings (`textgen._parse_and_convert`, called by every `grammar.derive`) and the conditions of
grammar rules (`Rule.parse_conjunctive_query`). Most of a load and reset goes into parsing the
game's action grammar (`pddl.logic._parse_and_convert`) and into Fast Downward's translator
(`fast_downward.pddl2sas`, twice per load and twice per reset). All four are pure functions of
their string arguments, so a per-process table keyed by the arguments returns the same
structures without touching any game logic:

- parses whose results the engine later mutates (symbols get a `context`; grammars are merged)
  are returned as deep copies;
- conjunctive queries and translated tasks, which the engine only reads, are shared;
- the two per-game tables (action grammars, translations) keep the most recent entries only.

A translation served from the table also leaves `sys.argv` alone (the translator overwrites it).

One more pure speed-up rides along: `textgen.copy_context` deep-copies a derivation context's
`variables` and `mapping` dicts on every grammar expansion, but both are only ever extended with
`dict.update` and their values only read (the EntityInfo values are the game's shared objects,
which the original does not copy either), so a shallow copy of the two dicts gives the same
derivations at 1.5-2x fewer seconds per step.
`tests/test_envs_memo.py` plays the same seeded random episodes with and without the memo and
compares the transcripts byte for byte.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

_LOCK = threading.Lock()
_ORIGINALS: dict[str, Any] = {}

# Per-game entries kept per process (a translated small game is a few hundred KB).
GAME_TABLE_SIZE = 96


def _memoize(original: Callable[..., Any], copy_result: bool, max_entries: int | None) -> Callable[..., Any]:
    table: OrderedDict[tuple, Any] = OrderedDict()

    def memoized(*args: Any, **kwargs: Any) -> Any:
        key = (args, tuple(sorted(kwargs.items())))
        try:
            result = table[key]
            if max_entries is not None:
                table.move_to_end(key)
        except KeyError:
            result = table[key] = original(*args, **kwargs)
            if max_entries is not None and len(table) > max_entries:
                table.popitem(last=False)
        return copy.deepcopy(result) if copy_result else result

    memoized.memo_table = table  # type: ignore[attr-defined]
    memoized.__wrapped__ = original  # type: ignore[attr-defined]
    return memoized


def _shallow_copy_context(context: dict) -> dict:
    return {
        "state": context["state"],
        "facts": context["facts"],
        "variables": dict(context["variables"]),
        "mapping": dict(context["mapping"]),
        "entity_infos": context["entity_infos"],
    }


def install() -> None:
    """Memoize the four parses and use the shallow context copy in this process (idempotent)."""
    import fast_downward
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    with _LOCK:
        if _ORIGINALS:
            return
        _ORIGINALS["textgen"] = textgen._parse_and_convert
        _ORIGINALS["query"] = Rule.__dict__["parse_conjunctive_query"]  # the classmethod object
        _ORIGINALS["logic"] = pddl_logic._parse_and_convert
        _ORIGINALS["translate"] = fast_downward.pddl2sas
        _ORIGINALS["copy_context"] = textgen.copy_context
        textgen._parse_and_convert = _memoize(textgen._parse_and_convert, True, None)
        query = _memoize(Rule.parse_conjunctive_query, False, None)
        Rule.parse_conjunctive_query = classmethod(lambda cls, expr: query(expr))
        pddl_logic._parse_and_convert = _memoize(pddl_logic._parse_and_convert, True, GAME_TABLE_SIZE)
        fast_downward.pddl2sas = _memoize(fast_downward.pddl2sas, False, GAME_TABLE_SIZE)
        textgen.copy_context = _shallow_copy_context


def uninstall() -> None:
    """Restore TextWorld's and Fast Downward's own functions (idempotent)."""
    import fast_downward
    from textworld.envs.pddl import logic as pddl_logic
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    with _LOCK:
        if not _ORIGINALS:
            return
        textgen._parse_and_convert = _ORIGINALS.pop("textgen")
        Rule.parse_conjunctive_query = _ORIGINALS.pop("query")
        pddl_logic._parse_and_convert = _ORIGINALS.pop("logic")
        fast_downward.pddl2sas = _ORIGINALS.pop("translate")
        textgen.copy_context = _ORIGINALS.pop("copy_context")


def installed() -> bool:
    return bool(_ORIGINALS)


def set_memo(enabled: bool) -> None:
    """Install or remove the memo so that this process matches `enabled`."""
    if enabled:
        install()
    else:
        uninstall()
