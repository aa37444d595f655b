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

And a second: derivation symbols are copied with `copy.deepcopy` (the memoized parses, each
rule's right-hand side in `replace`, `Symbol.copy`), which walks every attribute through its
generic memo. `_copy_symbols` rebuilds the same tree of Symbol objects and lists directly; the
symbols' strings are immutable and their contexts are treated as `copy_context` treats them
(above). It is patched in as the `deepcopy` name of TextWorld's textgen module, the only one
those copies use, and it hands anything that is not a symbol, a list or a context back to
`copy.deepcopy`.

Last, the derivation loop asks `check_flag` for its two debugging switches (TW_CSG_DEBUG,
TW_CSG_TRACE) once per symbol, reading the environment each time; the textgen module's
`check_flag` answers those two from their values at install time.
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

# The symbol copier and the flag reads below; read at install (scripts/bench_matrix.py turns
# them off to measure them).
FAST_SYMBOL_COPIES = True
# Per-game entries kept per process (a translated small game is a few hundred KB).
GAME_TABLE_SIZE = 96


def _memoize(
    original: Callable[..., Any], copy_result: Callable[[Any], Any] | None, max_entries: int | None
) -> Callable[..., Any]:
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
        return copy_result(result) if copy_result else result

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


_CONTEXT_KEYS = frozenset({"state", "facts", "variables", "mapping", "entity_infos"})


def _copy_symbols(value: Any) -> Any:
    from textworld.envs.pddl.textgen import Symbol

    if isinstance(value, list):
        return [_copy_symbols(item) for item in value]
    if isinstance(value, str):
        return value
    if isinstance(value, Symbol):
        copied = object.__new__(type(value))
        copied.__dict__.update(
            {key: _copy_symbol_attribute(key, item) for key, item in value.__dict__.items()}
        )
        return copied
    return copy.deepcopy(value)


def _copy_symbol_attribute(key: str, value: Any) -> Any:
    if key == "context" and isinstance(value, dict):
        if not value:
            return {}
        if value.keys() == _CONTEXT_KEYS:
            return _shallow_copy_context(value)
    return _copy_symbols(value)


_TEXTGEN_FLAGS = ("TW_CSG_DEBUG", "TW_CSG_TRACE")


def _flags_read_once(original: Callable[..., bool]) -> Callable[..., bool]:
    fixed = {flag: original(flag) for flag in _TEXTGEN_FLAGS}

    def check_flag(flag: str, default: bool = False) -> bool:
        return fixed[flag] if flag in fixed and not default else original(flag, default)

    return check_flag


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
        _ORIGINALS["textgen_deepcopy"] = textgen.deepcopy
        symbol_copier = _copy_symbols if FAST_SYMBOL_COPIES else copy.deepcopy
        textgen._parse_and_convert = _memoize(textgen._parse_and_convert, symbol_copier, None)
        query = _memoize(Rule.parse_conjunctive_query, None, None)
        Rule.parse_conjunctive_query = classmethod(lambda cls, expr: query(expr))
        pddl_logic._parse_and_convert = _memoize(
            pddl_logic._parse_and_convert, copy.deepcopy, GAME_TABLE_SIZE
        )
        fast_downward.pddl2sas = _memoize(fast_downward.pddl2sas, None, GAME_TABLE_SIZE)
        textgen.copy_context = _shallow_copy_context
        _ORIGINALS["check_flag"] = textgen.check_flag
        if FAST_SYMBOL_COPIES:
            textgen.deepcopy = _copy_symbols
            textgen.check_flag = _flags_read_once(textgen.check_flag)


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
        textgen.deepcopy = _ORIGINALS.pop("textgen_deepcopy")
        textgen.check_flag = _ORIGINALS.pop("check_flag")


def installed() -> bool:
    return bool(_ORIGINALS)


def set_memo(enabled: bool) -> None:
    """Install or remove the memo so that this process matches `enabled`."""
    if enabled:
        install()
    else:
        uninstall()
