"""A batch of ALFWorld games stepped in lock-step, in parallel worker processes.

Slot `i` of a batch lives in worker `i % workers`. Each worker keeps a pool of loaded games
(`GameSession`s), so a game is loaded once and only reset for its next episodes, and memoizes
TextWorld's parses (`ccpo_cli.envs.memo`) when `memo=True`. `workers=0` runs everything in the
calling process (same results, useful for debugging and small tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from ccpo_cli.envs.engine import DEFAULT_MAX_STEPS, GameSession, StepResult, require_engine
from ccpo_cli.errors import CcpoError, InvalidInput, UsageError

# Idle loaded games a worker keeps beyond the ones in use (each holds a copy of Fast
# Downward's library, so the pool is bounded).
DEFAULT_POOL_SIZE = 48


class _SessionPool:
    """The loaded games of one process: slot -> session in use, plus idle sessions by game."""

    def __init__(
        self, max_steps: int, walkthrough: bool, pool_size: int, transition_cache: int = 0
    ):
        from ccpo_cli.envs.transitions import TransitionCache

        self.max_steps = max_steps
        self.walkthrough = walkthrough
        self.pool_size = pool_size
        self.transitions = TransitionCache(transition_cache) if transition_cache > 0 else None
        self.active: dict[int, GameSession] = {}
        self.idle: OrderedDict[int, GameSession] = (
            OrderedDict()
        )  # id(session) -> session, LRU first

    def _acquire(self, game_path: str) -> GameSession:
        for key, session in self.idle.items():
            if session.game_path == game_path:
                del self.idle[key]
                return session
        if len(self.idle) >= self.pool_size:
            # Reuse the least recently used idle shell for the new game.
            _, session = self.idle.popitem(last=False)
            session.load(game_path)
            return session
        session = GameSession(game_path, max_steps=self.max_steps, walkthrough=self.walkthrough)
        if self.transitions is None:
            return session
        from ccpo_cli.envs.transitions import CachedSession

        return CachedSession(session, self.transitions)

    def reset(self, assignments: Sequence[tuple[int, str]]) -> list[tuple[int, StepResult]]:
        # A reset replaces the whole batch: every session in use becomes idle (kept loaded).
        for session in self.active.values():
            self.idle[id(session)] = session
        self.active.clear()
        results = []
        for slot, game_path in assignments:
            session = self._acquire(game_path)
            self.active[slot] = session
            results.append((slot, session.reset()))
        return results

    def step(self, actions: Sequence[tuple[int, str]]) -> list[tuple[int, StepResult]]:
        return [(slot, self.active[slot].step(action)) for slot, action in actions]

    def close(self) -> None:
        for session in [*self.active.values(), *self.idle.values()]:
            session.close()
        self.active.clear()
        self.idle.clear()


def _worker_main(
    receiver: Connection,
    sender: Connection,
    max_steps: int,
    walkthrough: bool,
    memo: bool,
    pool_size: int,
    transition_cache: int = 0,
) -> None:
    from ccpo_cli.envs import memo as memo_module

    try:
        memo_module.set_memo(memo)
        pool = _SessionPool(max_steps, walkthrough, pool_size, transition_cache)
    except Exception:  # noqa: BLE001 - reported to the parent, which raises
        sender.send(("error", traceback.format_exc()))
        return
    sender.send(("ok", None))
    while True:
        try:
            command, payload = receiver.recv()
        except (EOFError, OSError):
            break
        if command == "close":
            pool.close()
            sender.send(("ok", None))
            break
        try:
            result = pool.reset(payload) if command == "reset" else pool.step(payload)
            sender.send(("ok", result))
        except InvalidInput as error:
            sender.send(("invalid", str(error)))
        except CcpoError as error:  # a failure the engine layer already put in one line
            sender.send(("failed", str(error)))
        except Exception:  # noqa: BLE001 - reported to the parent, which raises
            sender.send(("error", traceback.format_exc()))


def _unwrap(reply: tuple[str, Any]) -> Any:
    status, payload = reply
    if status == "invalid":
        raise InvalidInput(payload)
    if status == "failed":
        raise CcpoError(payload)
    if status == "error":
        raise CcpoError(f"ALFWorld worker failed:\n{payload}")
    return payload


@dataclass
class _Worker:
    process: subprocess.Popen
    sender: Connection
    receiver: Connection


class AlfworldBatchEnv:
    """Lock-step batch of real ALFWorld games (see the `ccpo_cli.envs` docstring for usage).

    Arguments:
        game_paths: `game.tw-pddl` files (or game folders holding one); played in sorted order
            of their path, so `reset()`'s batch order never depends on the filesystem.
        workers: worker processes (default: the machine's cores, at most 8); 0 = in-process.
        max_steps: the step limit of an episode (50 as in verl-agent).
        memo: memoize TextWorld's grammar and query parses in each worker.
        walkthrough: put the planner's walkthrough (the stored one, else a Fast Downward plan
            computed at reset) in each info as `walkthrough` (what the oracle agent plays).
        pool_size: idle loaded games each worker keeps for later resets.
        transition_cache: edges of the exact transition cache per worker
            (`ccpo_cli.envs.transitions`; 0, the default, turns it off).

    Workers are fresh interpreters (`python -m ccpo_cli.envs._worker`): they never inherit the
    caller's threads, models or `__main__`, so any caller (a CLI, pytest, a trainer holding a
    torch model) can start them.

    `reset()` and `step()` return, per slot: the observation text, and an info dict with
    `admissible_commands` (list[str], sorted, as the engine gives them), `won` (bool),
    `task_type` (short key: pick, look, clean, heat, cool, pick2), `game_id`
    (`<task folder>/<trial folder>`), `game_path`, `task` (the "Your task is to: ..." line),
    `step` (steps taken this episode), `truncated` (True on the step that hit `max_steps`
    without a win), `active` (False once the slot's episode has ended; later actions for that
    slot are ignored), and `walkthrough` when requested. The reward is 10.0 on the winning step,
    else 0.0; `done` is True from the winning or step-limit step on.
    """

    def __init__(
        self,
        game_paths: Sequence[str | os.PathLike],
        workers: int | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        memo: bool = True,
        walkthrough: bool = False,
        pool_size: int = DEFAULT_POOL_SIZE,
        transition_cache: int = 0,
    ):
        self._closed = True  # until fully started, so __del__ on a failed start is harmless
        self._workers: list[_Worker] = []
        self._local: _SessionPool | None = None
        paths = sorted(str(_game_file(p)) for p in game_paths)
        if not paths:
            raise InvalidInput("no ALFWorld games given")
        if max_steps < 1:
            raise UsageError(f"max_steps must be at least 1, got {max_steps}")
        require_engine()
        self.game_paths: list[str] = paths
        self.max_steps = max_steps
        self.memo = memo
        self.walkthrough = walkthrough
        self.workers = min(os.cpu_count() or 1, 8) if workers is None else max(0, int(workers))
        self._pool_size = pool_size
        self._transition_cache = transition_cache
        self._batch: list[str] = []
        self._last: list[StepResult] = []
        self._closed = False
        if self.workers == 0:
            from ccpo_cli.envs import memo as memo_module

            memo_module.set_memo(memo)
            self._local = _SessionPool(max_steps, walkthrough, pool_size, transition_cache)
        else:
            self._start_workers()

    # ---- lifecycle -------------------------------------------------------------------------

    def _start_workers(self) -> None:
        package_root = str(Path(__file__).resolve().parents[2])
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            [package_root, *filter(None, [environment.get("PYTHONPATH")])]
        )
        settings = json.dumps(
            {
                "max_steps": self.max_steps,
                "walkthrough": self.walkthrough,
                "memo": self.memo,
                "pool_size": self._pool_size,
                "transition_cache": self._transition_cache,
            }
        )
        for _ in range(self.workers):
            to_child_read, to_child_write = os.pipe()
            from_child_read, from_child_write = os.pipe()
            process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ccpo_cli.envs._worker",
                    str(to_child_read),
                    str(from_child_write),
                    settings,
                ],
                pass_fds=(to_child_read, from_child_write),
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
            )
            os.close(to_child_read)
            os.close(from_child_write)
            self._workers.append(
                _Worker(
                    process,
                    Connection(to_child_write, readable=False),
                    Connection(from_child_read, writable=False),
                )
            )
        for worker in self._workers:
            try:
                _unwrap(worker.receiver.recv())
            except EOFError:
                self.close()
                raise CcpoError("an ALFWorld worker process failed to start") from None

    def close(self) -> None:
        """Stop the workers and release every loaded game (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._local is not None:
            self._local.close()
        for worker in self._workers:
            try:
                worker.sender.send(("close", None))
                worker.receiver.recv()
            except (EOFError, OSError):
                pass
            try:
                worker.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait(timeout=10)
            worker.sender.close()
            worker.receiver.close()
        self._workers.clear()

    def __enter__(self) -> AlfworldBatchEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # ---- dispatch --------------------------------------------------------------------------

    def _run(self, command: str, items: list[tuple[int, str]]) -> dict[int, StepResult]:
        if self._closed:
            raise CcpoError("the ALFWorld batch environment is closed")
        if self._local is not None:
            method = self._local.reset if command == "reset" else self._local.step
            return dict(method(items))
        # A reset goes to every worker, so those without slots in the new batch free theirs.
        per_worker: dict[int, list[tuple[int, str]]] = (
            {index: [] for index in range(self.workers)} if command == "reset" else {}
        )
        for slot, value in items:
            per_worker.setdefault(slot % self.workers, []).append((slot, value))
        for index, chunk in per_worker.items():
            self._workers[index].sender.send((command, chunk))
        results: dict[int, StepResult] = {}
        failure: Exception | None = None
        for index in per_worker:
            try:
                results.update(_unwrap(self._workers[index].receiver.recv()))
            except CcpoError as error:
                failure = failure or error
            except EOFError:
                failure = failure or CcpoError("an ALFWorld worker process died")
        if failure is not None:
            raise failure
        return results

    # ---- the environment -------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        return len(self._batch)

    def reset(self, games: Sequence[int | str] | None = None) -> tuple[list[str], list[dict]]:
        """Start one episode per slot. `games` lists each slot's game as an index into
        `game_paths` or a path (repeat a game for group rollouts); default: every game once,
        in sorted order. Returns (observations, infos)."""
        if games is None:
            batch = list(self.game_paths)
        else:
            batch = [self._resolve(game) for game in games]
        if not batch:
            raise UsageError("reset() needs at least one game")
        results = self._run("reset", list(enumerate(batch)))
        self._batch = batch
        self._last = [results[slot] for slot in range(len(batch))]
        for result in self._last:
            result.info["active"] = True
        return [r.observation for r in self._last], [r.info for r in self._last]

    def step(
        self, actions: Sequence[str | None]
    ) -> tuple[list[str], list[float], list[bool], list[dict]]:
        """Apply one action per slot. Slots whose episode has ended ignore their action (it may
        be None) and repeat their last observation with reward 0. Returns
        (observations, rewards, dones, infos)."""
        if not self._batch:
            raise UsageError("step() before reset()")
        if len(actions) != len(self._batch):
            raise UsageError(f"step() got {len(actions)} actions for a batch of {len(self._batch)}")
        live = [
            (slot, str(action)) for slot, action in enumerate(actions) if not self._last[slot].done
        ]
        results = self._run("step", live) if live else {}
        rewards = []
        for slot in range(len(self._batch)):
            if slot in results:
                self._last[slot] = results[slot]
                results[slot].info["active"] = True
                rewards.append(results[slot].reward)
            else:
                self._last[slot].info["active"] = False
                rewards.append(0.0)
        return (
            [r.observation for r in self._last],
            rewards,
            [r.done for r in self._last],
            [r.info for r in self._last],
        )

    def _resolve(self, game: int | str) -> str:
        if isinstance(game, int):
            if not 0 <= game < len(self.game_paths):
                raise UsageError(f"game index {game} out of range 0..{len(self.game_paths) - 1}")
            return self.game_paths[game]
        path = str(_game_file(game))
        if path not in self.game_paths:
            raise UsageError(f"{game}: not one of this environment's games")
        return path


def _game_file(path: str | os.PathLike) -> Path:
    """A game folder or its `game.tw-pddl`, as the `game.tw-pddl` path."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / "game.tw-pddl"
    if not candidate.is_file():
        raise InvalidInput(f"{path}: no game.tw-pddl found")
    return candidate.resolve()
