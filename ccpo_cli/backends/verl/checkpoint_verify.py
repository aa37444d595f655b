"""Is a merged model folder the model its config describes?

Two checks, both against the folder's own config.json: every tensor the architecture has
(built on the meta device, so no memory is spent) is in the safetensors files with its shape
and nothing else is, with tied weights (an output layer sharing the embedding) present once;
then the model is loaded and one forward pass over a short chat prompt must give logits of the
right shape that are all finite. Any failure is a runtime error (exit 1) that names the folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ccpo_cli.errors import CcpoError

PROBE_TEXT = "You are in the middle of a room. Your task is to: put a clean apple in fridge."
SHOWN = 5  # names listed in an error before "+N more"


def _listed(names: list[str]) -> str:
    more = f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def weight_files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        names = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        return [folder / name for name in names]
    return sorted(folder.glob("*.safetensors"))


def stored_tensors(folder: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name -> (shape, dtype) from the safetensors headers (no tensor is read)."""
    from safetensors import safe_open

    files = weight_files(folder)
    if not files:
        raise CcpoError(f"{folder}: the merged model has no safetensors weights")
    found: dict[str, tuple[tuple[int, ...], str]] = {}
    for path in files:
        with safe_open(str(path), framework="pt") as handle:
            for name in handle.keys():
                tensor = handle.get_slice(name)
                found[name] = (tuple(tensor.get_shape()), str(tensor.get_dtype()))
    return found


def expected_tensors(config: Any) -> list[list[tuple[str, tuple[int, ...]]]]:
    """The architecture's persistent tensors, grouped by identity (a tied group has several names)."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    groups: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
    for name, tensor in skeleton.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append((name, tuple(tensor.shape)))
    return list(groups.values())


def compare_with_config(folder: Path, config: Any) -> dict[str, Any]:
    stored = stored_tensors(folder)
    groups = expected_tensors(config)
    missing, wrong_shape, tied = [], [], []
    known = set()
    parameters = 0
    for group in groups:
        known.update(name for name, _ in group)
        parameters += _count(group[0][1])  # a tied group is one set of parameters
        present = [(name, shape) for name, shape in group if name in stored]
        if not present:
            missing.append(group[0][0])
        if len(group) > 1:
            tied.append([name for name, _ in group])
        wrong_shape += [
            f"{name} {list(stored[name][0])} (config: {list(shape)})"
            for name, shape in present
            if stored[name][0] != shape
        ]
    unexpected = sorted(set(stored) - known)
    problems = (
        (["missing " + _listed(missing)] if missing else [])
        + (["unexpected " + _listed(unexpected)] if unexpected else [])
        + (["shape differs: " + _listed(wrong_shape)] if wrong_shape else [])
    )
    if problems:
        raise CcpoError(
            f"{folder}: the merged weights do not match config.json: " + "; ".join(problems)
        )
    return {
        "tensors": len(stored),
        "parameters": parameters,
        "dtypes": sorted({dtype for _, dtype in stored.values()}),
        "tied": tied,
    }


def _count(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total


def forward_pass(folder: Path, config: Any) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder))
        # in the stored dtype (bfloat16 from verl's merger): half the memory of a float32 load
        model = AutoModelForCausalLM.from_pretrained(str(folder), dtype="auto").eval()
    except (OSError, ValueError) as error:
        raise CcpoError(
            f"{folder}: the merged model does not load ({str(error).strip().splitlines()[0]})"
        ) from None
    text = PROBE_TEXT
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": PROBE_TEXT}], add_generation_prompt=True, tokenize=False
        )
    encoded = tokenizer(
        text, return_tensors="pt", add_special_tokens=False, return_token_type_ids=False
    )
    started = time.monotonic()
    with torch.inference_mode():
        logits = model(**encoded).logits
    expected = (1, encoded["input_ids"].shape[1], config.vocab_size)
    if tuple(logits.shape) != expected:
        raise CcpoError(
            f"{folder}: the forward pass gave logits of shape {list(logits.shape)}, expected {list(expected)}"
        )
    if not bool(torch.isfinite(logits).all()):
        raise CcpoError(
            f"{folder}: the forward pass gave non-finite logits (NaN or inf): the merged weights are broken"
        )
    return {
        "input_tokens": expected[1],
        "logits_shape": list(expected),
        "finite": True,
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
        "seconds": round(time.monotonic() - started, 3),
    }


def verify_merged_model(folder: str | Path) -> dict[str, Any]:
    """Check the merged folder against its config and by a forward pass; the verification record."""
    from transformers import AutoConfig

    folder = Path(folder)
    try:
        config = AutoConfig.from_pretrained(str(folder))
    except (OSError, ValueError) as error:
        raise CcpoError(
            f"{folder}: the merged model has no readable config.json ({error})"
        ) from None
    architectures = list(getattr(config, "architectures", None) or [])
    if not any(name.endswith("ForCausalLM") for name in architectures):
        raise CcpoError(
            f"{folder}: architecture {architectures or 'not recorded'} is not a causal language "
            "model; ccpo evaluates and publishes causal LMs only"
        )
    tensors = compare_with_config(folder, config)
    forward = forward_pass(folder, config)
    return {
        "passed": True,
        "architecture": architectures[0],
        "against": "config.json",
        **tensors,
        "forward": forward,
    }
