"""Reference features through verl's real reference pass, on a tiny random Qwen2 (CPU).

Real: `ActorRolloutRefWorker.compute_ref_log_prob` (called unbound: the worker itself needs Ray
and FSDP to be built, so it runs on a plain object holding what the method reads, every one a
real verl object: the ref config from `ppo_trainer.yaml`, `FSDPUlyssesShardingManager`, and a
`DataParallelPPOActor` around the model), `DataParallelPPOActor.compute_log_prob` and
`_forward_micro_batch` in the padded and the remove-padding layouts, with dynamic batch size off
(fixed micro-batches) and on (`rearrange_micro_batches` regroups and reorders rows), both wrapped
by the setup hook's patches.

Stand-ins: without CUDA, `dp_actor` imports no `unpad_input` / `pad_input` / `index_first_axis`
/ `rearrange` (flash-attn's padding helpers); the pure-torch versions below do the same index
arithmetic. The model is not FSDP-wrapped, and verl's forward runs under CPU bfloat16 autocast.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch

from ccpo_cli.backends.verl import setup_hook
from ccpo_cli.backends.verl.adapter import FEATURES_KEY

pytestmark = pytest.mark.slow  # each test runs verl-agent's code for seconds to a minute

PROMPT_WIDTH = 12
RESPONSE_WIDTH = 6
PROMPT_LENGTHS = [12, 5, 9, 3, 7, 11, 4, 8]
RESPONSE_LENGTHS = [6, 2, 4, 1, 6, 3, 5, 2]
# bfloat16 autocast: a row's state differs from the prompt run alone by bfloat16 rounding only.
BF16_TOLERANCE = 2e-2


def unpad_input(hidden_states, attention_mask):
    indices = attention_mask.flatten().nonzero(as_tuple=False).flatten()
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat[indices], indices, None, None, None


def pad_input(hidden_states, indices, batch, seqlen):
    out = torch.zeros(
        batch * seqlen,
        *hidden_states.shape[1:],
        dtype=hidden_states.dtype,
        device=hidden_states.device,
    )
    out[indices] = hidden_states
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])


def index_first_axis(tensor, indices):
    return tensor[indices]


def rearrange(tensor, pattern):
    if pattern != "b s ... -> (b s) ...":
        raise NotImplementedError(pattern)
    return tensor.reshape(-1, *tensor.shape[2:])


@pytest.fixture(scope="module")
def verl_parts(verl_agent_home):
    import verl.workers.actor.dp_actor as dp_actor
    import verl.workers.fsdp_workers as fsdp_workers
    from helpers_tiny_lm import tiny_qwen2, train_tokenizer

    for name, function in {
        "unpad_input": unpad_input,
        "pad_input": pad_input,
        "index_first_axis": index_first_axis,
        "rearrange": rearrange,
    }.items():
        if not hasattr(dp_actor, name):
            setattr(dp_actor, name, function)
    unpatched = fsdp_workers.ActorRolloutRefWorker.compute_ref_log_prob
    setup_hook.patch_actor_module(dp_actor)
    setup_hook.patch_worker_module(fsdp_workers)
    tokenizer = train_tokenizer()
    return types.SimpleNamespace(
        home=verl_agent_home,
        dp_actor=dp_actor,
        workers=fsdp_workers,
        unpatched=unpatched,
        model=tiny_qwen2(tokenizer, hidden_size=32, layers=2, heads=2),
        vocab=len(tokenizer),
    )


def verl_rows(vocab: int, duplicates=(1, 4)):
    """Rows in verl's layout (left-padded prompts, right-padded responses); two padding copies last."""
    generator = torch.Generator().manual_seed(3)
    ids, masks, prompts = [], [], []
    for prompt_length, response_length in zip(PROMPT_LENGTHS, RESPONSE_LENGTHS):
        prompt = torch.randint(3, vocab, (prompt_length,), generator=generator)
        response = torch.randint(3, vocab, (response_length,), generator=generator)
        left, right = PROMPT_WIDTH - prompt_length, RESPONSE_WIDTH - response_length
        ids.append(
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
    order = list(range(len(ids))) + list(duplicates)
    input_ids, attention_mask = torch.stack(ids)[order], torch.stack(masks)[order]
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return input_ids, attention_mask, position_ids, [prompts[row] for row in order]


def reference_worker(parts, *, remove_padding: bool, dynamic: bool):
    from omegaconf import OmegaConf
    from verl.workers.sharding_manager.fsdp_ulysses import FSDPUlyssesShardingManager

    from verl_integration import cpu_trainer

    config = cpu_trainer.trainer_config(
        parts.home,
        [
            f"actor_rollout_ref.model.use_remove_padding={remove_padding}",
            f"actor_rollout_ref.ref.log_prob_use_dynamic_bsz={dynamic}",
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=3",
            f"actor_rollout_ref.ref.log_prob_max_token_len_per_gpu={PROMPT_WIDTH + RESPONSE_WIDTH + 8}",
        ],
    )
    # As the worker's constructor does: the ref actor learns the model's padding mode.
    ref_config = OmegaConf.merge(
        config.actor_rollout_ref.ref,
        {"use_remove_padding": remove_padding, "use_torch_compile": False},
    )
    actor = parts.dp_actor.DataParallelPPOActor(config=ref_config, actor_module=parts.model)
    return types.SimpleNamespace(
        _is_lora=False,
        _is_ref=True,
        world_size=1,
        config=config.actor_rollout_ref,
        ulysses_sharding_manager=FSDPUlyssesShardingManager(None),
        ref_policy=actor,
    )


def prompt_alone_states(model, prompts) -> torch.Tensor:
    with torch.no_grad(), torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        return torch.stack(
            [
                model(input_ids=prompt[None], use_cache=False, output_hidden_states=True)
                .hidden_states[-1][0, -1]
                .float()
                for prompt in prompts
            ]
        )


@pytest.mark.parametrize("dynamic", [False, True], ids=["fixed-micro-batches", "dynamic-bsz"])
@pytest.mark.parametrize("remove_padding", [False, True], ids=["padded", "remove-padding"])
def test_reference_pass_ships_last_prompt_states(verl_parts, remove_padding, dynamic):
    from verl import DataProto
    from verl.utils.seqlen_balancing import rearrange_micro_batches

    input_ids, attention_mask, position_ids, prompts = verl_rows(verl_parts.vocab)
    data = DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "responses": input_ids[:, PROMPT_WIDTH:],
        }
    )
    worker = reference_worker(verl_parts, remove_padding=remove_padding, dynamic=dynamic)
    output = verl_parts.workers.ActorRolloutRefWorker.compute_ref_log_prob(worker, data)
    features = output.batch[FEATURES_KEY]
    assert features.shape == (len(prompts), 32) and features.dtype == torch.float32
    expected = prompt_alone_states(verl_parts.model, prompts)
    difference = float((features - expected).abs().max())
    print(
        f"remove_padding={remove_padding} dynamic={dynamic}: max |feature - prompt alone| = {difference:.3g}"
    )
    assert difference <= BF16_TOLERANCE
    # Rows are told apart: each row's feature is nearest to its own prompt's state.
    distances = torch.cdist(features, expected)
    assert torch.equal(distances.argmin(dim=1)[:8], torch.arange(8))
    assert torch.equal(
        features[-2:], features[[1, 4]]
    )  # padding copies share their source's features
    assert worker.ref_policy._ccpo_recorder is None
    # The wrapper changes nothing in what verl computes.
    plain = verl_parts.unpatched(worker, DataProto.from_dict(tensors=dict(data.batch.items())))
    assert torch.equal(plain.batch["ref_log_prob"], output.batch["ref_log_prob"])
    if dynamic:
        # The configuration really regroups rows out of batch order.
        _, groups = rearrange_micro_batches(
            batch=data.batch, max_token_len=PROMPT_WIDTH + RESPONSE_WIDTH + 8
        )
        flat = [row for group in groups for row in group]
        assert len(groups) > 1 and flat != sorted(flat)


def test_layouts_agree_with_each_other(verl_parts):
    from verl import DataProto

    input_ids, attention_mask, position_ids, _ = verl_rows(verl_parts.vocab)
    results = {}
    for remove_padding in (False, True):
        data = DataProto.from_dict(
            tensors={
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "position_ids": position_ids,
                "responses": input_ids[:, PROMPT_WIDTH:],
            }
        )
        worker = reference_worker(verl_parts, remove_padding=remove_padding, dynamic=False)
        results[remove_padding] = verl_parts.workers.ActorRolloutRefWorker.compute_ref_log_prob(
            worker, data
        ).batch[FEATURES_KEY]
    difference = float((results[False] - results[True]).abs().max())
    print(f"max |padded - remove-padding| = {difference:.3g}")
    assert difference <= BF16_TOLERANCE
    assert np.isfinite(results[True].numpy()).all()
