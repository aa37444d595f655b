"""The local policy: a small torch model that scores the admissible commands of a state.

State bag (task, observation, last two turns) and candidate bag (command n-grams and text-overlap
cross features) are sum-pooled hashed embeddings; a candidate's score is an MLP over
[state; candidate; state*candidate] plus a linear prior per candidate feature. The output layer
and the prior start at zero, so the untrained policy is exactly uniform over the candidates.
The pooled state vector is the state-only part of the network: the frozen initial copy's state
vector is the `phi_feats` row the estimators' feature arms use.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ccpo_cli.backends.local.features import NUM_BUCKETS, DecisionFeatures


@dataclass
class PackedDecisions:
    """Decisions packed for one forward pass; candidates are flattened across decisions."""

    state_ids: torch.Tensor
    state_offsets: torch.Tensor
    state_weights: torch.Tensor
    candidate_ids: torch.Tensor
    candidate_offsets: torch.Tensor
    candidate_weights: torch.Tensor
    candidate_decision: torch.Tensor  # (n_candidates,) which decision each candidate belongs to
    candidate_slot: torch.Tensor  # (n_candidates,) its position in that decision's list
    num_decisions: int
    max_candidates: int

    @property
    def mask(self) -> torch.Tensor:
        mask = torch.zeros(self.num_decisions, self.max_candidates, dtype=torch.bool)
        mask[self.candidate_decision, self.candidate_slot] = True
        return mask


def _concat_bags(ids: list[np.ndarray], weights: list[np.ndarray]) -> tuple[torch.Tensor, ...]:
    lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
    offsets = np.zeros(len(ids), dtype=np.int64)
    if len(ids) > 1:
        offsets[1:] = np.cumsum(lengths)[:-1]
    flat_ids = np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)
    flat_weights = np.concatenate(weights) if weights else np.zeros(0, dtype=np.float32)
    return (
        torch.from_numpy(flat_ids.astype(np.int64, copy=False)),
        torch.from_numpy(offsets),
        torch.from_numpy(flat_weights.astype(np.float32, copy=False)),
    )


def pack(decisions: list[DecisionFeatures]) -> PackedDecisions:
    state_ids, state_offsets, state_weights = _concat_bags(
        [d.state_ids for d in decisions], [d.state_weights for d in decisions]
    )
    cand_ids: list[np.ndarray] = []
    cand_weights: list[np.ndarray] = []
    owner: list[int] = []
    slot: list[int] = []
    for index, decision in enumerate(decisions):
        cand_ids.extend(decision.candidate_ids)
        cand_weights.extend(decision.candidate_weights)
        owner.extend([index] * len(decision.candidate_ids))
        slot.extend(range(len(decision.candidate_ids)))
    candidate_ids, candidate_offsets, candidate_weights = _concat_bags(cand_ids, cand_weights)
    return PackedDecisions(
        state_ids=state_ids,
        state_offsets=state_offsets,
        state_weights=state_weights,
        candidate_ids=candidate_ids,
        candidate_offsets=candidate_offsets,
        candidate_weights=candidate_weights,
        candidate_decision=torch.tensor(owner, dtype=torch.long),
        candidate_slot=torch.tensor(slot, dtype=torch.long),
        num_decisions=len(decisions),
        max_candidates=max((len(d.candidate_ids) for d in decisions), default=0),
    )


class CommandScorer(nn.Module):
    def __init__(
        self, num_buckets: int = NUM_BUCKETS, dim: int = 32, hidden: int = 64, init_std: float = 0.3
    ):
        super().__init__()
        self.config = {
            "num_buckets": num_buckets,
            "dim": dim,
            "hidden": hidden,
            "init_std": init_std,
        }
        self.state_bag = nn.EmbeddingBag(num_buckets, dim, mode="sum")
        self.candidate_bag = nn.EmbeddingBag(num_buckets, dim, mode="sum")
        self.prior_bag = nn.EmbeddingBag(num_buckets, 1, mode="sum")
        self.hidden = nn.Linear(3 * dim, hidden)
        self.out = nn.Linear(hidden, 1)
        nn.init.normal_(self.state_bag.weight, std=init_std)
        nn.init.normal_(self.candidate_bag.weight, std=init_std)
        nn.init.zeros_(self.prior_bag.weight)
        nn.init.zeros_(self.out.weight)
        nn.init.zeros_(self.out.bias)

    def state_vector(self, packed: PackedDecisions) -> torch.Tensor:
        """(n_decisions, dim): the part of the network that depends on the state alone."""
        return self.state_bag(
            packed.state_ids, packed.state_offsets, per_sample_weights=packed.state_weights
        )

    def logits(self, packed: PackedDecisions) -> torch.Tensor:
        """(n_decisions, max_candidates) scores, -inf on padding."""
        state = self.state_vector(packed)[packed.candidate_decision]
        candidate = self.candidate_bag(
            packed.candidate_ids,
            packed.candidate_offsets,
            per_sample_weights=packed.candidate_weights,
        )
        prior = self.prior_bag(
            packed.candidate_ids,
            packed.candidate_offsets,
            per_sample_weights=packed.candidate_weights,
        ).squeeze(-1)
        joint = torch.cat([state, candidate, state * candidate], dim=-1)
        score = self.out(torch.relu(self.hidden(joint))).squeeze(-1) + prior
        table = torch.full(
            (packed.num_decisions, packed.max_candidates), float("-inf"), dtype=score.dtype
        )
        return table.index_put((packed.candidate_decision, packed.candidate_slot), score)

    def log_probs(self, packed: PackedDecisions, temperature: float = 1.0) -> torch.Tensor:
        return torch.log_softmax(self.logits(packed) / temperature, dim=-1)


def frozen_copy(model: CommandScorer) -> CommandScorer:
    """The reference policy: the model as it is now, with gradients off."""
    reference = copy.deepcopy(model)
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    reference.eval()
    return reference


def build_model(seed: int, **config) -> CommandScorer:
    """A freshly initialised policy; the same seed gives the same weights."""
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return CommandScorer(**config)
    finally:
        torch.random.set_rng_state(generator_state)


def entropy(log_probs: torch.Tensor) -> torch.Tensor:
    """Per-decision entropy of a padded log-prob table (-inf on padding)."""
    probs = log_probs.exp()
    return -(
        probs * torch.where(torch.isfinite(log_probs), log_probs, torch.zeros_like(log_probs))
    ).sum(-1)
