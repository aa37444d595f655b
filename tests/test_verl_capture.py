"""Reference hidden-state capture at the last prompt token, on a tiny random Qwen2 (CPU).

The hook on the final norm must give, for every row, exactly the final hidden state the model
computes for that row's prompt alone: in verl's padded layout (left-padded prompts, right-padded
responses), in its packed layout (padding removed, flat positions), and after the worker-side
patches regroup rows into micro-batches in another order.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from ccpo_cli.backends.verl import setup_hook
from ccpo_cli.backends.verl.adapter import FEATURES_KEY
from ccpo_cli.backends.verl.capture import (
    CaptureError,
    FinalNormCapture,
    ReferenceFeatureRecorder,
    find_final_norm,
    last_prompt_features_packed,
    last_prompt_features_padded,
)

VOCAB = 97
PROMPT_WIDTH = 9
RESPONSE_WIDTH = 5


@pytest.fixture(scope="module")
def model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(config).eval()


@pytest.fixture(scope="module")
def verl_batch():
    """Rows as verl lays them out: prompt left-padded to PROMPT_WIDTH, response right-padded."""
    generator = torch.Generator().manual_seed(1)
    prompt_lengths = [9, 4, 6, 1, 7]
    response_lengths = [5, 2, 3, 5, 1]
    rows, masks, prompts = [], [], []
    for prompt_length, response_length in zip(prompt_lengths, response_lengths):
        prompt = torch.randint(1, VOCAB, (prompt_length,), generator=generator)
        response = torch.randint(1, VOCAB, (response_length,), generator=generator)
        left = PROMPT_WIDTH - prompt_length
        right = RESPONSE_WIDTH - response_length
        rows.append(
            torch.cat(
                [
                    torch.zeros(left, dtype=torch.long),
                    prompt,
                    response,
                    torch.zeros(right, dtype=torch.long),
                ]
            )
        )
        masks.append(
            torch.cat(
                [torch.zeros(left), torch.ones(prompt_length + response_length), torch.zeros(right)]
            ).long()
        )
        prompts.append(prompt)
    input_ids = torch.stack(rows)
    attention_mask = torch.stack(masks)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    responses = input_ids[:, PROMPT_WIDTH:]
    return types.SimpleNamespace(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        responses=responses,
        prompts=prompts,
    )


def prompt_alone_states(model, prompts) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack(
            [
                model(
                    input_ids=prompt[None], use_cache=False, output_hidden_states=True
                ).hidden_states[-1][0, -1]
                for prompt in prompts
            ]
        )


def padded_forward(model, batch):
    with torch.no_grad(), FinalNormCapture(model) as capture:
        output = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
            output_hidden_states=True,
        )
    return capture.take(), output.hidden_states[-1]


def packed_forward(model, input_ids, attention_mask, position_ids):
    indices = attention_mask.flatten().nonzero().flatten()
    with torch.no_grad(), FinalNormCapture(model) as capture:
        # No attention mask and restarting positions: transformers keeps packed rows apart.
        model(
            input_ids=input_ids.flatten()[indices][None],
            position_ids=position_ids.flatten()[indices][None],
            use_cache=False,
        )
    return capture.take(), indices


def test_padded_capture_matches_hidden_states_and_the_prompt_alone(model, verl_batch):
    hooked, hidden_states = padded_forward(model, verl_batch)
    features = last_prompt_features_padded(hooked, verl_batch.attention_mask, RESPONSE_WIDTH)
    column = PROMPT_WIDTH - 1
    assert features.dtype == torch.float32 and features.shape == (5, 32)
    torch.testing.assert_close(features, hidden_states[:, column, :].float(), rtol=0, atol=0)
    torch.testing.assert_close(
        features, prompt_alone_states(model, verl_batch.prompts), rtol=1e-4, atol=1e-5
    )
    # One column off is a different state: the test would notice an off-by-one.
    assert not torch.allclose(features, hidden_states[:, column + 1, :], atol=1e-3)


def test_packed_capture_matches_the_padded_layout(model, verl_batch):
    hooked, indices = packed_forward(
        model, verl_batch.input_ids, verl_batch.attention_mask, verl_batch.position_ids
    )
    assert hooked.shape == (1, int(verl_batch.attention_mask.sum()), 32)
    packed = last_prompt_features_packed(hooked, indices, verl_batch.attention_mask, RESPONSE_WIDTH)
    _, hidden_states = padded_forward(model, verl_batch)
    torch.testing.assert_close(
        packed, hidden_states[:, PROMPT_WIDTH - 1, :].float(), rtol=1e-4, atol=1e-5
    )
    torch.testing.assert_close(
        packed, prompt_alone_states(model, verl_batch.prompts), rtol=1e-4, atol=1e-5
    )


def test_a_masked_last_prompt_column_is_an_error_not_a_zero_row(model, verl_batch):
    mask = verl_batch.attention_mask.clone()
    mask[2, PROMPT_WIDTH - 1] = 0
    hooked, _ = padded_forward(model, verl_batch)
    with pytest.raises(CaptureError, match=r"rows \[2\]"):
        last_prompt_features_padded(hooked, mask, RESPONSE_WIDTH)
    indices = mask.flatten().nonzero().flatten()
    fake_packed = torch.zeros(1, indices.numel(), 32)
    with pytest.raises(CaptureError, match=r"rows \[2\]"):
        last_prompt_features_packed(fake_packed, indices, mask, RESPONSE_WIDTH)


def test_final_norm_is_found_through_wrappers(model):
    class Wrapper(torch.nn.Module):  # the attribute name FSDP uses for the module it wraps
        def __init__(self, inner):
            super().__init__()
            self._fsdp_wrapped_module = inner

    assert find_final_norm(Wrapper(model)) is model.model.norm
    with pytest.raises(CaptureError):
        find_final_norm(torch.nn.Linear(2, 2))


class TinyActor:
    """Stands in for verl's DataParallelPPOActor: the same attribute names, a real model, and a
    `_forward_micro_batch` that runs the padded or the packed forward as verl does."""

    def __init__(self, model, use_remove_padding):
        self.actor_module = model
        self.use_remove_padding = use_remove_padding

    def _forward_micro_batch(self, micro_batch, temperature=1.0):
        if self.use_remove_padding:
            packed_forward(
                self.actor_module,
                micro_batch["input_ids"],
                micro_batch["attention_mask"],
                micro_batch["position_ids"],
            )
        else:
            with torch.no_grad():
                self.actor_module(
                    input_ids=micro_batch["input_ids"],
                    attention_mask=micro_batch["attention_mask"],
                    position_ids=micro_batch["position_ids"],
                    use_cache=False,
                )
        return None

    def compute_log_prob(self, data):
        # Micro-batches in a different order and grouping than the batch (dynamic batch size).
        for rows in ([3, 0], [4], [2, 1]):
            self._forward_micro_batch({key: value[rows] for key, value in data.batch.items()})
        return torch.zeros(len(data.batch["input_ids"]))


class TinyWorker:
    """Stands in for verl's ActorRolloutRefWorker (only what the patch touches)."""

    def __init__(self, reference):
        self.ref_policy = reference

    def compute_ref_log_prob(self, data):
        log_probs = self.ref_policy.compute_log_prob(data)
        return types.SimpleNamespace(
            batch={"ref_log_prob": log_probs}, non_tensor_batch={}, meta_info={}
        )


@pytest.mark.parametrize("use_remove_padding", [False, True], ids=["padded", "packed"])
def test_worker_patches_ship_features_in_batch_order(model, verl_batch, use_remove_padding):
    actor_module = types.SimpleNamespace(DataParallelPPOActor=type("Actor", (TinyActor,), {}))
    worker_module = types.SimpleNamespace(ActorRolloutRefWorker=type("Worker", (TinyWorker,), {}))
    setup_hook.patch_actor_module(actor_module)
    setup_hook.patch_worker_module(worker_module)
    setup_hook.patch_actor_module(actor_module)  # idempotent
    worker = worker_module.ActorRolloutRefWorker(
        actor_module.DataParallelPPOActor(model, use_remove_padding)
    )
    data = types.SimpleNamespace(
        batch={
            "input_ids": verl_batch.input_ids,
            "attention_mask": verl_batch.attention_mask,
            "position_ids": verl_batch.position_ids,
            "responses": verl_batch.responses,
        }
    )
    output = worker.compute_ref_log_prob(data)
    features = output.batch[FEATURES_KEY]
    torch.testing.assert_close(
        features, prompt_alone_states(model, verl_batch.prompts), rtol=1e-4, atol=1e-5
    )
    assert worker.ref_policy._ccpo_recorder is None  # capture only during the reference pass


def test_recorder_refuses_rows_it_never_saw(model, verl_batch):
    recorder = ReferenceFeatureRecorder()
    hooked, _ = padded_forward(model, verl_batch)
    recorder.record(
        hooked[:3],
        verl_batch.input_ids[:3],
        verl_batch.attention_mask[:3],
        RESPONSE_WIDTH,
        packed=False,
    )
    with pytest.raises(CaptureError, match=r"rows \[3, 4\]"):
        recorder.features_for(verl_batch.input_ids, verl_batch.attention_mask)
    copies = recorder.features_for(
        verl_batch.input_ids[[1, 1, 0]], verl_batch.attention_mask[[1, 1, 0]]
    )
    assert np.array_equal(copies[0].numpy(), copies[1].numpy())
