"""Play a panel of ALFWorld games with an agent, once per evaluation seed, every episode kept.

The loop is verl-agent's: all games of a batch advance in lock step; each live game's turn is
prompted with the verl-agent layout (history length 2); a text policy's response is projected
to a command and its validity flag kept per turn; success is the engine's `won` flag only;
an episode ends on a win or at the step limit (50). Nothing here writes to a database: callers
(`ccpo eval`, the trainers) record the returned results.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.agents.base import Agent, Turn
from ccpo_cli.agents.prompts import DEFAULT_HISTORY_LENGTH, EpisodePrompter
from ccpo_cli.envs.engine import DEFAULT_MAX_STEPS, WIN_REWARD
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.task_types import TASK_TYPES, short_key

ProgressCallback = Callable[[int, int], None]  # (episodes finished, episodes in total)
# (turn of the batch being played, its turn limit): episodes of one batch often all end at the turn
# limit, so counting episodes alone would stand still for the whole batch (docs/alfworld-games.md).
TurnCallback = Callable[[int, int], None]
PhaseCallback = Callable[
    [str], None
]  # a set-up phase, said before it starts (engine workers, model)


# The episode's own attributes an evaluation row carries, in its column order.
_ROW_ATTRIBUTES = ("episode_index", "game_id", "task_type", "won", "turns", "invalid_turns")


@dataclass
class EpisodeResult:
    episode_index: int
    game_id: str
    task_type: str
    won: bool
    turns: int
    invalid_flags: list[bool] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    responses: list[str | None] = field(default_factory=list)  # raw text of a text policy

    @property
    def invalid_turns(self) -> int:
        return sum(self.invalid_flags)

    def as_row(self) -> dict[str, Any]:
        """The episode as `record_evaluation(episode_rows=...)` takes it."""
        row = {name: getattr(self, name) for name in _ROW_ATTRIBUTES}
        return row | {
            "reward": WIN_REWARD if self.won else 0.0,
            "invalid_flags": [int(flag) for flag in self.invalid_flags],
        }


def _rate(successes: int, episodes: int) -> float:
    return 100.0 * successes / episodes if episodes else float("nan")


@dataclass
class SeedEvaluation:
    """All episodes of one evaluation seed."""

    seed: int
    episodes: list[EpisodeResult]

    @property
    def successes(self) -> int:
        return sum(episode.won for episode in self.episodes)

    @property
    def success(self) -> float:
        """Success rate in percent."""
        return _rate(self.successes, len(self.episodes))

    @property
    def mean_turns(self) -> float:
        return (
            sum(e.turns for e in self.episodes) / len(self.episodes)
            if self.episodes
            else float("nan")
        )

    @property
    def invalid_turn_rate(self) -> float:
        """Percent of all turns whose response did not parse to a valid action."""
        turns = sum(len(e.invalid_flags) for e in self.episodes)
        return _rate(sum(e.invalid_turns for e in self.episodes), turns)

    def task_types(self) -> dict[str, dict[str, Any]]:
        """Per task type present: {"episodes", "successes", "success" (percent)}, in the
        project's task-type order."""
        table: dict[str, dict[str, Any]] = {}
        for key in TASK_TYPES:
            of_type = [e for e in self.episodes if e.task_type == key]
            if of_type:
                won = sum(e.won for e in of_type)
                table[key] = {
                    "episodes": len(of_type),
                    "successes": won,
                    "success": _rate(won, len(of_type)),
                }
        return table

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "episodes": len(self.episodes),
            "successes": self.successes,
            "success": self.success,
            "mean_turns": self.mean_turns,
            "invalid_turn_rate": self.invalid_turn_rate,
            "task_types": self.task_types(),
        }


def task_type_of_path(game_path: str | os.PathLike) -> str:
    """The short task-type key from the ALFWorld folder layout (`<type>-...-<scene>/<trial>/`)."""
    path = Path(game_path)
    if path.name == "game.tw-pddl":
        path = path.parent
    for part in (path.parent.name, path.name):
        try:
            return short_key(part)
        except KeyError:
            continue
    raise InvalidInput(f"{game_path}: cannot tell the task type from the folder name")


def select_games(game_paths: Sequence[str | os.PathLike], episodes: int | None) -> list[str]:
    """The games played per seed: all of them (sorted) by default; for a smaller `episodes`
    the types take turns (pick, look, clean, heat, cool, pick2, pick, ...) so a subset stays
    balanced; a larger `episodes` cycles through the panel again."""
    paths = sorted(str(p) for p in game_paths)
    if not paths:
        raise InvalidInput("no games to evaluate on")
    if episodes is None:
        return paths
    if episodes < 1:
        raise InvalidInput(f"--episodes must be at least 1, got {episodes}")
    by_type: dict[str, list[str]] = {}
    for path in paths:
        by_type.setdefault(task_type_of_path(path), []).append(path)
    queues = [by_type[key] for key in TASK_TYPES if key in by_type]
    interleaved = [
        queue[i] for i in range(max(map(len, queues))) for queue in queues if i < len(queue)
    ]
    return [interleaved[i % len(interleaved)] for i in range(episodes)]


class _Episode:
    """The live state of one slot of the batch."""

    def __init__(self, index: int, history_length: int):
        self.index = index
        self.prompter = EpisodePrompter(history_length=history_length)
        self.invalid_flags: list[bool] = []
        self.commands: list[str] = []
        self.responses: list[str | None] = []
        self.result: EpisodeResult | None = None

    def take(self, decision: Any) -> None:
        """The agent's decision this turn, in the prompt history and the episode's record."""
        self.prompter.record(decision.command)
        self.commands.append(decision.command)
        self.responses.append(decision.response)
        self.invalid_flags.append(not decision.is_valid)

    def finish(self, info: dict[str, Any], game_path: str) -> EpisodeResult:
        """The finished episode's result, from the engine's last `info` (the task type from the
        game's folder when the engine does not say it)."""
        self.result = EpisodeResult(
            episode_index=self.index,
            game_id=str(info.get("game_id", "")),
            task_type=str(info.get("task_type") or task_type_of_path(game_path)),
            won=bool(info.get("won")),
            turns=len(self.commands),
            invalid_flags=self.invalid_flags,
            commands=self.commands,
            responses=self.responses,
        )
        return self.result


def _turn(slot: int, episode: _Episode, observation: str, info: dict[str, Any]) -> Turn:
    admissible = tuple(info.get("admissible_commands") or ())
    try:
        prompt = episode.prompter.prompt(observation, admissible)
    except ValueError as error:
        raise InvalidInput(f"{info.get('game_path') or info.get('game_id')}: {error}") from None
    return Turn(
        slot=slot,
        game_id=str(info.get("game_id", "")),
        step=len(episode.commands),
        observation=observation,
        admissible=admissible,
        task=episode.prompter.task or "",
        prompt=prompt,
        history=tuple(episode.prompter.history),
        info=info,
    )


def play_batch(
    env: Any,
    agent: Agent,
    games: Sequence[str],
    *,
    first_index: int = 0,
    history_length: int = DEFAULT_HISTORY_LENGTH,
    on_episode_end: Callable[[EpisodeResult], None] | None = None,
    on_turn: TurnCallback | None = None,
    turn_limit: int = DEFAULT_MAX_STEPS,
) -> list[EpisodeResult]:
    """One episode of each game in `games` (paths of `env`), played in lock step; `on_turn`
    hears each turn as it starts (turn, `turn_limit`)."""
    observations, infos = env.reset(list(games))
    slots = [_Episode(first_index + i, history_length) for i in range(len(games))]
    agent.start_batch(observations, infos)
    live = list(range(len(slots)))
    turn = 0
    while live:
        turn += 1
        if on_turn is not None:
            on_turn(turn, turn_limit)
        turns = [_turn(i, slots[i], observations[i], infos[i]) for i in live]
        decisions = agent.act(turns)
        if len(decisions) != len(turns):
            raise CcpoError(
                f"agent {agent.name} returned {len(decisions)} decisions for {len(turns)} turns"
            )
        actions: list[str | None] = [None] * len(slots)
        for slot, decision in zip(live, decisions):
            slots[slot].take(decision)
            actions[slot] = decision.command
        observations, _, dones, infos = env.step(actions)
        still_live = []
        for slot in live:
            if dones[slot]:
                result = slots[slot].finish(infos[slot], games[slot])
                if on_episode_end is not None:
                    on_episode_end(result)
            else:
                still_live.append(slot)
        live = still_live
    return [slot.result for slot in slots]  # type: ignore[misc]


class _EpisodeCounter:
    """Counts finished episodes for a `ProgressCallback`, which hears the real total first, so
    that a bar never shows 0/?."""

    def __init__(self, progress: ProgressCallback | None, total: int):
        self.progress, self.total, self.finished = progress, total, 0
        if progress is not None:
            progress(0, total)

    def __call__(self, _: EpisodeResult) -> None:
        self.finished += 1
        if self.progress is not None:
            self.progress(self.finished, self.total)


def evaluate(
    agent: Agent,
    game_paths: Sequence[str | os.PathLike],
    *,
    seeds: Sequence[int] = (0,),
    episodes: int | None = None,
    workers: int | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    history_length: int = DEFAULT_HISTORY_LENGTH,
    batch_size: int | None = None,
    memo: bool = True,
    progress: ProgressCallback | None = None,
    on_seed_done: Callable[[SeedEvaluation], None] | None = None,
    on_turn: TurnCallback | None = None,
    on_phase: PhaseCallback | None = None,
) -> list[SeedEvaluation]:
    """Play the selected games once per seed; one `SeedEvaluation` per seed, in order.

    `episodes` picks how many games per seed (see `select_games`); `batch_size` caps how many
    games are live at once (default: all of them); `workers` is the engine's worker processes.
    `on_seed_done` sees each seed's result as soon as it is complete (to record it at once).
    Progress: `progress` counts episodes (the total first), `on_turn` the turns of the batch
    being played, and `on_phase` names the engine's start before it happens.
    """
    if not seeds:
        raise InvalidInput("at least one evaluation seed is needed")
    games = select_games(game_paths, episodes)
    chunk = max(1, batch_size or len(games))
    count = _EpisodeCounter(progress, len(games) * len(seeds))
    results = []
    walkthrough = bool(getattr(agent, "needs_walkthrough", False))
    with _start_engine(games, workers, max_steps, memo, walkthrough, on_phase) as env:
        for seed in seeds:
            agent.start(int(seed))
            episodes_of_seed = _play_seed(
                env,
                agent,
                games,
                chunk,
                history_length=history_length,
                on_episode_end=count,
                on_turn=on_turn,
                turn_limit=max_steps,
            )
            results.append(SeedEvaluation(seed=int(seed), episodes=episodes_of_seed))
            if on_seed_done is not None:
                on_seed_done(results[-1])
    return results


def _start_engine(
    games: list[str],
    workers: int | None,
    max_steps: int,
    memo: bool,
    walkthrough: bool,
    on_phase: PhaseCallback | None,
) -> Any:
    """The batch engine for the panel's distinct games, its start said first to `on_phase` (it
    is the slow part of a small evaluation)."""
    from ccpo_cli.envs.batch import AlfworldBatchEnv

    if on_phase is not None:
        engines = (
            "in this process" if workers == 0 else f"with {workers or 'the default'} engine workers"
        )
        on_phase(f"starting the game engine {engines} for {len(set(games))} games")
    return AlfworldBatchEnv(
        sorted(set(games)), workers=workers, max_steps=max_steps, memo=memo, walkthrough=walkthrough
    )


def _play_seed(
    env: Any, agent: Agent, games: list[str], chunk: int, **options: Any
) -> list[EpisodeResult]:
    """One seed's episodes, at most `chunk` games live at once; each keeps its panel index."""
    return [
        episode
        for start in range(0, len(games), chunk)
        for episode in play_batch(
            env, agent, games[start : start + chunk], first_index=start, **options
        )
    ]
