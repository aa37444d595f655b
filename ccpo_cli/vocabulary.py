"""ccpo's small fixed words and numbers, each named once (docs/architecture.md §3, "Vocabulary").

Every command-line choice, completion list and check reads its words from here, so a new backend
or agent kind is one edit. This module imports nothing: `--help` and completion load it for free.
"""

from __future__ import annotations

LOCAL = "local"  # the CPU trainer (docs/local-backend.md)
VERL = "verl"  # verl-agent on GPUs (docs/verl-backend.md)
BACKENDS: tuple[str, ...] = (LOCAL, VERL)

# `ccpo eval --agent`: the planner, uniform random play, a Hugging Face model, vLLM, the local
# backend's own policy (registered by ccpo_cli/evaluation.py so the agents never name a backend).
HF = "hf"
VLLM = "vllm"
AGENT_KINDS: tuple[str, ...] = ("oracle", "random", HF, VLLM, LOCAL)
# The agents that load a language model (and take its generation options) ...
MODEL_AGENT_KINDS: tuple[str, ...] = (HF, VLLM)
# ... and those whose actions are sampled from a policy at a temperature.
SAMPLING_AGENT_KINDS: tuple[str, ...] = (HF, VLLM, LOCAL)

# A card is interim while its run trains and final once it ended (docs/publishing.md).
INTERIM = "interim"
FINAL = "final"
CARD_STATUSES: tuple[str, ...] = (INTERIM, FINAL)

# `ccpo ingest --input-format`: auto-detected, or one reader named (docs/runs-db.md, "Ingest").
AUTO = "auto"
CCPO_JSONL = "ccpo"  # ccpo's own metrics.jsonl: flat objects
VERL_FILE = "verl-file"  # verl-agent's file logger: metrics under "data"
CONSOLE = "console"
CSV = "csv"
TENSORBOARD = "tensorboard"
WANDB = "wandb"
INGEST_FORMATS: tuple[str, ...] = (AUTO, CCPO_JSONL, VERL_FILE, CONSOLE, CSV, TENSORBOARD, WANDB)
INGEST_FOLDER_FORMATS: tuple[str, ...] = (TENSORBOARD, WANDB)

# The temperature of every held-out evaluation: verl-agent's validation sampling temperature, so
# the local backend, `ccpo eval` and the verl runs report success at the same sampling.
EVAL_TEMPERATURE = 0.4


def one_of(words: tuple[str, ...]) -> str:
    """The words as a help text or a refusal lists them: `local | verl`."""
    return " | ".join(words)
