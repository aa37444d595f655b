"""The local trainer's hyper-parameters: one typed, frozen dataclass, recorded as the run's config.

Read top to bottom it is the whole recipe of a local run; the PPO update's own settings sit in
`UpdateConfig` below (applied in ppo.py). Nothing here imports torch, so a run's recipe can be
built, checked and printed (a dry run, a matrix plan) where the 'local' extra is not installed. `train_arm` takes a `TrainConfig`, built by the caller (the CLI's
`LocalTrainRequest`, the matrix, scripts, tests).

Each field also says what a resume may do with it (`RESUME_RULE` metadata), the one place that
decides it:
- `protocol`: what the run measures (the games, the group, the turn limit, the evaluation, the
  update, the seed). A resume must keep it, or the run would mix two experiments under one name.
- `grow`: the number of steps. A resume may extend it, never shorten it (a finished 4-step run
  resumed with 2 steps would be recorded as "4/2").
- `free`: how the run is executed (workers, threads, batch dumps, the time budget). A resume may
  change it; the change is recorded with the step it took effect at.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.task_types import ROOMS
from ccpo_cli.vocabulary import EVAL_TEMPERATURE

PROTOCOL, GROW, FREE = "protocol", "grow", "free"


def default_workers() -> int:
    """Rollout worker processes: one per core, at most two (the testbed's 2-core machine)."""
    return max(1, min(2, os.cpu_count() or 1))


@dataclass(frozen=True)
class UpdateConfig:
    """The PPO update's settings (ppo.py applies them); here so that a config needs no torch."""

    # Measured on this testbed (return-hard, seed 0, 36 held-out games): the prototype's
    # lr 3e-2 / entropy 1e-3 peaked near 60 % and then collapsed (entropy 0.08, held-out
    # 33-44 %); lr 1e-2 / entropy 1e-2 reached 72-92 % by step 20-40 with entropy ~0.6.
    learning_rate: float = 1e-2
    clip_ratio: float = 0.2
    kl_coef: float = 0.01
    entropy_coef: float = 1e-2
    epochs: int = 2
    max_grad_norm: float = 1.0

    def as_dict(self) -> dict:
        return asdict(self)


def _setting(
    default: Any = dataclasses.MISSING, *, resume: str, factory: Any = dataclasses.MISSING
) -> Any:
    return field(default=default, default_factory=factory, metadata={"resume": resume})


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a local training run (recorded as the run's config)."""

    seed: int = _setting(0, resume=PROTOCOL)
    steps: int = _setting(200, resume=GROW)
    tasks: int = _setting(8, resume=PROTOCOL)
    group: int = _setting(8, resume=PROTOCOL)
    max_steps: int = _setting(50, resume=PROTOCOL)
    temperature: float = _setting(1.0, resume=PROTOCOL)
    eval_every: int = _setting(10, resume=PROTOCOL)
    # First evaluated step; later evaluations every `eval_every` steps from it. 0 includes the
    # untrained policy; a matrix starts at its window, since earlier evaluations are not compared.
    eval_from: int = _setting(0, resume=PROTOCOL)
    # None: the whole held-out panel; N: a fixed, type-balanced subset of N panel games.
    eval_games: int | None = _setting(None, resume=PROTOCOL)
    # Game folders (ALFWorld json_2.1.1 layout) instead of the shipped pool / panel.
    train_games_dir: str | None = _setting(None, resume=PROTOCOL)
    eval_games_dir: str | None = _setting(None, resume=PROTOCOL)
    # Room size of the shipped sets played when no folder is given: "small" (the pool and panel
    # of configs/games/) or "large", the search-sized rooms (configs/games/large-*-manifest.json).
    room: str = _setting("small", resume=PROTOCOL)
    eval_episodes: int = _setting(1, resume=PROTOCOL)
    eval_temperature: float = _setting(EVAL_TEMPERATURE, resume=PROTOCOL)
    eval_seed: int = _setting(0, resume=PROTOCOL)
    eval_max_steps: int = _setting(50, resume=PROTOCOL)
    workers: int = _setting(resume=FREE, factory=default_workers)
    torch_threads: int = _setting(1, resume=FREE)
    update: UpdateConfig = _setting(resume=PROTOCOL, factory=UpdateConfig)
    model: dict = _setting(
        resume=PROTOCOL, factory=lambda: {"dim": 32, "hidden": 64, "init_std": 0.3}
    )
    dump_batches: bool = _setting(False, resume=FREE)
    # Stop once this much training wall time (evaluation excluded) has passed.
    time_budget_s: float | None = _setting(None, resume=FREE)
    # A checkpoint of another run with this seed to fork from (a matrix's shared warm start):
    # its weights, optimizer state and step carry over, so the run continues that one's history.
    start_from: str | None = _setting(None, resume=PROTOCOL)
    # Training-noise replicate (an A/A control's second run, docs/local-backend.md). 0: the
    # training rollouts' sampling numbers come from (seed, step, task, episode), as always. K > 0:
    # every step after the run's own start (after the start checkpoint's step, or after step 1
    # without one, so the step-1 rollouts still pair) draws from (seed, step, task, episode, K)
    # instead; the games of each step stay those of stream 0. Not an arm flag: the arm's
    # fingerprint is unchanged, and the run's config records it.
    rollout_stream: int = _setting(0, resume=PROTOCOL)
    # The matrix design this run belongs to (configs/designs/<name>.yaml) and the first step of
    # the window the matrix compares; None outside a matrix. A label and a reading rule, not a
    # training setting, recorded so that every run says which design and window produced it.
    design: str | None = _setting(None, resume=PROTOCOL)
    window_start: int | None = _setting(None, resume=PROTOCOL)

    def __post_init__(self) -> None:
        if self.room not in ROOMS:
            raise InvalidInput(f"room {self.room!r} is not one of {', '.join(ROOMS)}")

    def evaluates_after(self, step: int, *, last: bool) -> bool:
        """Whether training step `step` (1-based) is followed by an evaluation: every `eval_every`
        steps from `eval_from`, and always after the run's last step (`last`)."""
        return bool(self.eval_every) and (
            last or (step >= self.eval_from and (step - self.eval_from) % self.eval_every == 0)
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, recorded: Mapping[str, Any]) -> TrainConfig:
        """The config a run recorded (`as_dict()` form, e.g. config.json's `train`); fields it
        does not hold (an older ccpo wrote it) keep their defaults."""
        known = {spec.name for spec in dataclasses.fields(cls)}
        values = {key: value for key, value in recorded.items() if key in known}
        if isinstance(values.get("update"), Mapping):
            update_fields = {spec.name for spec in dataclasses.fields(UpdateConfig)}
            values["update"] = UpdateConfig(
                **{k: v for k, v in values["update"].items() if k in update_fields}
            )
        elif "update" in values:
            del values["update"]
        return cls(**values)


RESUME_RULE: dict[str, str] = {
    spec.name: spec.metadata["resume"] for spec in dataclasses.fields(TrainConfig)
}


def resume_base(recorded: Mapping[str, Any]) -> TrainConfig:
    """What a resume's options mean when left out: the recorded value of everything the run
    measures and of its length, the trainer's default for how it is executed (a time budget the
    run already spent is not carried over, nor a worker count of another machine)."""
    restored = TrainConfig.from_record(recorded)
    fresh = TrainConfig()
    return dataclasses.replace(
        restored,
        **{name: getattr(fresh, name) for name, rule in RESUME_RULE.items() if rule == FREE},
    )


@dataclass(frozen=True)
class ResumeCheck:
    """How a resume's config differs from the recorded one, by rule."""

    refused: tuple[str, ...]  # one phrase per difference, e.g. "eval_games: 8 recorded, 16 now"
    allowed: dict[str, dict[str, Any]]  # field -> {"from": recorded, "to": new}
    not_recorded: tuple[str, ...]  # fields the record does not hold (an older ccpo wrote it)


def _leaves(value: Any, prefix: str) -> dict[str, Any]:
    """A nested config value as {"update.learning_rate": 0.01, ...}; other values as they are."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key in sorted(value):
            flat.update(_leaves(value[key], f"{prefix}.{key}"))
        return flat
    return {prefix: value}


def resume_check(
    recorded: Mapping[str, Any], config: TrainConfig, recorded_total_steps: int | None = None
) -> ResumeCheck:
    """Compare a resume's `config` with the run's recorded config (`runs.config["train"]`).

    `recorded_total_steps` (the runs table's total, which a time budget may have cut) is what
    `steps` may not go below; without it, the recorded `steps`."""
    refused: list[str] = []
    allowed: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    new = config.as_dict()
    for name, rule in RESUME_RULE.items():
        if name not in recorded:
            missing.append(name)
            continue
        before, after = recorded[name], new[name]
        if rule == GROW:
            floor = recorded_total_steps if recorded_total_steps is not None else before
            if after < floor:
                refused.append(
                    f"{name}: {floor} recorded, {after} now (a resume may add steps, never remove them)"
                )
            elif after != before:
                allowed[name] = {"from": before, "to": after}
        elif rule == FREE:
            if after != before:
                allowed[name] = {"from": before, "to": after}
        else:
            old_leaves, new_leaves = _leaves(before, name), _leaves(after, name)
            for key in sorted(set(old_leaves) | set(new_leaves)):
                if old_leaves.get(key, "not recorded") != new_leaves.get(key, "not recorded"):
                    refused.append(
                        f"{key}: {old_leaves.get(key, 'not recorded')!r} recorded, "
                        f"{new_leaves.get(key, 'not given')!r} now"
                    )
    return ResumeCheck(tuple(refused), allowed, tuple(missing))
