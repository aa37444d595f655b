"""The estimator table: every advantage estimator ccpo implements, registered once.

Like verl's `core_algos.register_adv_est`, one table names each estimator (the value of the arm
flag `estimator`) and says what it is: its family (the method a card describes), whether it has
a step term and whether that term groups rows by anchor state (task, `anchor_obs`), whether it
can read the frozen reference features `phi_feats`, whether verl-agent ships its own
implementation (which the `padding = upstream` rule reproduces), and which arm flags it reads.
The arms (flag choices, inert flags, the padding rule), the estimator entry point and the cards
read these entries; nothing else lists the estimators.

This module sits in the arms layer, above the estimators, because `arms.py` reads it. The
compute function of each entry therefore lives with the estimators: `estimators/compute.py`
attaches one per name with `register_compute`, and `Estimator.compute` returns it once that
module is imported (as `compute_advantages` always has it).

Shapes, as the compute functions see them (docs/estimators.md §1, §6): with n rows, one per
(trajectory, turn) of the batch, every term is per row, a vector (n,) in the canonical layout
order (layout.py); padding copies counted under the upstream rule add rows to that population.
The trainer's advantage is token-level, (n, L) for L response tokens, each valid token of a row
carrying the row's final value; `compute_advantages` builds it from the per-row terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Estimator:
    name: str  # the arm flag `estimator`
    family: str  # the method family whose paragraph a card prints (papers.yaml `methods`)
    title: str  # the method's full name on a card
    short: str  # its short name on a card
    step_level: bool  # has a step term beside the episode term
    anchor_state: bool  # the step term groups rows by (task, anchor_obs)
    features: bool  # may read phi_feats (and then only when the flags let them matter)
    upstream: bool  # verl-agent has its own implementation, which `padding = upstream` reproduces
    # The arm flags whose values it reads; None: every flag. The others are inert, for `unread`.
    reads: tuple[str, ...] | None
    unread: str  # why a flag it does not read cannot change its output
    paragraph: str  # what a card says of the method
    # Its step term can be replaced by the plan-progress oracle (the arm flag `step_oracle`, the
    # ceiling of docs/estimators.md §4.2).
    oracle: bool = False

    @property
    def compute(self) -> Callable[..., Any]:
        """The per-row terms function registered for this estimator (see `register_compute`)."""
        try:
            return _COMPUTE[self.name]
        except KeyError:
            raise LookupError(
                f"estimator {self.name!r} has no compute function registered; import "
                "ccpo_cli.estimators first"
            ) from None


_EPISODE_READS = ("estimator", "adv_mode", "invalid_penalty", "ep_w", "padding")

# In the order the arm flag lists its choices.
ESTIMATORS: tuple[Estimator, ...] = (
    Estimator(
        name="grpo",
        family="grpo",
        title="GRPO (Group Relative Policy Optimization)",
        short="GRPO",
        step_level=False,
        anchor_state=False,
        features=False,
        upstream=True,
        reads=_EPISODE_READS,
        unread="episode term only (no returns, no step term)",
        paragraph=(
            "GRPO gives every turn of a trajectory the same advantage: the episode's return normalised "
            "against the other rollouts of the same task. It is the critic-free baseline that the "
            "step-level estimators build on."
        ),
    ),
    Estimator(
        name="gigpo",
        family="gigpo",
        title="GiGPO (Group-in-Group Policy Optimization)",
        short="GiGPO",
        step_level=True,
        anchor_state=True,
        features=False,
        upstream=True,
        reads=_EPISODE_READS + ("gamma", "step_advantage_w", "step_permute", "step_oracle"),
        unread="CCPO-only flag",
        oracle=True,
        paragraph=(
            "GiGPO adds a step-level advantage to GRPO's episode-level one: turns taken from the same "
            "observation within a task's group of rollouts (anchor states) are compared with each other, "
            "so individual actions receive credit without a learned critic."
        ),
    ),
    Estimator(
        name="ccpo",
        family="ccpo",
        title="CCPO (Context-Conditioned Policy Optimization)",
        short="CCPO",
        step_level=True,
        anchor_state=True,
        features=True,
        upstream=False,
        reads=None,
        unread="",
        paragraph=(
            "CCPO targets credit assignment in multi-turn agent RL. Methods in the GRPO family split the "
            "advantage into an episode term and a step term. CCPO keeps the episode term untouched and "
            "replaces only the step term with a context-conditioned, uncertainty-shrunk leave-one-out "
            "baseline: turns are bucketed by (task, observation), siblings in a bucket are weighted by "
            "their distance in frozen reference-policy features, and a shrinkage factor pulls the "
            "baseline back toward the uniform one wherever the two disagree by no more than their "
            "sampling noise. A head-to-head against the baseline arm therefore isolates the estimator "
            "and nothing else."
        ),
    ),
)

ESTIMATOR_NAMES: tuple[str, ...] = tuple(entry.name for entry in ESTIMATORS)
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(entry.family for entry in ESTIMATORS))
# The family of the leave-one-out, feature-weighted step term: the one whose flags a card
# describes one by one.
CCPO_FAMILY = "ccpo"
# The family a card's claim is set against: the published effect is GiGPO's or CCPO's over GRPO.
GRPO_FAMILY = "grpo"
_BY_NAME = {entry.name: entry for entry in ESTIMATORS}
_COMPUTE: dict[str, Callable[..., Any]] = {}


def lookup(name: str) -> Estimator:
    """The table's entry for `name`; KeyError when ccpo implements no such estimator."""
    return _BY_NAME[name]


def of_family(family: str) -> Estimator | None:
    """The first entry of `family`, None for a family ccpo does not implement."""
    return next((entry for entry in ESTIMATORS if entry.family == family), None)


def upstream_names() -> tuple[str, ...]:
    """The estimators verl-agent implements itself, in table order."""
    return tuple(entry.name for entry in ESTIMATORS if entry.upstream)


def register_compute(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach the per-row terms function of the registered estimator `name` (once per name)."""
    if name not in _BY_NAME:
        raise LookupError(f"{name!r} is not in the estimator table")

    def attach(function: Callable[..., Any]) -> Callable[..., Any]:
        if _COMPUTE.get(name, function) is not function:
            raise LookupError(f"estimator {name!r} already has a compute function")
        _COMPUTE[name] = function
        return function

    return attach


__all__ = [
    "CCPO_FAMILY",
    "ESTIMATORS",
    "ESTIMATOR_NAMES",
    "FAMILIES",
    "GRPO_FAMILY",
    "Estimator",
    "lookup",
    "of_family",
    "register_compute",
    "upstream_names",
]
