"""Rollout workers: each process loads games in the real engine and acts with the policy itself.

The engine is about 90 % of the compute and the policy a few per cent, so each worker runs
the policy next to its games instead of sending every step across processes. Workers are
forked with the model's tensors in shared memory: the learner's in-place optimizer steps are
what every worker acts with on the next step, with no copying. Each worker keeps its recently
used games loaded (a load costs about as much as 100 engine steps) and resets a game for each
episode.

Sampling is driven by one numpy generator per episode, seeded from (run seed, step, task,
episode), so the same seed gives the same rollouts whichever worker plays them.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import sys
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ccpo_cli.backends.local.config import default_workers  # noqa: F401 - the rollout workers' default, kept importable here
from ccpo_cli.backends.local.features import Featurizer, Turn, task_sentence
from ccpo_cli.backends.local.policy import CommandScorer, pack
from ccpo_cli.backends.local.rollouts import Decision, Trajectory
from ccpo_cli.errors import CcpoError

# Engine commands the policy never chooses (verl-agent drops `help` from the list too).
EXCLUDED_COMMANDS = frozenset({"help"})
# Loaded games each rollout process keeps. A loaded game holds about 2 MB and a load costs
# about 80 ms, so 320 (about 0.6 GB per process) keeps the whole 128-game panel and a 20-step
# run's training games loaded: every evaluation after the first plays without loading. Bounded,
# so memory does not grow with the number of games.
SESSION_CACHE_SIZE = 320
# Edges of the exact transition cache each rollout process keeps (ccpo_cli.envs.transitions);
# 0 turns it off. Off by default: matrix runs hit it for about 4 % of steps and it slowed them
# (scripts/bench_matrix.py). Read when a RolloutPool starts.
TRANSITION_CACHE_ENTRIES = 0
# Move everything a forked worker inherits (torch, the trainer's objects) out of reach of its
# garbage collector, so the engine's many short-lived objects never set off full collections
# over the inherited heap (and those collections do not touch, and so copy, shared pages).
FREEZE_INHERITED_HEAP = True
# Sessions never truncate on their own: each job carries its step limit (training and
# evaluation may use different ones with the same loaded games).
_ENGINE_STEP_CAP = 1_000_000


@dataclass(frozen=True)
class EpisodeJob:
    """Play `len(traj_uids)` episodes of one game; `seeds[i]` seeds episode i's sampling."""

    game_path: str
    uid: str
    traj_uids: tuple[str, ...]
    seeds: tuple[tuple[int, ...], ...]
    temperature: float
    max_steps: int = 50
    keep_features: bool = True
    # Follow the game's stored plan and mark each decision that advanced it (docs/estimators.md
    # §4.2); only an arm with the oracle step term asks for it.
    plan_progress: bool = False


def candidates_of(admissible: Sequence[str]) -> tuple[str, ...]:
    return tuple(command for command in admissible if command not in EXCLUDED_COMMANDS)


def sample_index(log_probs: np.ndarray, rng: np.random.Generator) -> int:
    probs = np.exp(log_probs.astype(np.float64) - np.max(log_probs))
    cumulative = np.cumsum(probs)
    return int(
        min(
            np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"), len(probs) - 1
        )
    )


class EpisodePlayer:
    """Plays episodes of games with a policy, in whatever process it lives in."""

    def __init__(
        self,
        model: CommandScorer,
        featurizer: Featurizer | None = None,
        transition_entries: int = 0,
    ):
        from ccpo_cli.envs.transitions import TransitionCache

        self.model = model
        self.featurizer = featurizer or Featurizer()
        self._sessions: OrderedDict[tuple[str, bool], Any] = OrderedDict()
        self.transitions = TransitionCache(transition_entries) if transition_entries > 0 else None

    def session(self, game_path: str, walkthrough: bool = False):
        from ccpo_cli.envs.engine import GameSession

        key = (game_path, walkthrough)  # a game loaded without its plan is another session
        found = self._sessions.pop(key, None)
        if found is None:
            found = GameSession(game_path, max_steps=_ENGINE_STEP_CAP, walkthrough=walkthrough)
            if self.transitions is not None:
                from ccpo_cli.envs.transitions import CachedSession

                found = CachedSession(found, self.transitions)
        self._sessions[key] = found
        while len(self._sessions) > SESSION_CACHE_SIZE:
            _, oldest = self._sessions.popitem(last=False)
            oldest.close()
        return found

    def play(self, job: EpisodeJob) -> list[Trajectory]:
        session = self.session(job.game_path, walkthrough=job.plan_progress)
        return [
            self._episode(session, job, traj_uid, np.random.default_rng(list(seed)))
            for traj_uid, seed in zip(job.traj_uids, job.seeds)
        ]

    def play_counted(self, job: EpisodeJob) -> tuple[list[Trajectory], tuple[int, int, int]]:
        """`play`, and the transition cache's (hits, misses, replayed) during it."""
        before = _counts(self.transitions)
        trajectories = self.play(job)
        after = _counts(self.transitions)
        return trajectories, tuple(a - b for a, b in zip(after, before))

    def _episode(
        self, session, job: EpisodeJob, traj_uid: str, rng: np.random.Generator
    ) -> Trajectory:
        result = session.reset()
        task = task_sentence(result.info.get("task") or result.observation)
        trajectory = Trajectory(job.uid, traj_uid, session.game_id, session.task_type)
        history: list[Turn] = []
        observation = result.observation
        plan = list(result.info.get("walkthrough") or []) if job.plan_progress else []
        if job.plan_progress and not plan:
            raise CcpoError(
                f"{session.game_path}: the engine gave no plan to follow for the oracle step term"
            )
        done_in_plan = 0
        while True:
            candidates = candidates_of(result.info["admissible_commands"]) or ("look",)
            features = self.featurizer.featurize(task, observation, history, list(candidates))
            with torch.no_grad():
                log_probs = self.model.log_probs(pack([features]), temperature=job.temperature)[0]
            index = sample_index(log_probs.numpy()[: len(candidates)], rng)
            result = session.step(candidates[index])
            advanced = None
            if job.plan_progress:
                # The plan's distance to the goal fell by one: the action was its next command.
                advanced = done_in_plan < len(plan) and candidates[index] == plan[done_in_plan]
                done_in_plan += int(advanced)
            trajectory.decisions.append(
                Decision(
                    observation,
                    candidates,
                    index,
                    float(result.reward),
                    features if job.keep_features else None,
                    advanced_plan=advanced,
                )
            )
            history.append(Turn(observation, candidates[index]))
            observation = result.observation
            if result.done or len(trajectory.decisions) >= job.max_steps:
                trajectory.won = bool(result.info.get("won"))
                return trajectory

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()


def _counts(transitions) -> tuple[int, int, int]:
    if transitions is None:
        return (0, 0, 0)
    stats = transitions.stats
    return (stats.hits, stats.misses, stats.replayed)


# Transition-cache counts of every rollout pool of this process (for benchmarks and reports).
TRANSITION_TOTALS = {"hits": 0, "misses": 0, "replayed": 0}


def _add_counts(counts: tuple[int, int, int]) -> None:
    for key, value in zip(("hits", "misses", "replayed"), counts):
        TRANSITION_TOTALS[key] += value


def _install_engine_speedups() -> None:
    from ccpo_cli.envs import memo

    memo.install()


# --- worker processes -------------------------------------------------------------------------

_PLAYER: EpisodePlayer | None = None
_START_ERROR: str | None = None


def _start_worker(model: CommandScorer, transition_entries: int = 0) -> None:
    # An exception escaping a Pool initializer makes the pool respawn workers forever; keep it
    # and report it with the first job instead.
    global _PLAYER, _START_ERROR
    try:
        _die_with_parent()
        if FREEZE_INHERITED_HEAP:
            import gc

            gc.freeze()
        torch.set_num_threads(1)
        _install_engine_speedups()
        _PLAYER = EpisodePlayer(model, transition_entries=transition_entries)
    except BaseException as error:  # noqa: BLE001 - reported to the parent below
        _START_ERROR = f"rollout worker failed to start: {type(error).__name__}: {error}"


def _die_with_parent() -> None:
    """On Linux, have the kernel end this worker when the trainer dies (even by SIGKILL), so an
    interrupted run leaves no orphaned engine processes behind."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _play_in_worker(
    indexed_job: tuple[int, EpisodeJob],
) -> tuple[int, list[Trajectory], tuple[int, int, int], float]:
    """A job played in a worker, with the worker's CPU seconds for it (its process time: the
    cost of the job whatever else the machine runs)."""
    index, job = indexed_job
    if _PLAYER is None:
        raise RuntimeError(_START_ERROR or "rollout worker not started")
    started = time.process_time()
    trajectories, counts = _PLAYER.play_counted(job)
    return index, trajectories, counts, time.process_time() - started


def _abandon(pool: Any) -> None:
    """End a pool one of whose workers died, without `Pool.terminate`: a worker killed while it
    held the task queue's read lock leaves that lock taken forever, and terminate (at once, or
    from its finalizer at exit) waits on it. Replacements are stopped, every worker is killed
    and the pool's finalizer is cancelled; its threads are daemons and end with the process."""
    from multiprocessing import pool as pool_module

    handler = getattr(pool, "_worker_handler", None)
    if handler is not None:
        handler._state = pool_module.TERMINATE  # no more replacement workers
    with contextlib.suppress(Exception):
        pool._change_notifier.put(None)
    for process in list(getattr(pool, "_pool", [])):
        if process.exitcode is None:
            process.kill()
    for process in list(getattr(pool, "_pool", [])):
        process.join(timeout=5)
    finalizer = getattr(pool, "_terminate", None)
    if finalizer is not None:
        finalizer.cancel()


class RolloutWorkerDied(CcpoError):
    """A rollout worker process ended while jobs were being played (killed, out of memory)."""


# How often a play waiting on its workers looks whether one of them died.
WORKER_CHECK_S = 0.5


class RolloutPool:
    """Plays jobs in `workers` forked processes (or in this process when workers is 0).

    `worker_cpu_s` is the CPU time the worker processes spent on the last `play` (0 when the
    jobs ran in this process, whose own process time then holds them): with the caller's
    process time it is what a step or an evaluation cost, however loaded the machine is."""

    def __init__(self, model: CommandScorer, workers: int, transition_entries: int | None = None):
        self.workers = workers
        self.worker_cpu_s = 0.0
        self._pool = None
        self._died: str | None = None
        entries = TRANSITION_CACHE_ENTRIES if transition_entries is None else transition_entries
        if workers > 0:
            model.share_memory()
            context = multiprocessing.get_context("fork")
            self._pool = context.Pool(workers, initializer=_start_worker, initargs=(model, entries))
            # Its processes: any of them ending is a death (a Pool's workers never exit on
            # their own), found before the next play or while one waits.
            self._processes = list(self._pool._pool)  # type: ignore[attr-defined]
        else:
            _install_engine_speedups()
            self._local = EpisodePlayer(model, transition_entries=entries)

    def play(self, jobs: Sequence[EpisodeJob]) -> list[list[Trajectory]]:
        """The trajectories of every job, in job order."""
        if self._died is not None:
            raise RolloutWorkerDied(self._died)
        if self._pool is None:
            played = [self._local.play_counted(job) for job in jobs]
            for _, counts in played:
                _add_counts(counts)
            return [trajectories for trajectories, _ in played]
        results: list[list[Trajectory] | None] = [None] * len(jobs)
        self.worker_cpu_s = 0.0
        # multiprocessing.Pool replaces a worker that dies, but the job it held is lost and its
        # result never comes: the results are awaited a moment at a time, and a worker gone
        # meanwhile (or since the last play) ends the play (RolloutWorkerDied).
        self._check_alive(self._processes)
        # Longest-first would need lengths we do not know; one job at a time balances well enough.
        iterator = self._pool.imap_unordered(_play_in_worker, list(enumerate(jobs)), chunksize=1)
        for _ in jobs:
            while True:
                try:
                    index, trajectories, counts, cpu_s = iterator.next(timeout=WORKER_CHECK_S)
                    break
                except multiprocessing.TimeoutError:
                    self._check_alive(self._processes)
            results[index] = trajectories
            self.worker_cpu_s += cpu_s
            _add_counts(counts)
        return results  # type: ignore[return-value]

    def _check_alive(self, playing: list[Any]) -> None:
        dead = [process for process in playing if process.exitcode is not None]
        if not dead:
            return
        process = dead[0]
        code = process.exitcode
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        pool, self._pool = self._pool, None
        if pool is not None:
            _abandon(pool)
        self._died = f"rollout worker {process.name} (pid {process.pid}) died ({how})"
        raise RolloutWorkerDied(self._died)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None
        elif hasattr(self, "_local"):
            self._local.close()

    def __enter__(self) -> RolloutPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
