#!/usr/bin/env python
"""The verl backend's tensor-side parts on an accelerator: capture, recorder, adapter, overhead.

What a GPU run of verl-agent would exercise in ccpo without verl itself (which this check does
not need): the reference-model hook that takes CCPO's `phi_feats` from the final norm, in verl's
padded and packed layouts, with the model on the device in float32 and bfloat16; the recorder that
hands features back in batch order after micro-batch regrouping; the adapter from device tensors to
the estimator and back to a device advantage tensor; the hf evaluation agent generating on the
device; and the hook's cost next to a plain forward of a 7B-shaped (2-layer) Qwen2, measured side
by side.

    python scripts/gpu_check.py [--device cuda] [--shape 7b|tiny] [--rows 16] [--seqlen 1536]

Prints one line per check and exits 1 if any failed. CI runs the checks on the CPU with
`--repeats 0` (no timing there: a ratio of milliseconds on a shared CPU is noise).
"""

from __future__ import annotations

import argparse
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ccpo_cli.arms import load_arm  # noqa: E402
from ccpo_cli.backends.verl.adapter import FEATURES_KEY, advantage_tensor, estimator_inputs  # noqa: E402
from ccpo_cli.backends.verl.capture import (  # noqa: E402
    FinalNormCapture,
    ReferenceFeatureRecorder,
    last_prompt_features_packed,
    last_prompt_features_padded,
)
from ccpo_cli.estimators import RolloutBatch, compute_advantages  # noqa: E402

SHAPES = {
    # hidden 3584, 28 heads / 4 KV heads, vocabulary of Qwen2.5-7B, only 2 layers
    "7b": dict(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_key_value_heads=4,
        num_hidden_layers=2,
        max_position_embeddings=32768,
    ),
    "tiny": dict(
        vocab_size=97,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=2,
        max_position_embeddings=256,
    ),
}
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}  # relative, on a row's norm


def build_model(shape: str, dtype: torch.dtype, device: str) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(**SHAPES[shape], attn_implementation="sdpa")
    with torch.device(
        device
    ):  # initialise where it runs: a 7B-shaped vocabulary is slow to fill on a CPU
        model = Qwen2ForCausalLM(config)
    return model.to(dtype=dtype).eval()


def verl_rows(
    vocab: int, rows: int, prompt_width: int, response_width: int, device: str, seed: int = 1
):
    """Left-padded prompts, right-padded responses, as verl lays them out."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(1, prompt_width + 1, (rows,), generator=generator)
    response_lengths = torch.randint(1, response_width + 1, (rows,), generator=generator)
    width = prompt_width + response_width
    input_ids = torch.zeros(rows, width, dtype=torch.long)
    attention_mask = torch.zeros(rows, width, dtype=torch.long)
    prompts = []
    for row, (prompt_length, response_length) in enumerate(
        zip(prompt_lengths.tolist(), response_lengths.tolist())
    ):
        start, stop = prompt_width - prompt_length, prompt_width + response_length
        input_ids[row, start:stop] = torch.randint(1, vocab, (stop - start,), generator=generator)
        attention_mask[row, start:stop] = 1
        prompts.append(input_ids[row, start:prompt_width].clone())
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return types.SimpleNamespace(
        input_ids=input_ids.to(device),
        attention_mask=attention_mask.to(device),
        position_ids=position_ids.to(device),
        prompts=[prompt.to(device) for prompt in prompts],
        response_width=response_width,
    )


def padded_forward(model, batch, capture: bool = True):
    with torch.no_grad(), FinalNormCapture(model) as hook:
        output = model(
            input_ids=batch.input_ids,
            attention_mask=batch.attention_mask,
            position_ids=batch.position_ids,
            use_cache=False,
            output_hidden_states=capture,
        )
    return hook.take(), (output.hidden_states[-1] if capture else None)


def packed_forward(model, batch):
    indices = batch.attention_mask.flatten().nonzero().flatten()
    with torch.no_grad(), FinalNormCapture(model) as hook:
        model(
            input_ids=batch.input_ids.flatten()[indices][None],
            position_ids=batch.position_ids.flatten()[indices][None],
            use_cache=False,
        )
    return hook.take(), indices


def relative_error(found: torch.Tensor, expected: torch.Tensor) -> float:
    expected = expected.float().cpu()
    return float(
        ((found.float().cpu() - expected).norm(dim=1) / expected.norm(dim=1).clamp(min=1e-12)).max()
    )


def check_capture(device: str, dtype: torch.dtype, report) -> None:
    model = build_model("tiny", dtype, device)
    batch = verl_rows(SHAPES["tiny"]["vocab_size"], 12, 20, 8, device)
    hooked, hidden_states = padded_forward(model, batch)
    padded = last_prompt_features_padded(hooked, batch.attention_mask, batch.response_width)
    column = batch.input_ids.shape[1] - batch.response_width - 1
    report(
        f"padded capture = output_hidden_states column ({dtype})",
        padded.device.type == "cpu"
        and padded.dtype == torch.float32
        and torch.equal(padded, hidden_states[:, column, :].float().cpu()),
        "exact, float32 on the CPU",
    )
    with torch.no_grad():
        alone = torch.stack(
            [
                model(
                    input_ids=prompt[None], use_cache=False, output_hidden_states=True
                ).hidden_states[-1][0, -1]
                for prompt in batch.prompts
            ]
        )
    error = relative_error(padded, alone)
    report(
        f"padded capture = each prompt run alone ({dtype})",
        error <= TOLERANCE[dtype],
        f"max relative error {error:.1e}",
    )
    hooked_packed, indices = packed_forward(model, batch)
    packed = last_prompt_features_packed(
        hooked_packed, indices, batch.attention_mask, batch.response_width
    )
    error = relative_error(packed, alone)
    report(
        f"packed capture = each prompt run alone ({dtype})",
        error <= TOLERANCE[dtype],
        f"max relative error {error:.1e}",
    )

    recorder = ReferenceFeatureRecorder()
    for rows in (
        [5, 0, 11],
        [3, 4, 1, 2],
        [10, 9, 8, 7, 6],
    ):  # micro-batches regrouped and reordered
        micro = types.SimpleNamespace(
            **{
                key: getattr(batch, key)[rows]
                for key in ("input_ids", "attention_mask", "position_ids")
            },
            response_width=batch.response_width,
        )
        recorder.record(
            padded_forward(model, micro, capture=False)[0],
            micro.input_ids,
            micro.attention_mask,
            batch.response_width,
            packed=False,
        )
    in_order = recorder.features_for(batch.input_ids, batch.attention_mask)
    error = relative_error(in_order, padded)
    report(
        f"recorder returns batch order after regrouping ({dtype})",
        error <= TOLERANCE[dtype],
        f"max relative error {error:.1e}",
    )


def check_adapter(device: str, report) -> None:
    """Device tensors in, estimator on the CPU, a device advantage tensor out (CPU run as reference)."""
    rng = np.random.default_rng(3)
    tasks, trajectories, turns, response_width, hidden = 4, 4, 6, 16, 64
    rows = tasks * trajectories * turns
    traj_uid = np.array(
        [
            f"t{task}/j{trajectory}"
            for task in range(tasks)
            for trajectory in range(trajectories)
            for _ in range(turns)
        ],
        dtype=object,
    )
    success = rng.random(tasks * trajectories) < 0.5
    last_turn = np.tile(np.arange(turns) == turns - 1, tasks * trajectories)
    non_tensor = {
        "uid": np.array([name.split("/")[0] for name in traj_uid], dtype=object),
        "traj_uid": traj_uid,
        "anchor_obs": np.array(
            [f"room {value}" for value in rng.integers(0, 5, rows)], dtype=object
        ),
        "rewards": np.where(last_turn & np.repeat(success, turns), 10.0, 0.0),
        "is_action_valid": rng.random(rows) > 0.1,
        "episode_rewards": np.repeat(np.where(success, 10.0, 0.0), turns),
    }
    lengths = torch.as_tensor(rng.integers(1, response_width + 1, rows))
    mask = (torch.arange(response_width)[None, :] < lengths[:, None]).long()
    features = torch.as_tensor(rng.standard_normal((rows, hidden)).astype(np.float32))

    def advantages_on(where: str) -> torch.Tensor:
        data = types.SimpleNamespace(
            batch={"response_mask": mask.to(where), FEATURES_KEY: features.to(where)},
            non_tensor_batch=dict(non_tensor),
            meta_info={},
        )
        batch = RolloutBatch.from_mapping(estimator_inputs(data), source="gpu check")
        result = compute_advantages(batch, load_arm("global-successor", {"whiten": "0"}))
        return advantage_tensor(result.advantages, like=data.batch["response_mask"])

    on_device, on_cpu = advantages_on(device), advantages_on("cpu")
    report(
        "adapter: advantages land on the batch's device",
        on_device.device.type == torch.device(device).type,
        f"device {on_device.device}, shape {tuple(on_device.shape)}",
    )
    report(
        "adapter: device and CPU batches give the same advantages",
        torch.equal(on_device.cpu(), on_cpu)
        and bool((on_cpu[mask == 0] == 0).all())
        and bool(on_cpu.abs().sum() > 0),
        "bit-identical, zero outside the response mask",
    )


def check_hf_agent(device: str, report) -> None:
    """`ccpo eval --agent hf` on the device: a tiny model saved to disk, loaded where the agent
    runs, batched left-padded generation; greedy output compared with the same agent on the CPU."""
    import tempfile

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from helpers_tiny_lm import save_tiny_lm  # the test suite's tokenizer-trained-here tiny LM

    from ccpo_cli.agents.hf import HFAgent
    from ccpo_cli.agents.prompts import first_turn_prompt

    observations = [
        "You are in the middle of a room. You see a fridge 1 and a countertop 1.",
        "You arrive at fridge 1. The fridge 1 is closed.",
        "Nothing happens.",
        "Your task is to: put a clean apple in countertop.",
    ]
    prompts = [
        first_turn_prompt(text, ["go to fridge 1", "open fridge 1", "look"])
        for text in observations
    ]
    with tempfile.TemporaryDirectory() as folder:
        save_tiny_lm(Path(folder), observations, hidden_size=64)
        on_device = HFAgent(folder, temperature=0.0, max_new_tokens=24, batch_size=3, device=device)
        on_cpu = HFAgent(folder, temperature=0.0, max_new_tokens=24, batch_size=3, device="cpu")
        device_responses, cpu_responses = on_device.generate(prompts), on_cpu.generate(prompts)
    same = sum(a == b for a, b in zip(device_responses, cpu_responses))
    report(
        "hf agent generates on the device",
        on_device.model.device.type == torch.device(device).type
        and len(device_responses) == len(prompts)
        and all(device_responses),
        f"model on {on_device.model.device}; greedy output identical to the CPU's for {same} of {len(prompts)} prompts",
    )


def time_capture(device: str, shape: str, rows: int, seqlen: int, repeats: int, report) -> None:
    dtype = torch.bfloat16 if device != "cpu" else torch.float32
    model = build_model(shape, dtype, device)
    response_width = seqlen // 3
    batch = verl_rows(
        SHAPES[shape]["vocab_size"], rows, seqlen - response_width, response_width, device, seed=5
    )

    def synchronise():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def plain():
        with torch.no_grad():
            model(
                input_ids=batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                use_cache=False,
            )

    def captured():
        hooked, _ = padded_forward(model, batch, capture=False)
        return last_prompt_features_padded(hooked, batch.attention_mask, response_width)

    timings = {"plain": [], "captured": []}
    for _ in range(repeats + 1):  # the first round warms up
        for name, function in (("plain", plain), ("captured", captured)):
            synchronise()
            start = time.perf_counter()
            function()
            synchronise()
            timings[name].append(time.perf_counter() - start)
    plain_s, captured_s = min(timings["plain"][1:]), min(timings["captured"][1:])
    ratio = captured_s / plain_s
    peak = (
        f", peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB"
        if device.startswith("cuda")
        else ""
    )
    report(
        f"capture overhead, {shape} shape, {rows} x {seqlen} tokens, {str(dtype).split('.')[-1]}",
        ratio <= 1.10,
        f"plain forward {plain_s * 1e3:.1f} ms, with capture {captured_s * 1e3:.1f} ms, ratio {ratio:.3f} (<= 1.10){peak}",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="7b", help="model shape for the overhead timing"
    )
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--seqlen", type=int, default=1536)
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed rounds of the overhead check; 0 skips it"
    )
    args = parser.parse_args()
    failures = []

    def report(name: str, passed: bool, detail: str) -> None:
        print(f"{'ok  ' if passed else 'FAIL'} {name}: {detail}", flush=True)
        if not passed:
            failures.append(name)

    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(f"device {args.device} ({name}), torch {torch.__version__}", flush=True)
    for dtype in (torch.float32, torch.bfloat16):
        check_capture(args.device, dtype, report)
    check_adapter(args.device, report)
    check_hf_agent(args.device, report)
    if args.repeats > 0:
        time_capture(args.device, args.shape, args.rows, args.seqlen, args.repeats, report)
    print(f"{len(failures)} failed" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
