"""Play one batch of episodes to the end with an agent, and what each episode came to.

An agent is any object with `reset(observations, infos)` (a new batch of episodes begins) and
`act(observations, infos) -> list[str]` (one command per slot; ended slots are ignored).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ccpo_cli.envs.batch import AlfworldBatchEnv


class Agent(Protocol):
    def reset(self, observations: list[str], infos: list[dict[str, Any]]) -> None: ...

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]: ...


@dataclass
class Episode:
    """One finished episode: success is `won` only; `turns` counts the steps taken."""

    game_id: str
    task_type: str
    game_path: str
    won: bool
    turns: int
    reward: float
    actions: list[str] = field(default_factory=list)


def play_episodes(
    env: AlfworldBatchEnv, agent: Agent, games: Sequence[int | str] | None = None
) -> list[Episode]:
    """Reset `env` on `games` (default: every game once), step until every slot has ended
    (a win or the step limit), and return one `Episode` per slot in slot order."""
    observations, infos = env.reset(games)
    agent.reset(observations, infos)
    actions_taken: list[list[str]] = [[] for _ in infos]
    rewards = [0.0 for _ in infos]
    dones = [False for _ in infos]
    while not all(dones):
        actions = agent.act(observations, infos)
        for slot, action in enumerate(actions):
            if not dones[slot]:
                actions_taken[slot].append(action)
        observations, step_rewards, dones, infos = env.step(actions)
        rewards = [total + reward for total, reward in zip(rewards, step_rewards)]
    return [
        Episode(
            game_id=info["game_id"],
            task_type=info["task_type"],
            game_path=info["game_path"],
            won=bool(info["won"]),
            turns=int(info["step"]),
            reward=reward,
            actions=taken,
        )
        for info, reward, taken in zip(infos, rewards, actions_taken)
    ]
