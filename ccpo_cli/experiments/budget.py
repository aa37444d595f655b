"""What a matrix costs before it starts (`ccpo matrix --plan`): the paired seeds a comparison
needs for a given power at an effect and sd, the CPU-minutes they take in a design, and the wall
time on a number of cores, here or on Ray.

The seeds come from the power of the paired t (report/power.py, `paired_seeds_needed`: the
smallest n whose two-sided test at α reaches the power at effect/sd), the one formula every
pre-registration's budget is stated with. Every compared pair of arms is tested on the same
seeds, so a matrix needs the most any of its comparisons needs. A seed's block costs the shared
warm-up once and one fork per arm; the costs are the design's measured ones
(`Design.measured`) unless given. The wall time assumes the cores are the matrix's alone: here,
blocks run one at a time and a run keeps `workers` rollout workers busy; on Ray, blocks run side
by side, one per `workers` cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccpo_cli.errors import UsageError

if TYPE_CHECKING:
    from ccpo_cli.experiments.designs import Design


@dataclass(frozen=True)
class MatrixCost:
    """What one seed's block of a design costs: the warm-up once, each arm's fork after it."""

    warmup_cpu_minutes: float
    fork_cpu_minutes: float
    source: str

    def block(self, arms: int) -> float:
        return self.warmup_cpu_minutes + arms * self.fork_cpu_minutes


def _check_request(
    effect: float, sd: float, alpha: float, power: float, cores: int, workers: int
) -> None:
    """UsageError for an effect or sd that is not positive, a level outside (0, 1), or no cores."""
    if not effect > 0:
        raise UsageError(f"--effect must be a positive number of points, got {effect}")
    if not sd > 0:
        raise UsageError(f"--sd must be a positive number of points, got {sd}")
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise UsageError("--alpha and --power must lie between 0 and 1")
    if cores < 1 or workers < 1:
        raise UsageError("--cores and --workers must be whole numbers >= 1")


def _wall_minutes(
    pairs: int, block: float, cores: int, workers: int, ray: bool
) -> tuple[int, float]:
    """(blocks side by side, wall minutes): Ray runs as many blocks at once as the cores hold
    workers; here the blocks run one by one, each on its workers."""
    if ray:
        side_by_side = max(1, cores // workers)
        return side_by_side, math.ceil(pairs / side_by_side) * block / workers
    return 1, pairs * block / min(cores, workers)


def budget_plan(
    *,
    design: str,
    arms: list[str],
    comparisons: list[tuple[str, str]],
    effect: float,
    sd: float,
    sd_source: str,
    cost: MatrixCost,
    alpha: float,
    power: float,
    cores: int,
    workers: int,
    ray: bool,
) -> dict[str, Any]:
    """The plan `ccpo matrix --plan` prints (UsageError for an impossible request)."""
    from ccpo_cli.report.power import paired_power, paired_seeds_needed

    _check_request(effect, sd, alpha, power, cores, workers)
    pairs = paired_seeds_needed(effect, sd, alpha=alpha, power=power)
    if pairs is None:
        raise UsageError(f"effect {effect} with sd {sd} needs more than 10000 pairs")
    block = cost.block(len(arms))
    cpu_minutes = pairs * block
    side_by_side, wall = _wall_minutes(pairs, block, cores, workers, ray)
    return {
        "design": design,
        "arms": arms,
        "comparisons": [f"{a} - {b}" for a, b in comparisons],
        "effect": effect,
        "sd": sd,
        "sd_source": sd_source,
        "effect_to_sd": effect / sd,
        "alpha": alpha,
        "power": power,
        "pairs": pairs,
        "power_at_pairs": paired_power(effect, sd, pairs, alpha),
        "cost_source": cost.source,
        "warmup_cpu_minutes": cost.warmup_cpu_minutes,
        "fork_cpu_minutes": cost.fork_cpu_minutes,
        "block_cpu_minutes": block,
        "cpu_minutes": cpu_minutes,
        "cores": cores,
        "workers": workers,
        "executor": "ray" if ray else "local",
        "blocks_side_by_side": side_by_side,
        "wall_minutes": wall,
    }


def plan_lines(plan: dict[str, Any]) -> list[str]:
    """The plan as a few lines a researcher reads before starting."""
    return [
        f"design {plan['design']}; arms {', '.join(plan['arms'])}; "
        f"{len(plan['comparisons'])} comparison(s), each on the same seeds",
        f"effect {plan['effect']:g} points, sd {plan['sd']:g} ({plan['sd_source']}): "
        f"effect/sd {plan['effect_to_sd']:.2f}",
        f"pairs: {plan['pairs']} for {plan['power']:.0%} power at α = {plan['alpha']:g} "
        f"(two-sided paired t; power at {plan['pairs']} pairs {plan['power_at_pairs']:.3f})",
        f"CPU: {plan['block_cpu_minutes']:.2f} CPU-min per seed (warm-up "
        f"{plan['warmup_cpu_minutes']:.2f} + {len(plan['arms'])} × {plan['fork_cpu_minutes']:.2f}; "
        f"{plan['cost_source']}), {plan['cpu_minutes']:.0f} CPU-min in all",
        f"wall: about {plan['wall_minutes']:.0f} min on {plan['cores']} core(s), {plan['executor']}"
        f" ({plan['blocks_side_by_side']} block(s) side by side, {plan['workers']} worker(s) per run;"
        " the cores free for the matrix)",
    ]


def matrix_cost(testbed: Design, cost_from: str | Path | None) -> MatrixCost:
    """The warm-up and fork CPU-minutes: measured by the records in `cost_from`, or the design's."""
    if cost_from is not None:
        from ccpo_cli.experiments.records import measured_cost

        return measured_cost(cost_from)
    measured = design_measured(testbed)
    return MatrixCost(
        float(measured["warmup_cpu_minutes"]),
        float(measured["fork_cpu_minutes"]),
        str(measured.get("source", "the design's measured cost")),
    )


def design_measured(testbed: Design) -> dict[str, Any]:
    if not testbed.measured:
        raise UsageError(
            f"design {testbed.name!r} has no measured sd and cost: give --sd and --cost-from DIR"
        )
    return testbed.measured


def plan_matrix(
    testbed: Design,
    arms: list[str],
    *,
    effect: float | None,
    sd: float | None,
    cost_from: str | Path | None,
    cores: int | None,
    workers: int | None,
    **settings: Any,
) -> dict[str, Any]:
    """`ccpo matrix --plan`: every pair of `arms` compared, the sd given or the design's; cores
    and workers default to this machine's and the trainer's."""
    import os

    from ccpo_cli.backends.local.config import default_workers

    if effect is None:
        raise UsageError("--plan needs --effect")
    return budget_plan(
        design=testbed.name,
        arms=arms,
        comparisons=[(a, b) for index, a in enumerate(arms) for b in arms[index + 1 :]],
        effect=effect,
        sd=sd if sd is not None else float(design_measured(testbed)["paired_sd"]),
        sd_source="given" if sd is not None else "the design's measured sd",
        cost=matrix_cost(testbed, cost_from),
        cores=cores or (os.cpu_count() or 1),
        workers=workers or default_workers(),
        **settings,
    )
