"""An exact transition cache for the deterministic ALFWorld engine, per process.

Given the game file, the engine's state after a reset and a sequence of commands is always the
same, so (game, command history) -> (observation, won, admissible commands) can be served from
a table instead of the engine. Episodes of one training step (a group plays the same game 8
times) and evaluations (the same panel games every time) repeat each other's openings, and a
confident policy repeats whole episodes.

The history is keyed as a path in a trie: the reset of a game is a node, and each (node,
command) edge leads to a child node with a fresh integer id. The table is one LRU over edges,
bounded by `max_entries`; an evicted edge's subtree becomes unreachable and ages out, and ids
are never reused, so a lookup can only ever return the state of its own history.

`CachedSession` wraps a `GameSession` and lets the real engine lag behind: a cached step moves
only the episode bookkeeping. On the first miss the engine is reset and the episode's commands
so far are replayed (they were served from the cache, so this costs what they would have cost
without it), then the engine is stepped for real. An episode is never slower than without the
cache, by more than a lookup, and a fully cached episode touches no engine at all.
`tests/test_envs_transitions.py` checks transcripts byte for byte with and without it.
"""

from __future__ import annotations

import itertools
import sys
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any

from ccpo_cli.envs.engine import GameSession, StepResult

# Edges kept per process. One edge holds one observation and its admissible commands (strings
# interned, so repeated commands share memory): about 1-2 KB, so the default is ~100 MB at most.
DEFAULT_MAX_ENTRIES = 60_000


class EngineState(dict):
    """What `GameSession` reads from a TextWorld state: the feedback text and the
    `admissible_commands`, `won` (and `extra.walkthrough`) entries, rebuilt from a snapshot."""

    def __init__(self, feedback: str, entries: dict[str, Any]):
        super().__init__(entries)
        self.feedback = feedback

    @classmethod
    def from_snapshot(cls, snapshot: tuple) -> EngineState:
        feedback, commands, won, walkthrough = snapshot[-4:]
        entries = {"admissible_commands": commands, "won": won}
        if walkthrough is not None:
            entries["extra.walkthrough"] = walkthrough
        return cls(feedback, entries)


def snapshot_of(state: Any, walkthrough: bool) -> tuple:
    """(feedback, admissible commands, won, walkthrough or None).

    Table entries are flat tuples of strings, ints, bools and tuples of strings, which young
    garbage collections stop tracking (the inner tuples in the first pass, the entry in the
    next) before they reach the oldest generation. Tracked entries would pile up as long-lived
    objects and set off full collections over a forked worker's whole heap."""
    return (
        state.feedback,
        tuple(sys.intern(command) for command in state["admissible_commands"]),
        bool(state["won"]),
        tuple(state.get("extra.walkthrough") or ()) if walkthrough else None,
    )


@dataclass
class CacheStats:
    hits: int = 0  # resets and steps served from the table
    misses: int = 0  # resets and steps the engine computed
    replayed: int = 0  # engine steps re-run to bring a lagging engine to a missed state

    @property
    def hit_rate(self) -> float | None:
        total = self.hits + self.misses
        return self.hits / total if total else None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"hit_rate": self.hit_rate}


class TransitionCache:
    """(node, command) -> (child node, engine state), one LRU for every game of a process."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES):
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, got {max_entries}")
        self.max_entries = max_entries
        # (node, command) -> (child node, *snapshot): flat, so the collector untracks it.
        self._edges: OrderedDict[tuple[Any, str], tuple] = OrderedDict()
        self._ids = itertools.count(1)
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._edges)

    def get(self, node: Any, command: str) -> tuple | None:
        """(child node, *state snapshot) of this edge, or None."""
        found = self._edges.get((node, command))
        if found is None:
            self.stats.misses += 1
            return None
        self._edges.move_to_end((node, command))
        self.stats.hits += 1
        return found

    def put(self, node: Any, command: str, snapshot: tuple) -> int:
        child = next(self._ids)
        self._edges[(node, command)] = (child, *snapshot)
        if len(self._edges) > self.max_entries:
            self._edges.popitem(last=False)
        return child


# The reset of a game is the edge ("reset:" + game_path, ""); other nodes are ints.
def _reset_key(game_path: str) -> str:
    return "reset:" + game_path


def _session_attribute(name: str) -> property:
    """A read-only attribute of the wrapped `GameSession`, read through to it (never cached:
    `load` changes the game)."""
    return property(lambda self: getattr(self.session, name))


class CachedSession:
    """A `GameSession` whose engine states come from a `TransitionCache` when known."""

    def __init__(self, session: GameSession, cache: TransitionCache):
        self.session = session
        self.cache = cache
        self._node: Any = None
        self._history: list[str] = []
        # Commands the engine has taken since its last real reset; None: unknown (not reset).
        self._engine_history: list[str] | None = None

    # What callers read from a GameSession.
    game_path = _session_attribute("game_path")
    game_id = _session_attribute("game_id")
    task_type = _session_attribute("task_type")

    def load(self, game_path: Any) -> None:
        self.session.load(game_path)
        self._engine_history = None

    def reset(self) -> StepResult:
        key = _reset_key(self.session.game_path)
        found = self.cache.get(key, "")
        if found is None:
            snapshot = snapshot_of(self.session.engine_reset(), self.session.want_walkthrough)
            self._engine_history = []
            found = (self.cache.put(key, "", snapshot), *snapshot)
        self._node = found[0]
        self._history = []
        return self.session.begin(EngineState.from_snapshot(found))

    def step(self, command: str) -> StepResult:
        self.session.check_running()
        found = self.cache.get(self._node, command)
        if found is None:
            self._catch_up()
            snapshot = snapshot_of(self.session.engine_step(command), self.session.want_walkthrough)
            self._engine_history.append(command)
            found = (self.cache.put(self._node, command, snapshot), *snapshot)
        self._node = found[0]
        self._history.append(command)
        return self.session.advance(EngineState.from_snapshot(found))

    def _catch_up(self) -> None:
        """Bring the engine to this episode's history (reset and replay when it lags)."""
        known = self._engine_history
        if known is not None and known == self._history[: len(known)]:
            missing = self._history[len(known) :]  # the engine is behind on this very path
        else:
            self.session.engine_reset()
            missing = self._history
        for command in missing:
            self.session.engine_step(command)
        self.cache.stats.replayed += len(missing)
        self._engine_history = list(self._history)

    def close(self) -> None:
        self.session.close()
