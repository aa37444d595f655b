"""`ccpo eval --agent local --model CHECKPOINT`: the trained local policy as an evaluation agent.

It sees exactly what it saw in training (task sentence, current observation, last two turns,
admissible commands without `help`) and samples at the evaluation temperature. Each slot of a
batch samples from its own generator, seeded from (seed, batch, slot), so a slot's actions do
not depend on which other games are still playing.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ccpo_cli.agents.base import Agent, Decision, Turn
from ccpo_cli.backends.local.features import Featurizer, task_sentence
from ccpo_cli.backends.local.features import Turn as PastTurn
from ccpo_cli.backends.local.policy import CommandScorer, pack
from ccpo_cli.backends.local.workers import candidates_of, sample_index
from ccpo_cli.errors import InvalidInput
from ccpo_cli.vocabulary import EVAL_TEMPERATURE


class LocalPolicyAgent(Agent):
    name = "local"

    def __init__(self, model: CommandScorer, temperature: float = EVAL_TEMPERATURE, seed: int = 0):
        if temperature <= 0:
            raise InvalidInput("the local policy samples: --temperature must be > 0")
        self.model = model.eval()
        self.temperature = temperature
        self.featurizer = Featurizer(hash_bits=int(np.log2(model.config["num_buckets"])))
        self.seed = seed
        self._batches = 0
        self._rngs: dict[int, np.random.Generator] = {}

    def start(self, seed: int) -> None:
        self.seed = seed
        self._batches = 0

    def start_batch(self, observations: Sequence[str], infos: Sequence[Mapping[str, Any]]) -> None:
        self._rngs = {
            slot: np.random.default_rng(
                [self.seed, self._batches, slot, zlib.crc32(str(info.get("game_id", "")).encode())]
            )
            for slot, info in enumerate(infos)
        }
        self._batches += 1

    def act(self, turns: Sequence[Turn]) -> list[Decision]:
        if not turns:
            return []
        candidate_lists = [candidates_of(turn.admissible) or ("look",) for turn in turns]
        features = [
            self.featurizer.featurize(
                task_sentence(turn.task) or turn.task,
                turn.observation,
                [PastTurn(observation, command) for observation, command in turn.history],
                list(candidates),
            )
            for turn, candidates in zip(turns, candidate_lists)
        ]
        with torch.no_grad():
            log_probs = self.model.log_probs(pack(features), temperature=self.temperature).numpy()
        decisions = []
        for row, turn, candidates in zip(log_probs, turns, candidate_lists):
            rng = self._rngs.setdefault(
                turn.slot, np.random.default_rng([self.seed, self._batches, turn.slot])
            )
            decisions.append(
                Decision(command=candidates[sample_index(row[: len(candidates)], rng)])
            )
        return decisions


def make_local_agent(
    model: str | None, *, temperature: float = EVAL_TEMPERATURE, seed: int = 0, **options: Any
) -> LocalPolicyAgent:
    """The registry factory: `model` is a checkpoint file or a run folder (its latest checkpoint)."""
    from ccpo_cli.backends.local.trainer import load_policy

    if not model:
        raise InvalidInput(
            "--agent local needs --model CHECKPOINT (a step-*.pt file or a run folder)"
        )
    if options:
        raise InvalidInput(f"--agent local takes no options {sorted(options)}")
    policy, _ = load_policy(model)
    return LocalPolicyAgent(policy, temperature=temperature, seed=seed)
