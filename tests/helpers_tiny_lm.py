"""A tiny randomly initialised Qwen2 causal LM with a tokenizer trained here on game text.

Nothing is downloaded: the byte-level BPE tokenizer is trained with the `tokenizers` library on
the texts given (ALFWorld observations, prompts), wrapped in a `PreTrainedTokenizerFast` with a
ChatML-style chat template, and the model is built from a `Qwen2Config`. Reused by tests of the
hf agent and of the verl backend (hidden-state capture).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
PAD = "<|endoftext|>"

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# Enough ALFWorld-flavoured text that the tokenizer learns common words even without games.
BASE_CORPUS = [
    "-= Welcome to TextWorld, ALFRED! =- You are in the middle of a room. Looking quickly "
    "around you, you see a cabinet 1, a countertop 1, a fridge 1, a microwave 1, a sinkbasin 1, "
    "a desk 1, a drawer 2, a shelf 1, a sidetable 1 and a desklamp 1.",
    "Your task is to: put a clean apple in countertop. Your task is to: look at alarmclock "
    "under the desklamp. Your task is to: put two book in sidetable. Your task is to: heat "
    "some egg and put it in diningtable. Your task is to: cool some lettuce and put it in fridge.",
    "go to fridge 1 open fridge 1 close fridge 1 take apple 1 from countertop 1 "
    "move apple 1 to countertop 1 put apple 1 in/on sidetable 1 heat apple 1 with microwave 1 "
    "cool apple 1 with fridge 1 clean apple 1 with sinkbasin 1 use desklamp 1 examine desk 1 "
    "inventory look help Nothing happens. You arrive at fridge 1. The fridge 1 is closed.",
    "<think> I need to find the apple first, then heat it. </think><action>go to fridge 1</action>",
]


def train_tokenizer(texts: Iterable[str] = (), vocab_size: int = 600):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `texts` plus a small base corpus."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[PAD, IM_START, IM_END],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator(list(texts) + BASE_CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=IM_END, pad_token=PAD, bos_token=None
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_qwen2(tokenizer, *, hidden_size: int = 32, layers: int = 2, heads: int = 2, seed: int = 0):
    """A randomly initialised `Qwen2ForCausalLM` sized for `tokenizer`."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def tiny_lm(texts: Iterable[str] = (), **model_options):
    """(model, tokenizer) ready for the hf agent."""
    tokenizer = train_tokenizer(texts)
    return tiny_qwen2(tokenizer, **model_options), tokenizer


def save_tiny_lm(folder: Path, texts: Iterable[str] = (), **model_options) -> Path:
    """Write the tiny model and tokenizer as a local folder loadable with from_pretrained."""
    model, tokenizer = tiny_lm(texts, **model_options)
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
