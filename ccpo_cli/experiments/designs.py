"""Matrix designs as named, recorded objects (configs/designs/<name>.yaml).

A design is everything that decides what a matrix's numbers measure, apart from its arms and
seeds: the shared warm-up (K steps, then the arms fork), the run length, the evaluated and
compared steps, the games per step and rollouts per game, the turn limits of training and of
evaluation, the panel (whole, or a fixed subset) and the room size of the shipped games. Each
`ccpo matrix` option of the same name overrides one field (`Design.with_options`), and
every run of a matrix records the design's name and its compared window in its training
configuration (`TrainConfig.design`, `TrainConfig.window_start`).

The designs tried, their controls and what each showed: docs/local-backend.md ("Designs"), the
pre-registrations: docs/testbed-preregistration.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.bounded_yaml import read_yaml_file
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.paths import configs_dir
from ccpo_cli.task_types import ROOMS

DEFAULT_DESIGN = "control"


@dataclass(frozen=True)
class Design:
    """One matrix design. Runs are evaluated every `eval_every` steps from `eval_from` and at
    their last step (`TrainConfig.evaluates_after`); the compared window is `window_start` to
    `steps`."""

    name: str
    description: str
    warm_start: int  # K: shared steps of one arm before the arms fork (0: no warm start)
    steps: int  # training steps of every run, the warm-up's included
    window_start: int  # first step of the compared window
    eval_from: int  # first evaluated step (evaluations before the window only draw the curve)
    eval_every: int = 2  # steps between evaluations from eval_from
    tasks: int = 8  # games per training step
    group: int = 8  # rollouts per game
    turn_limit: int = 50  # turns per training episode
    eval_turn_limit: int = 50  # turns per held-out episode
    eval_games: int | None = None  # None: the whole panel; N: its fixed type-balanced subset
    room: str = "small"  # room size of the shipped pool and panel
    # What the design was measured to cost and how noisy its paired difference is, for
    # `ccpo matrix --plan`: {paired_sd, warmup_cpu_minutes, fork_cpu_minutes, source}. Not a
    # knob: it describes the design's runs, it never changes them, and a design changed by an
    # option has no measurement.
    measured: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        where = f"design {self.name!r}"
        if self.measured is not None:
            numbers = ("paired_sd", "warmup_cpu_minutes", "fork_cpu_minutes")
            if not isinstance(self.measured, dict) or not all(
                isinstance(self.measured.get(key), int | float) and self.measured[key] >= 0
                for key in numbers
            ):
                raise InvalidInput(
                    f"{where}: measured must give {', '.join(numbers)} as numbers >= 0 and a source"
                )
        for name in ("steps", "eval_every", "tasks", "group", "turn_limit", "eval_turn_limit"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"{where}: {name} must be a whole number >= 1, got {value!r}")
        for name in ("warm_start", "window_start", "eval_from"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidInput(f"{where}: {name} must be a whole number >= 0, got {value!r}")
        if self.warm_start >= self.steps:
            raise InvalidInput(
                f"{where}: warm_start ({self.warm_start}) must be below steps ({self.steps}); 0 turns it off"
            )
        if not self.warm_start <= self.window_start <= self.steps:
            raise InvalidInput(
                f"{where}: window_start ({self.window_start}) must lie between the warm start "
                f"({self.warm_start}) and steps ({self.steps})"
            )
        if self.eval_from > self.window_start:
            raise InvalidInput(
                f"{where}: eval_from ({self.eval_from}) must not be after window_start "
                f"({self.window_start}): the window's evaluations would be missing"
            )
        if self.eval_games is not None and (
            not isinstance(self.eval_games, int) or self.eval_games < 1
        ):
            raise InvalidInput(
                f"{where}: eval_games must be a whole number >= 1 or null, got {self.eval_games!r}"
            )
        if self.room not in ROOMS:
            raise InvalidInput(
                f"{where}: room must be one of {', '.join(ROOMS)}, got {self.room!r}"
            )

    @property
    def evaluations(self) -> tuple[int, ...]:
        """The evaluated steps of a compared (forked) run, as the trainer's schedule gives them."""
        first = max(self.eval_from, self.warm_start + 1)
        points = [
            step
            for step in range(first, self.steps + 1)
            if (step - self.eval_from) % self.eval_every == 0
        ]
        return tuple(points if points and points[-1] == self.steps else [*points, self.steps])

    @property
    def compared_evaluations(self) -> tuple[int, ...]:
        return tuple(step for step in self.evaluations if step >= self.window_start)

    def knobs(self) -> dict[str, Any]:
        """Every field but the name and description, as `ccpo designs show` lists them."""
        return {
            spec.name: getattr(self, spec.name)
            for spec in dataclasses.fields(self)
            if spec.name not in ("name", "description", "measured")
        }

    def with_options(self, **given: Any) -> Design:
        """This design with the options a user gave (None: not given) replacing its fields. A
        window start given alone keeps the first evaluation at or before it; a new run length
        moves a window and first evaluation that sat at the old last step with it. A changed
        design is named `NAME+KEY=VALUE,...`, so a run never records a design it did not follow."""
        given = {key: value for key, value in given.items() if value is not None}
        unknown = sorted(set(given) - set(self.knobs()))
        if unknown:
            raise UsageError(f"design options: unknown {', '.join(unknown)}")
        steps = given.get("steps", self.steps)
        shift = steps - self.steps
        warm_start = given.get("warm_start", self.warm_start)
        window = given.get(
            "window_start",
            max(warm_start, self.window_start + shift)
            if self.window_start == self.steps
            else self.window_start,
        )
        eval_from = given.get(
            "eval_from",
            min(max(0, self.eval_from + (shift if self.eval_from == self.steps else 0)), window),
        )
        given.update(window_start=window, eval_from=eval_from)
        try:
            changed = dataclasses.replace(self, **given)
        except InvalidInput as error:
            raise UsageError(
                f"design {self.name!r} with these options: "
                f"{str(error).removeprefix(f'design {self.name!r}: ')}"
            ) from None
        differences = [
            f"{key}={value}" for key, value in changed.knobs().items() if value != self.knobs()[key]
        ]
        return (
            dataclasses.replace(changed, name=f"{self.name}+{','.join(differences)}", measured=None)
            if differences
            else self
        )


def designs_dir() -> Path:
    return configs_dir() / "designs"


def list_designs() -> list[str]:
    return sorted(path.stem for path in designs_dir().glob("*.yaml"))


def load_design(name: str) -> Design:
    """The design `name` from configs/designs (UsageError for an unknown name)."""
    path = designs_dir() / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"unknown design '{name}' (known: {', '.join(list_designs())})")
    document = read_yaml_file(path)
    fields = {spec.name for spec in dataclasses.fields(Design)}
    if not isinstance(document, dict) or set(document) - fields:
        raise InvalidInput(f"{path}: expected a mapping of {', '.join(sorted(fields))}")
    values = dict(document)
    values["name"] = str(values.get("name", name))
    values["description"] = str(values.get("description", ""))
    try:
        return Design(**values)
    except TypeError as error:
        raise InvalidInput(f"{path}: {error}") from None
