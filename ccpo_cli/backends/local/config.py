"""The local trainer's hyper-parameters: one typed, frozen dataclass, recorded as the run's config.

Read top to bottom it is the whole recipe of a local run; `train_arm` keywords override fields,
and the PPO update's own settings sit in `UpdateConfig` (ppo.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ccpo_cli.backends.local.ppo import UpdateConfig
from ccpo_cli.backends.local.workers import default_workers


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a local training run (recorded as the run's config)."""

    seed: int = 0
    steps: int = 200
    tasks: int = 8
    group: int = 8
    max_steps: int = 50
    temperature: float = 1.0
    eval_every: int = 10
    # First evaluated step; later evaluations every `eval_every` steps from it. 0 includes the
    # untrained policy; a matrix starts at its window, since earlier evaluations are not compared.
    eval_from: int = 0
    # None: the whole held-out panel; N: a fixed, type-balanced subset of N panel games.
    eval_games: int | None = None
    # Game folders (ALFWorld json_2.1.1 layout) instead of the shipped pool / panel.
    train_games_dir: str | None = None
    eval_games_dir: str | None = None
    eval_episodes: int = 1
    eval_temperature: float = 0.4
    eval_seed: int = 0
    eval_max_steps: int = 50
    workers: int = field(default_factory=default_workers)
    torch_threads: int = 1
    update: UpdateConfig = field(default_factory=UpdateConfig)
    model: dict = field(default_factory=lambda: {"dim": 32, "hidden": 64, "init_std": 0.3})
    dump_batches: bool = False
    # Stop once this much training wall time (evaluation excluded) has passed.
    time_budget_s: float | None = None
    # A checkpoint of another run with this seed to fork from (a matrix's shared warm start):
    # its weights, optimizer state and step carry over, so the run continues that one's history.
    start_from: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
