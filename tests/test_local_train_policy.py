"""The local policy, its features and the PPO update, without the engine."""

import math
import zlib

import numpy as np
import pytest
import torch

from ccpo_cli.backends.local.features import Featurizer, Turn, task_sentence, tokens
from ccpo_cli.backends.local.policy import build_model, entropy, frozen_copy, pack
from ccpo_cli.backends.local.ppo import (
    UpdateConfig,
    clipped_policy_loss,
    low_variance_kl,
    make_optimizer,
    update,
)

torch.set_num_threads(1)

INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
    "you see a countertop 1, a fridge 1, a microwave 1, and a sinkbasin 1.\n\n"
    "Your task is to: put a cool apple in countertop."
)
CANDIDATES = [
    "go to countertop 1",
    "go to fridge 1",
    "go to microwave 1",
    "go to sinkbasin 1",
    "inventory",
    "look",
]


def _decision(featurizer, candidates=CANDIDATES, history=()):
    return featurizer.featurize(task_sentence(INTRO), INTRO, list(history), candidates)


def test_task_sentence_and_tokens():
    assert task_sentence(INTRO) == "put a cool apple in countertop."
    assert tokens("Go to CounterTop 1.") == ["go", "to", "countertop", "1"]
    assert task_sentence("no task here") == ""


def test_buckets_are_stable_crc32_not_the_salted_builtin_hash():
    featurizer = Featurizer(hash_bits=16)
    assert featurizer.bucket("cand|fridge") == zlib.crc32(b"cand|fridge") & 0xFFFF


def test_cross_features_mark_task_words_and_repeats():
    featurizer = Featurizer()
    fields = dict(
        featurizer.candidate_fields(
            "take apple 1 from countertop 1",
            {"put", "cool", "apple", "countertop"},
            {"apple"},
            ["take apple 1 from countertop 1"],
        )
    )
    assert "1|take" in fields["in_task"] and "4|take" in fields["in_task"]
    assert fields["in_obs"] == ["1|take"]
    assert "same1|take" in fields["repeat"]
    assert "cool|apple" in fields["task_x_word"]


def test_untrained_policy_is_exactly_uniform_and_handles_ragged_candidates():
    featurizer = Featurizer()
    model = build_model(seed=0)
    decisions = [
        _decision(featurizer),
        _decision(featurizer, CANDIDATES[:3], [Turn(INTRO, "look")]),
    ]
    log_probs = model.log_probs(pack(decisions))
    assert log_probs.shape == (2, len(CANDIDATES))
    assert torch.allclose(log_probs[0], torch.full((6,), -math.log(6)))
    assert torch.allclose(log_probs[1, :3], torch.full((3,), -math.log(3)))
    assert torch.isinf(log_probs[1, 3:]).all()
    assert torch.allclose(entropy(log_probs), torch.tensor([math.log(6), math.log(3)]))


def test_same_seed_same_weights_different_seed_different_weights():
    a, b, c = build_model(seed=3), build_model(seed=3), build_model(seed=4)
    assert torch.equal(a.state_bag.weight, b.state_bag.weight)
    assert not torch.equal(a.state_bag.weight, c.state_bag.weight)


def test_state_vector_depends_on_the_state_not_on_the_candidates():
    featurizer = Featurizer()
    model = build_model(seed=0)
    full = model.state_vector(pack([_decision(featurizer)]))
    fewer = model.state_vector(pack([_decision(featurizer, CANDIDATES[:2])]))
    later = model.state_vector(
        pack([_decision(featurizer, history=[Turn(INTRO, "go to fridge 1")])])
    )
    assert torch.equal(full, fewer)
    assert not torch.allclose(full, later)


def test_low_variance_kl_is_zero_at_the_reference_and_positive_away_from_it():
    same = torch.log(torch.tensor([0.2, 0.5]))
    assert torch.allclose(low_variance_kl(same, same), torch.zeros(2))
    assert (low_variance_kl(same, torch.log(torch.tensor([0.4, 0.1]))) > 0).all()


def test_clip_removes_the_gradient_beyond_the_trust_region():
    old = torch.zeros(2)
    new = torch.tensor(
        [0.5, 0.05], requires_grad=True
    )  # ratios e^0.5 (outside 1.2) and e^0.05 (inside)
    loss, clipped = clipped_policy_loss(new, old, torch.ones(2), clip_ratio=0.2)
    loss.sum().backward()
    assert clipped.tolist() == [1.0, 0.0]
    assert new.grad[0] == 0.0 and new.grad[1] < 0.0


def test_update_raises_the_probability_of_advantaged_actions():
    featurizer = Featurizer()
    model = build_model(seed=1)
    reference = frozen_copy(model)
    config = UpdateConfig()
    optimizer = make_optimizer(model, config)
    packed = pack([_decision(featurizer) for _ in range(4)])
    actions = torch.tensor([1, 1, 4, 4])  # fridge good, inventory bad
    advantages = torch.tensor([1.0, 1.0, -1.0, -1.0])
    before = model.log_probs(packed).detach()
    for _ in range(5):
        stats = update(model, reference, optimizer, packed, actions, advantages, config)
    after = model.log_probs(packed).detach()
    assert after[0, 1] > before[0, 1] + 0.1
    assert after[0, 4] < before[0, 4] - 0.1
    assert stats["kl"] > 0.0 and stats["entropy"] < math.log(6)
    # The reference stays the frozen initial copy.
    assert torch.allclose(reference.log_probs(packed), before)
    assert not any(p.requires_grad for p in reference.parameters())


def test_update_with_zero_advantages_keeps_the_uniform_policy():
    featurizer = Featurizer()
    model = build_model(seed=1)
    reference = frozen_copy(model)
    config = UpdateConfig(entropy_coef=0.0)
    packed = pack([_decision(featurizer)])
    update(
        model,
        reference,
        make_optimizer(model, config),
        packed,
        torch.tensor([2]),
        torch.zeros(1),
        config,
    )
    np.testing.assert_allclose(model.log_probs(packed).detach().numpy(), -math.log(6), atol=1e-6)


def test_a_checkpoint_that_cannot_be_written_is_one_clear_error(tmp_path):
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local.trainer import TrainConfig, save_checkpoint
    from ccpo_cli.errors import CcpoError

    blocker = tmp_path / "checkpoints"
    blocker.write_text("a file where the checkpoint folder should be")
    model = build_model(seed=0)
    with pytest.raises(CcpoError, match="could not write checkpoint .*--resume"):
        save_checkpoint(
            blocker / "step-000001.pt",
            model,
            make_optimizer(model, UpdateConfig()),
            1,
            load_arm("grpo"),
            TrainConfig(),
            0.0,
        )
    assert not list(tmp_path.glob("**/*.partial"))
