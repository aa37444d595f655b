"""The random agent: uniform over the admissible commands (minus `help`), seeded.

Each slot draws from its own generator, seeded from (seed, slot, episode count), so the
actions of a slot do not depend on how many other slots are still playing.
"""

from __future__ import annotations

import random
from typing import Any


class RandomAgent:
    name = "random"

    def __init__(self, seed: int = 0, exclude: tuple[str, ...] = ("help",)):
        self.seed = seed
        self.exclude = frozenset(exclude)
        self._batches = 0
        self._rngs: list[random.Random] = []

    def reset(self, observations: list[str], infos: list[dict[str, Any]]) -> None:
        self._rngs = [
            random.Random(f"{self.seed}/{self._batches}/{slot}") for slot in range(len(infos))
        ]
        self._batches += 1

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        actions = []
        for rng, info in zip(self._rngs, infos):
            commands = [c for c in info["admissible_commands"] if c not in self.exclude]
            actions.append(rng.choice(commands) if commands else "look")
        return actions
