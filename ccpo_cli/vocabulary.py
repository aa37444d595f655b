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
AGENT_KINDS: tuple[str, ...] = ("oracle", "random", "hf", "vllm", LOCAL)

# A card is interim while its run trains and final once it ended (docs/publishing.md).
INTERIM = "interim"
FINAL = "final"
CARD_STATUSES: tuple[str, ...] = (INTERIM, FINAL)

# `ccpo ingest --input-format`: auto-detected, or one reader named (docs/runs-db.md, "Ingest").
INGEST_FORMATS: tuple[str, ...] = (
    "auto",
    "ccpo",
    "verl-file",
    "console",
    "csv",
    "tensorboard",
    "wandb",
)
INGEST_FOLDER_FORMATS: tuple[str, ...] = ("tensorboard", "wandb")

# The temperature of every held-out evaluation: verl-agent's validation sampling temperature, so
# the local backend, `ccpo eval` and the verl runs report success at the same sampling.
EVAL_TEMPERATURE = 0.4


def one_of(words: tuple[str, ...]) -> str:
    """The words as a help text or a refusal lists them: `local | verl`."""
    return " | ".join(words)
