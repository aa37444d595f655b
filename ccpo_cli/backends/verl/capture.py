"""The frozen reference model's hidden state at the last prompt token (CCPO's `phi_feats`).

A forward hook on the model's final norm keeps that one (tokens, hidden) tensor instead of
asking for every layer's hidden states. verl left-pads prompts and right-pads responses to one
width, so a row's last prompt token sits at column `seqlen - response_length - 1`:

* padded layout: the norm output is (batch, seqlen, hidden); take that column;
* packed layout (`use_remove_padding`): the norm output is (1, kept_tokens, hidden) over the
  tokens the attention mask keeps, in row-major order, `indices` being their flat positions
  `row * seqlen + column`; the wanted flat positions are found with a sorted search.

A masked last-prompt column (a prompt that was truncated or empty) is an error, never a silent
zero row. Features come back detached, float32, on the CPU.
"""

from __future__ import annotations

from typing import Any

import torch

# Attribute names under which wrappers (FSDP, activation checkpointing, PEFT, DDP) keep the
# module they wrap.
_WRAPPER_ATTRIBUTES = (
    "_fsdp_wrapped_module",
    "_checkpoint_wrapped_module",
    "module",
    "base_model",
    "model",
)


class CaptureError(RuntimeError):
    """The reference features could not be taken faithfully."""


def find_final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder's final norm (`model.norm` in Qwen2/Llama), looked up through wrappers."""
    seen: set[int] = set()
    frontier = [model]
    while frontier:
        module = frontier.pop(0)
        if id(module) in seen:
            continue
        seen.add(id(module))
        norm = getattr(module, "norm", None)
        if isinstance(norm, torch.nn.Module) and hasattr(module, "layers"):
            return norm
        for name in _WRAPPER_ATTRIBUTES:
            inner = getattr(module, name, None)
            if isinstance(inner, torch.nn.Module):
                frontier.append(inner)
    raise CaptureError(
        f"no final norm (a module with `layers` and `norm`) inside {type(model).__name__}"
    )


class FinalNormCapture:
    """Context manager: while active, `hidden` holds the final norm's latest output."""

    def __init__(self, model: torch.nn.Module):
        self.norm = find_final_norm(model)
        self.hidden: torch.Tensor | None = None
        self._handle: Any = None

    def _keep(self, _module: torch.nn.Module, _inputs: Any, output: Any) -> None:
        tensor = output[0] if isinstance(output, (tuple, list)) else output
        self.hidden = tensor.detach()

    def __enter__(self) -> FinalNormCapture:
        self.hidden = None
        self._handle = self.norm.register_forward_hook(self._keep)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None

    def take(self) -> torch.Tensor:
        if self.hidden is None:
            raise CaptureError("the final norm did not run during the captured forward")
        hidden, self.hidden = self.hidden, None
        return hidden


def last_prompt_column(seqlen: int, response_length: int) -> int:
    column = seqlen - response_length - 1
    if column < 0:
        raise CaptureError(
            f"sequence length {seqlen} leaves no prompt before {response_length} response tokens"
        )
    return column


def _as_features(rows: torch.Tensor) -> torch.Tensor:
    features = rows.detach().to(device="cpu", dtype=torch.float32)
    if not torch.isfinite(features).all():
        raise CaptureError("non-finite reference hidden state at the last prompt token")
    return features


def last_prompt_features_padded(
    hidden: torch.Tensor, attention_mask: torch.Tensor, response_length: int
) -> torch.Tensor:
    """(batch, hidden) features from a (batch, seqlen, hidden) norm output."""
    if hidden.dim() != 3 or hidden.shape[:2] != attention_mask.shape:
        raise CaptureError(
            f"padded norm output {tuple(hidden.shape)} does not match mask {tuple(attention_mask.shape)}"
        )
    column = last_prompt_column(attention_mask.shape[1], response_length)
    masked = (attention_mask[:, column] == 0).nonzero().flatten().tolist()
    if masked:
        raise CaptureError(f"rows {masked[:8]} have a masked last prompt token (column {column})")
    return _as_features(hidden[:, column, :])


def last_prompt_features_packed(
    hidden: torch.Tensor, indices: torch.Tensor, attention_mask: torch.Tensor, response_length: int
) -> torch.Tensor:
    """(batch, hidden) features from a packed norm output.

    `hidden` is (1, kept, hidden) or (kept, hidden); `indices` (kept,) are the ascending flat
    positions `row * seqlen + column` of the kept tokens (what unpadding returns).
    """
    flat = hidden.reshape(-1, hidden.shape[-1])
    if flat.shape[0] != indices.numel():
        raise CaptureError(
            f"packed norm output has {flat.shape[0]} tokens but {indices.numel()} indices"
        )
    batch, seqlen = attention_mask.shape
    column = last_prompt_column(seqlen, response_length)
    indices = indices.to(device="cpu", dtype=torch.long).flatten()
    wanted = torch.arange(batch, dtype=torch.long) * seqlen + column
    positions = torch.searchsorted(indices, wanted)
    in_range = positions < indices.numel()
    safe = positions.clamp(max=max(indices.numel() - 1, 0))
    found = in_range & (indices[safe] == wanted) if indices.numel() else in_range
    if not bool(found.all()):
        missing = (~found).nonzero().flatten().tolist()
        raise CaptureError(
            f"rows {missing[:8]} have no kept token at the last prompt column {column}"
        )
    return _as_features(flat[safe.to(flat.device)])


def row_keys(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> list[bytes]:
    """A content key per row (its kept token ids and their columns), stable across reordering."""
    ids = input_ids.detach().to("cpu", torch.int64)
    mask = attention_mask.detach().to("cpu", torch.bool)
    keys = []
    for row in range(ids.shape[0]):
        kept = mask[row].nonzero().flatten()
        keys.append(kept.numpy().tobytes() + b"|" + ids[row, kept].numpy().tobytes())
    return keys


class ReferenceFeatureRecorder:
    """Collects last-prompt-token features over the micro-batches of one reference pass.

    The trainer may regroup and reorder rows into micro-batches (dynamic batch size), so
    features are kept by row content and handed back in the order of the batch that asked for
    them; padding copies of a row share its inputs and so its features.
    """

    def __init__(self) -> None:
        self._by_key: dict[bytes, torch.Tensor] = {}

    def record(
        self,
        hidden: torch.Tensor,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        response_length: int,
        *,
        packed: bool,
    ) -> None:
        if packed:
            indices = attention_mask.detach().flatten().nonzero().flatten()
            features = last_prompt_features_packed(hidden, indices, attention_mask, response_length)
        else:
            features = last_prompt_features_padded(hidden, attention_mask, response_length)
        for key, row in zip(row_keys(input_ids, attention_mask), features):
            self._by_key[key] = row

    def features_for(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        keys = row_keys(input_ids, attention_mask)
        missing = [row for row, key in enumerate(keys) if key not in self._by_key]
        if missing:
            raise CaptureError(f"no reference features recorded for rows {missing[:8]}")
        return torch.stack([self._by_key[key] for key in keys])

    def clear(self) -> None:
        self._by_key.clear()
