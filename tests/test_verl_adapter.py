"""DataProto-like batch -> estimator batch -> (batch, response length) advantages, and the wrapped
`compute_advantage`, on worked example 1 of docs/estimators.md §10.1 (plain objects: PyPI verl is
not installed)."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from helpers_verl import EXAMPLE_ONE_EXPECTED, per_row, spec_example_one

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl import setup_hook, worker_env
from ccpo_cli.backends.verl.adapter import (
    SOURCE_ROW_KEY,
    STEP_INDEX_KEY,
    advantage_tensor,
    annotate_rollout_rows,
    estimator_inputs,
)
from ccpo_cli.backends.verl.worker_env import ArmMismatch
from ccpo_cli.errors import InvalidInput

ARMS = sorted(EXAMPLE_ONE_EXPECTED)


@pytest.fixture
def arm_env(monkeypatch):
    def use(name: str, overrides=None, fingerprint=None):
        arm = load_arm(name, overrides)
        spec = worker_env.ArmSpec(name, fingerprint or arm.fingerprint, dict(overrides or {}))
        for key in (worker_env.ARM, worker_env.ARM_FINGERPRINT, worker_env.ARM_SET):
            monkeypatch.delenv(key, raising=False)
        for key, value in spec.to_environ().items():
            monkeypatch.setenv(key, value)
        return arm

    return use


def test_estimator_inputs_follow_the_cli_schema():
    data = spec_example_one()
    inputs = estimator_inputs(data)
    assert list(inputs["traj_uid"]) == ["t1", "t1", "t2", "t2", "t3", "t3"]
    assert inputs["step_index"].tolist() == [0, 1, 0, 1, 0, 1]
    assert inputs["env_reward"].tolist() == [0, 10, 0, 0, 0, 0]
    assert inputs["episode_reward"].tolist() == [10, 10, 0, 0, 0, 0]
    assert inputs["response_mask"].shape == (6, 5) and inputs["response_mask"].sum(1).tolist() == [
        3,
        5,
        1,
        4,
        2,
        5,
    ]
    assert not inputs["is_pad"].any() and "phi_feats" not in inputs
    # Without `response_mask` it is the response part of the attention mask.
    del data.batch["response_mask"]
    assert np.array_equal(estimator_inputs(data)["response_mask"], inputs["response_mask"])


@pytest.mark.parametrize("arm_name", ARMS)
def test_spec_example_one_through_the_adapter(arm_name):
    data = spec_example_one()
    setup_hook.apply_arm(data, load_arm(arm_name))
    mask = data.batch["response_mask"]
    assert (
        data.batch["advantages"].shape == mask.shape
        and data.batch["advantages"].dtype == torch.float32
    )
    np.testing.assert_allclose(
        per_row(data.batch["advantages"], mask), EXAMPLE_ONE_EXPECTED[arm_name], atol=2e-4
    )
    assert torch.equal(data.batch["returns"], data.batch["advantages"])


@pytest.mark.parametrize("arm_name", ["gigpo", "return-hard"])
def test_padding_copies_and_reordering_do_not_change_real_rows(arm_name):
    # As verl-agent does it: rows leave the rollout loop in time order, are stamped, then the trainer
    # appends duplicated rows (padding) and permutes everything (length balancing).
    data = annotate_rollout_rows(spec_example_one())
    order = [5, 1, 3, 0, 3, 4, 2, 1]  # rows 3 and 1 duplicated, all shuffled
    shuffled = data.select_rows(order)
    inputs = estimator_inputs(shuffled)
    assert inputs["is_pad"].tolist() == [False, False, False, False, True, False, False, True]
    assert inputs["step_index"].tolist() == [1, 1, 1, 0, 1, 0, 0, 1]
    setup_hook.apply_arm(shuffled, load_arm(arm_name), padding="inert")
    values = per_row(shuffled.batch["advantages"], shuffled.batch["response_mask"])
    expected = np.array(EXAMPLE_ONE_EXPECTED[arm_name])[order]
    expected[inputs["is_pad"]] = 0.0
    np.testing.assert_allclose(values, expected, atol=2e-4)


def test_upstream_padding_trains_copies_with_their_source_rows_advantage():
    data = annotate_rollout_rows(spec_example_one()).select_rows([5, 1, 3, 0, 3, 4, 2, 1])
    setup_hook.apply_arm(data, load_arm("gigpo"))  # the gigpo arm follows upstream by default
    values = per_row(data.batch["advantages"], data.batch["response_mask"])
    assert values[4] == values[2] and values[7] == values[1]  # copies of rows 3 and 1
    assert not np.allclose(
        values[[0, 1, 2, 3, 5, 6]],
        np.array(EXAMPLE_ONE_EXPECTED["gigpo"])[[5, 1, 3, 0, 4, 2]],
        atol=1e-3,
    )
    assert setup_hook._PENDING_METRICS["ccpo/padding_rows"] == 2.0


def test_unstamped_shuffled_rows_would_be_read_in_the_wrong_order():
    # Why rows are stamped before the trainer touches them: reading time order from row order
    # after a shuffle gives a different (wrong) answer, which this guards against.
    data = spec_example_one().select_rows([1, 0, 2, 3, 4, 5])
    setup_hook.apply_arm(data, load_arm("return-hard"))
    wrong = per_row(data.batch["advantages"], data.batch["response_mask"])
    expected = np.array(EXAMPLE_ONE_EXPECTED["return-hard"])[[1, 0, 2, 3, 4, 5]]
    assert not np.allclose(wrong, expected, atol=1e-3)


def test_bad_batches_are_named():
    data = spec_example_one()
    del data.non_tensor_batch["anchor_obs"]
    with pytest.raises(InvalidInput, match="anchor_obs"):
        estimator_inputs(data)
    data = spec_example_one()
    data.batch["response_mask"][2] = 0
    with pytest.raises(InvalidInput, match="row 2 has an empty response mask"):
        estimator_inputs(data)


def test_advantage_tensor_broadcasts_rows_and_checks_shapes():
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert advantage_tensor(np.array([2.0, -1.0]), mask).tolist() == [
        [2.0, 2.0, 0.0],
        [-1.0, 0.0, 0.0],
    ]
    assert advantage_tensor(np.ones((2, 3)), mask).tolist() == [[1, 1, 0], [1, 0, 0]]
    with pytest.raises(InvalidInput):
        advantage_tensor(np.ones((2, 4)), mask)
    with pytest.raises(InvalidInput):
        advantage_tensor(np.ones(3), mask)


def trainer_module():
    calls = []

    def compute_advantage(data, adv_estimator, gamma=1.0, **kwargs):
        calls.append(adv_estimator)
        if adv_estimator != "grpo":
            raise NotImplementedError(adv_estimator)
        data.batch["advantages"] = torch.full_like(data.batch["token_level_rewards"], 7.0)
        return data

    def adjust_batch(config, batch):
        return batch.select_rows(list(range(len(batch))) + [0])

    return types.SimpleNamespace(
        compute_advantage=compute_advantage, adjust_batch=adjust_batch, calls=calls
    )


def test_wrapped_compute_advantage_runs_the_arm_and_delegates_the_rest(arm_env):
    arm_env("return-hard")
    module = trainer_module()
    setup_hook.patch_trainer_module(module)
    setup_hook.patch_trainer_module(module)  # idempotent: wrapped once
    data = module.adjust_batch(None, spec_example_one())  # stamps rows, then pads one copy of row 0
    assert STEP_INDEX_KEY in data.non_tensor_batch and SOURCE_ROW_KEY in data.non_tensor_batch
    out = module.compute_advantage(data, "ccpo", gamma=0.95)
    values = per_row(out.batch["advantages"], out.batch["response_mask"])
    np.testing.assert_allclose(values, EXAMPLE_ONE_EXPECTED["return-hard"] + [0.0], atol=2e-4)
    assert module.calls == []  # the original never saw the ccpo name
    module.compute_advantage(spec_example_one(), "grpo")
    assert module.calls == ["grpo"]
    # An enum member whose value is "ccpo" is the same estimator.
    member = types.SimpleNamespace(value="ccpo")
    module.compute_advantage(spec_example_one(), member)
    assert module.calls == ["grpo"]


def test_wrapped_compute_advantage_refuses_another_arm(arm_env):
    module = trainer_module()
    setup_hook.patch_trainer_module(module)
    arm_env("return-hard", fingerprint="0" * 64)
    with pytest.raises(ArmMismatch, match="fingerprint"):
        module.compute_advantage(spec_example_one(), "ccpo")
    arm = arm_env("gigpo")
    config = {"ccpo": {"arm": "return-hard", "fingerprint": load_arm("return-hard").fingerprint}}
    with pytest.raises(ArmMismatch, match="algorithm.ccpo.arm is 'return-hard'"):
        module.compute_advantage(spec_example_one(), "ccpo", config=config)
    config = {"ccpo": {"arm": "gigpo", "fingerprint": arm.fingerprint}}
    module.compute_advantage(spec_example_one(), "ccpo", config=config)


def test_arm_overrides_travel_with_the_arm(arm_env):
    arm_env("return-hard", {"edge_w": "0"})
    data = spec_example_one()
    module = trainer_module()
    setup_hook.patch_trainer_module(module)
    module.compute_advantage(data, "ccpo")
    # docs/estimators.md §10.1, return-hard with edge_w = 0.
    expected = [2.32849, 2.38310, -1.16425, -1.73760, -1.16425, -0.64550]
    np.testing.assert_allclose(
        per_row(data.batch["advantages"], data.batch["response_mask"]), expected, atol=2e-4
    )


def test_features_are_required_when_the_arm_reads_them(arm_env):
    arm = arm_env("global-successor")
    data = spec_example_one()
    with pytest.raises(ArmMismatch, match="ccpo_phi_feats"):
        setup_hook.apply_arm(data, arm)
    data.batch["ccpo_phi_feats"] = torch.randn(6, 8, generator=torch.Generator().manual_seed(0))
    setup_hook.apply_arm(data, arm)
    assert torch.isfinite(data.batch["advantages"]).all()


def test_trainer_init_accepts_ccpo_only_for_the_launched_arm(arm_env):
    arm = arm_env("grpo")

    class Enum:  # verl-agent's AdvantageEstimator has no "ccpo" member
        def __iter__(self):
            return iter([types.SimpleNamespace(value="grpo"), types.SimpleNamespace(value="gigpo")])

    seen = []

    class Trainer:
        def __init__(self, config, tokenizer=None):
            if config.algorithm.adv_estimator not in ("grpo", "gigpo"):
                raise NotImplementedError
            seen.append(config.algorithm.adv_estimator)

    module = types.SimpleNamespace(RayPPOTrainer=Trainer, AdvantageEstimator=Enum())
    setup_hook.patch_trainer_module(module)
    config = types.SimpleNamespace(
        algorithm=types.SimpleNamespace(
            adv_estimator="ccpo",
            get=lambda key, default=None: (
                {"arm": arm.name, "fingerprint": arm.fingerprint} if key == "ccpo" else default
            ),
        )
    )
    module.RayPPOTrainer(config)
    assert seen == ["grpo"] and config.algorithm.adv_estimator == "ccpo"


def test_validation_metrics_gain_the_mean_turns_of_the_validation_episodes(arm_env):
    arm_env("grpo")
    example = spec_example_one()  # three trajectories of two turns
    longer = spec_example_one().select_rows([0, 1, 2])  # t1: two turns, t2: one turn
    longer.non_tensor_batch["traj_uid"] = np.array(["u1", "u1", "u2"], dtype=object)
    rewarded = []

    class Trainer:
        def __init__(self, config=None):
            self.val_reward_fn = lambda batch, return_dict=False: (
                rewarded.append(len(batch)) or {"reward_tensor": None}
            )
            self.logged = {"val/success_rate": 0.5}

        def _validate(self):
            for batch in (example, longer):
                self.val_reward_fn(batch, return_dict=True)
            return dict(self.logged)

    module = types.SimpleNamespace(RayPPOTrainer=Trainer)
    setup_hook.patch_trainer_module(module)
    setup_hook.patch_trainer_module(module)  # idempotent
    trainer = Trainer(types.SimpleNamespace(algorithm=types.SimpleNamespace(adv_estimator="grpo")))
    original_reward_fn = trainer.val_reward_fn
    metrics = trainer._validate()
    # Five episodes: three of 2 turns, one of 2 and one of 1.
    assert metrics == {"val/success_rate": 0.5, "val/episode_length/mean": pytest.approx(9 / 5)}
    assert rewarded == [6, 3] and trainer.val_reward_fn is original_reward_fn
    trainer.logged = {"val/episode_length/mean": 4.0}  # a value the trainer logs itself is kept
    assert trainer._validate() == {"val/episode_length/mean": 4.0}
    trainer.logged = {}  # verl's "no validation" answer stays empty
    assert trainer._validate() == {}
