"""The policy update: PPO-clip policy gradient plus a low-variance KL penalty to the reference.

The KL term is the "k3" estimator on the sampled action, exp(r) - r - 1 with r = log pi_ref -
log pi, which is non-negative and unbiased for KL(pi || pi_ref); verl calls it `low_var_kl`.
Every decision is one "token", so the token-mean of verl is the mean over decisions.
"""

from __future__ import annotations

import math

import torch

from ccpo_cli.backends.local.config import UpdateConfig
from ccpo_cli.backends.local.policy import CommandScorer, PackedDecisions, entropy
from ccpo_cli.errors import CcpoError


class NonFiniteTraining(CcpoError):
    """A training quantity (advantage, loss, gradient) is NaN or infinite: the update is not applied."""

    def __init__(self, quantity: str, value: float, where: str = ""):
        self.quantity, self.value = quantity, value
        super().__init__(
            f"non-finite {quantity} ({value!r}{', ' + where if where else ''}); it was not applied"
        )


def low_variance_kl(log_probs: torch.Tensor, ref_log_probs: torch.Tensor) -> torch.Tensor:
    log_ratio = torch.clamp(ref_log_probs - log_probs, -20.0, 20.0)
    return torch.clamp(torch.exp(log_ratio) - log_ratio - 1.0, max=10.0)


def clipped_policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    clip_ratio: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-decision PPO-clip loss and whether the clip was active."""
    ratio = torch.exp(log_probs - old_log_probs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio)
    return torch.maximum(unclipped, clipped), (clipped > unclipped).float()


def ppo_loss(
    model: CommandScorer,
    packed: PackedDecisions,
    actions: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    config: UpdateConfig,
) -> tuple[torch.Tensor, dict[str, float]]:
    table = model.log_probs(packed)
    chosen = table.gather(1, actions[:, None]).squeeze(1)
    policy_loss, clipped = clipped_policy_loss(chosen, old_log_probs, advantages, config.clip_ratio)
    kl = low_variance_kl(chosen, ref_log_probs)
    decision_entropy = entropy(table)
    loss = (
        policy_loss.mean()
        + config.kl_coef * kl.mean()
        - config.entropy_coef * decision_entropy.mean()
    )
    stats = {
        "policy_loss": float(policy_loss.detach().mean()),
        "kl": float(kl.detach().mean()),
        "entropy": float(decision_entropy.detach().mean()),
        "clip_fraction": float(clipped.mean()),
    }
    return loss, stats


def chosen_log_probs(
    model: CommandScorer, packed: PackedDecisions, actions: torch.Tensor
) -> torch.Tensor:
    with torch.no_grad():
        return model.log_probs(packed).gather(1, actions[:, None]).squeeze(1)


def update(
    model: CommandScorer,
    reference: CommandScorer,
    optimizer: torch.optim.Optimizer,
    packed: PackedDecisions,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    config: UpdateConfig,
) -> dict[str, float]:
    """Full-batch PPO epochs; the old log-probs are the policy's before the first epoch."""
    old_log_probs = chosen_log_probs(model, packed, actions)
    ref_log_probs = chosen_log_probs(reference, packed, actions)
    stats: dict[str, float] = {}
    model.train()
    for epoch in range(config.epochs):
        optimizer.zero_grad(set_to_none=True)
        loss, stats = ppo_loss(
            model, packed, actions, old_log_probs, ref_log_probs, advantages, config
        )
        if not torch.isfinite(loss):
            raise NonFiniteTraining("loss", float(loss.detach()), f"epoch {epoch + 1}")
        loss.backward()
        # The norm before clipping: a non-finite one would make every clipped gradient NaN.
        stats["grad_norm"] = float(
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        )
        if not math.isfinite(stats["grad_norm"]):
            raise NonFiniteTraining("gradient norm", stats["grad_norm"], f"epoch {epoch + 1}")
        optimizer.step()
    model.eval()
    return stats


def make_optimizer(model: CommandScorer, config: UpdateConfig) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=config.learning_rate)
