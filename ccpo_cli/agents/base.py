"""What every agent sees and returns, one turn of a batch of games at a time.

The evaluation loop hands an agent the live turns of all unfinished games at once (so a
language model can generate them in one batch) and sends back each decision's command to the
game. Text policies read `Turn.prompt` (the verl-agent style prompt); policies that score the
admissible commands directly (oracle, random, the local CPU policy) read the other fields.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ccpo_cli.agents.projection import project_action


@dataclass(frozen=True)
class Turn:
    slot: int  # position of the game in the batch
    game_id: str
    step: int  # 0-based index of this turn within the episode
    observation: str
    admissible: tuple[str, ...]
    task: str
    prompt: str
    # every (observation, command) pair of the episode so far, oldest first
    history: tuple[tuple[str, str], ...] = ()
    # the environment's info for this game at this turn (game file, walkthrough, ...)
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    command: str
    is_valid: bool = True
    response: str | None = None  # the raw text of a text policy


class Agent(ABC):
    """A policy over ALFWorld turns. Subclasses implement `act`."""

    name: str = "agent"
    # True when the agent reads `Turn.info["walkthrough"]` (the env then computes plans)
    needs_walkthrough: bool = False

    def start(self, seed: int) -> None:
        """Called before each evaluation seed; stochastic agents reseed here."""

    def start_batch(self, observations: Sequence[str], infos: Sequence[Mapping[str, Any]]) -> None:
        """Called when a batch of games is reset, before its first turn (slot order)."""

    @abstractmethod
    def act(self, turns: Sequence[Turn]) -> list[Decision]:
        """One decision per turn, in the same order."""

    def close(self) -> None:
        """Release models, processes or GPU memory."""


class SlotAgentAdapter(Agent):
    """Runs an agent written against the batch protocol of `ccpo_cli.envs.play`
    (`reset(observations, infos)`, `act(observations, infos) -> list[str]`, one command per slot
    of the batch, ended slots included) inside the turn-based evaluation loop.

    `build(seed)` makes a fresh inner agent for each evaluation seed. Ended slots keep showing
    the inner agent their last observation and info, as `play_episodes` does.
    """

    def __init__(self, name: str, build: Callable[[int], Any], needs_walkthrough: bool = False):
        self.name = name
        self.needs_walkthrough = needs_walkthrough
        self._build = build
        self._inner = build(0)
        self._observations: list[str] = []
        self._infos: list[Mapping[str, Any]] = []

    def start(self, seed: int) -> None:
        self._inner = self._build(seed)

    def start_batch(self, observations: Sequence[str], infos: Sequence[Mapping[str, Any]]) -> None:
        self._observations = list(observations)
        self._infos = list(infos)
        self._inner.reset(list(observations), list(infos))

    def act(self, turns: Sequence[Turn]) -> list[Decision]:
        for turn in turns:
            self._observations[turn.slot] = turn.observation
            self._infos[turn.slot] = turn.info
        commands = self._inner.act(list(self._observations), list(self._infos))
        return [Decision(command=str(commands[turn.slot])) for turn in turns]


class TextPolicyAgent(Agent):
    """A language model answering each prompt in free text, projected to a command."""

    @abstractmethod
    def generate(self, prompts: Sequence[str]) -> list[str]:
        """One sampled response per prompt."""

    def act(self, turns: Sequence[Turn]) -> list[Decision]:
        responses = self.generate([turn.prompt for turn in turns])
        decisions = []
        for response in responses:
            command, is_valid = project_action(response)
            decisions.append(Decision(command=command, is_valid=is_valid, response=response))
        return decisions
