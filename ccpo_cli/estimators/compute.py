"""The single entry point: advantages of a whole rollout batch for one arm.

`compute_advantages` is what `ccpo estimate`, the CPU trainer and the verl hook all call. It is
pure numpy and reads time order only from step_index (see layout.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccpo_cli.arms import Arm, check_padding_rule, features_active, fixed_lambda, lambda_reason
from ccpo_cli.errors import InvalidInput
from ccpo_cli.estimator_registry import lookup, register_compute
from ccpo_cli.estimators.batch import RolloutBatch
from ccpo_cli.estimators.blas import one_blas_thread
from ccpo_cli.estimators.ccpo import ccpo_step_term
from ccpo_cli.estimators.combine import combine_terms, normalise_live_steps, step_normalisation_on
from ccpo_cli.estimators.context import trajectory_context
from ccpo_cli.estimators.episode import episode_term
from ccpo_cli.estimators.features import Features, build_features
from ccpo_cli.estimators.gigpo import gigpo_step_term
from ccpo_cli.estimators.layout import Layout, build_layout
from ccpo_cli.estimators.node_values import node_values
from ccpo_cli.estimators.oracle import oracle_step_term
from ccpo_cli.estimators.padding import padding_sources
from ccpo_cli.estimators.penalty import invalid_penalty, penalised_returns, row_scores
from ccpo_cli.estimators.permute import permute_within_tasks
from ccpo_cli.estimators.returns import discounted_return_to_go


@dataclass(frozen=True, eq=False)
class AdvantageResult:
    arm: Arm
    advantages: np.ndarray  # (n, L) float32: final value on every valid token, 0 elsewhere
    per_row: dict[str, np.ndarray]  # each (n,), input row order; padding rows hold 0 / False / NaN
    # under the inert rule and their source row's values under the upstream rule

    @property
    def final(self) -> np.ndarray:
        return self.per_row["final"]

    @property
    def live(self) -> np.ndarray:
        return self.per_row["live"]


def _features_for(batch: RolloutBatch, arm: Arm, layout: Layout) -> Features | None:
    if not features_active(arm):
        return None
    if batch.phi_feats is None:
        reason = (
            "std = local scales by kernel weights"
            if fixed_lambda(arm) == 0.0
            else lambda_reason(arm)
        )
        raise InvalidInput(f"key 'phi_feats': missing, and arm '{arm.name}' needs it ({reason})")
    context = trajectory_context(layout) if arm.phi == "hidden+ctx" and arm.ctx_w > 0 else None
    return build_features(batch.phi_feats[layout.rows], context, arm.phi, arm.ctx_w, arm.whiten)


def _scatter(positions: np.ndarray, values: np.ndarray, n_rows: int, fill, dtype) -> np.ndarray:
    """Values of canonical entries placed at their batch positions; rows with none get `fill`."""
    out = np.full((n_rows,) + values.shape[1:], fill, dtype=dtype)
    out[positions] = values
    return out


def padding_rule(arm: Arm, padding: str | None = None) -> str:
    """The padding rule in force: `padding` when given, else the arm's."""
    rule = padding if padding is not None else arm.padding
    check_padding_rule(rule, arm.estimator)
    return rule


@dataclass(frozen=True, eq=False)
class TermInputs:
    """What every estimator's terms are computed from, in canonical layout order (layout.py).

    `scores` and `returns` are per canonical row, (n,); `population` lists the canonical rows
    whose terms are wanted, a row once per occurrence in the trained batch (its padding copies
    repeat it under the upstream rule), and every group statistic counts each entry.
    """

    batch: RolloutBatch
    layout: Layout
    valid: np.ndarray  # (n,) bool: is_action_valid
    scores: np.ndarray  # (n,) float32: the row scores σ (§2.2)
    returns: np.ndarray  # (n,) float32: the penalised returns G (§2.2)
    population: np.ndarray  # (m,) int64 canonical rows, m >= n under the upstream rule


@dataclass(frozen=True, eq=False)
class Terms:
    """An estimator's per-row terms, each (m,) over `TermInputs.population`."""

    episode: np.ndarray  # A^EP
    step: np.ndarray  # the step term before the step_permute control (0 without one)
    live: np.ndarray  # bool: the row has a step term
    extra: dict[str, np.ndarray]  # the estimator's own diagnostic columns, in output order


@register_compute("grpo")
def grpo_terms(arm: Arm, inputs: TermInputs) -> Terms:
    """The episode term alone (§3): no step term, no live row."""
    population, layout = inputs.population, inputs.layout
    episode = episode_term(
        inputs.scores[population], layout.task[population], layout.n_tasks, arm.adv_mode
    )
    return Terms(
        episode=episode,
        step=np.zeros(population.size, dtype=np.float32),
        live=np.zeros(population.size, dtype=bool),
        extra={},
    )


@register_compute("gigpo")
def gigpo_terms(arm: Arm, inputs: TermInputs) -> Terms:
    """The episode term and the anchor-state step term (§4); live rows share their state."""
    population, layout = inputs.population, inputs.layout
    episode = episode_term(
        inputs.scores[population], layout.task[population], layout.n_tasks, arm.adv_mode
    )
    node = layout.node[population]
    step = gigpo_step_term(inputs.returns[population], node, layout.n_nodes, arm.adv_mode).astype(
        np.float32
    )
    live = np.bincount(node, minlength=layout.n_nodes)[node] > 1
    if arm.step_oracle:  # the ceiling (§4.2): the plan's marks instead of the returns
        if inputs.batch.plan_progress is None:
            raise InvalidInput(
                f"key 'plan_progress': missing, and arm '{arm.name}' needs it (step_oracle = 1: "
                "the rollouts must follow the games' plans)"
            )
        progress = inputs.batch.plan_progress[layout.rows][population]
        step, live = oracle_step_term(progress, layout.task[population], layout.n_tasks)
    return Terms(episode=episode, step=step, live=live, extra={})


@register_compute("ccpo")
def ccpo_terms(arm: Arm, inputs: TermInputs) -> Terms:
    """The episode term and the leave-one-trajectory-out step term (§5), normalised per task
    when the arm says so; the population is the real rows (no upstream rule)."""
    batch, layout, valid = inputs.batch, inputs.layout, inputs.valid
    rows = layout.rows
    episode = episode_term(inputs.scores, layout.task, layout.n_tasks, arm.adv_mode)
    needs_values = arm.target == "nextnode" or arm.edge_w > 0
    values = (
        node_values(layout, batch.episode_reward[rows], arm.gamma, arm.success_reward)
        if needs_values
        else None
    )
    if arm.target == "nextnode":
        assert values is not None  # needs_values holds for the nextnode target
        targets = values.successor - invalid_penalty(valid, arm.invalid_penalty).astype(np.float64)
    else:
        targets = inputs.returns.astype(np.float64)
    with one_blas_thread():
        result = ccpo_step_term(arm, layout, targets, values, _features_for(batch, arm, layout))
    step = result.raw
    if step_normalisation_on(arm):
        step = normalise_live_steps(step, result.live, layout.task, layout.n_tasks)
    extra = {
        "step_raw": result.raw.astype(np.float64),
        "cc_term": result.cc_term,
        "edge_term": result.edge_term,
        "target": result.target,
        "baseline": result.baseline,
        "uniform_baseline": result.uniform_baseline,
        "kernel_baseline": result.kernel_baseline,
        "lam": result.lam,
        "n_traj": result.n_traj,
        "level": result.level,
    }
    return Terms(episode=episode, step=step, live=result.live, extra=extra)


def _per_row(
    canonical: dict[str, np.ndarray], positions: np.ndarray, n_rows: int
) -> dict[str, np.ndarray]:
    """Each canonical entry at its batch positions; a row it does not cover holds the key's
    fill: not live, no trajectories, level -1, NaN for the diagnostic baselines and targets,
    else 0."""
    per_row: dict[str, np.ndarray] = {}
    for key, values_in_order in canonical.items():
        if key == "live":
            per_row[key] = _scatter(positions, values_in_order, n_rows, fill=False, dtype=bool)
        elif key in ("n_traj",):
            per_row[key] = _scatter(positions, values_in_order, n_rows, fill=0, dtype=np.int64)
        elif key == "level":
            per_row[key] = _scatter(positions, values_in_order, n_rows, fill=-1, dtype=np.int64)
        elif key == "final":
            per_row[key] = _scatter(positions, values_in_order, n_rows, fill=0.0, dtype=np.float32)
        else:
            fill = (
                np.nan
                if key in ("target", "baseline", "uniform_baseline", "kernel_baseline", "lam")
                else 0.0
            )
            per_row[key] = _scatter(
                positions, values_in_order.astype(np.float64), n_rows, fill=fill, dtype=np.float64
            )
    return per_row


def compute_advantages(
    batch: RolloutBatch, arm: Arm, padding: str | None = None
) -> AdvantageResult:
    """Per-row and per-token advantages of `batch` under `arm`, rows in the batch's order.

    `padding` (`inert` or `upstream`, see padding.py) overrides the arm's padding rule.
    """
    rule = padding_rule(arm, padding)
    layout = build_layout(batch)
    rows = layout.rows
    n_rows = batch.n_rows
    valid = batch.is_action_valid[rows]

    scores = row_scores(batch.episode_reward[rows], valid, arm.invalid_penalty)
    returns = penalised_returns(
        discounted_return_to_go(batch.env_reward[rows], layout, arm.gamma),
        valid,
        arm.invalid_penalty,
    )
    pad_rows, population = np.zeros(0, dtype=np.int64), np.arange(layout.n, dtype=np.int64)
    if rule == "upstream":
        pad_rows, sources = padding_sources(batch, layout)
        population = np.concatenate([population, sources])
    canonical: dict[str, np.ndarray] = {
        "episode_term": np.zeros(0),  # filled below; first, to keep the output's key order
        "score": scores.astype(np.float64)[population],
        "return_to_go": returns.astype(np.float64)[population],
    }

    terms = lookup(arm.estimator).compute(
        arm, TermInputs(batch, layout, valid, scores, returns, population)
    )
    canonical.update(terms.extra)
    step, live = terms.step, terms.live
    if arm.step_permute:
        step = permute_within_tasks(step, live, layout.task[population])
    final = combine_terms(terms.episode, step, arm)
    canonical.update(
        episode_term=terms.episode, step_term=step.astype(np.float64), final=final, live=live
    )
    # Canonical entries go back to their batch positions: real rows, then any counted copies.
    positions = np.concatenate([rows, pad_rows])

    per_row = _per_row(canonical, positions, n_rows)
    advantages = (per_row["final"][:, None] * batch.response_mask).astype(np.float32)
    return AdvantageResult(arm=arm, advantages=advantages, per_row=per_row)


# The outputs that must be finite in every row. The diagnostic columns (target, baselines, lam)
# hold NaN by design in rows they do not apply to.
FINITE_OUTPUTS = ("final", "episode_term", "step_term")


def non_finite_output(result: AdvantageResult) -> str | None:
    """Where the first non-finite value of a result is (`final, row 3 = nan`), or None."""
    checks = [("advantages", result.advantages)] + [
        (key, result.per_row[key]) for key in FINITE_OUTPUTS if key in result.per_row
    ]
    for name, values in checks:
        bad = np.argwhere(~np.isfinite(values))
        if bad.size:
            row = int(bad[0][0])
            return f"{name}, row {row} = {values[tuple(bad[0])]!r}"
    return None


def require_finite(result: AdvantageResult, source: str) -> AdvantageResult:
    """`result`, or InvalidInput when an advantage is not finite: the input or the flags overflow."""
    where = non_finite_output(result)
    if where is not None:
        raise InvalidInput(
            f"{source}: arm '{result.arm.name}' gives a non-finite output ({where}); "
            "the batch's values or the arm's flags overflow"
        )
    return result


__all__ = ["AdvantageResult", "compute_advantages", "non_finite_output", "require_finite"]
