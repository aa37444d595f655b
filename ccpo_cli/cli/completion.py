"""Shell completion of ccpo's own words: arm names, run names (from the database), benchmarks,
backends and agents.

Each function is a Typer `autocompletion` callback. They answer from the same fast path as
`--help` (no torch, sqlite-utils or scipy): arms and benchmarks are the file names of their
config folders, runs are read read-only with the standard library (`store/run_names.py`). A
completer never raises: a prompt gets fewer words, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from ccpo_cli import vocabulary

BACKENDS = vocabulary.BACKENDS
AGENTS = vocabulary.AGENT_KINDS


def _starting(words: list[str], incomplete: str) -> list[str]:
    return [word for word in words if word.startswith(incomplete)]


def arm_names(incomplete: str) -> list[str]:
    from ccpo_cli.arms import list_arms  # imported here: the yaml reader is not needed for --help

    try:
        return _starting(list_arms(), incomplete)
    except Exception:  # completion must not break the prompt
        return []


def arm_list(incomplete: str) -> list[str]:
    """`--arms grpo,gi<TAB>`: the last item of a comma-separated list, the others kept."""
    done, _, last = incomplete.rpartition(",")
    head = f"{done}," if done else ""
    chosen = set(done.split(",")) if done else set()
    return [head + name for name in arm_names(last) if name not in chosen]


def benchmark_names(incomplete: str) -> list[str]:
    from ccpo_cli.benchmarks import list_benchmarks

    try:
        return _starting(list_benchmarks(), incomplete)
    except Exception:
        return []


def backend_names(incomplete: str) -> list[str]:
    return _starting(list(BACKENDS), incomplete)


def agent_names(incomplete: str) -> list[str]:
    return _starting(list(AGENTS), incomplete)


def completion_db(ctx: typer.Context) -> Path:
    """The database the command line names: `--db` after the command, else before it, else
    CCPO_DB, else ./runs.db (the same order as the global options)."""
    for context in _chain(ctx):
        given = (context.meta or {}).get("ccpo.db")
        if given:
            return Path(given)
    root = ctx.find_root()
    given = (root.params or {}).get("db")
    if given:
        return Path(given)
    return Path(os.environ.get("CCPO_DB") or "runs.db")


def _chain(ctx: typer.Context):
    while ctx is not None:
        yield ctx
        ctx = ctx.parent


def run_names(ctx: typer.Context, incomplete: str) -> list[str]:
    from ccpo_cli.store.run_names import run_names as read_names

    try:
        return read_names(completion_db(ctx), incomplete)
    except Exception:
        return []
