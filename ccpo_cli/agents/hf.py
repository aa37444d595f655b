"""A `transformers` causal language model as an ALFWorld agent.

Each prompt goes through the tokenizer's chat template as a single user message (as
verl-agent does), prompts are left-padded and generated in batches, and responses are sampled
at the given temperature (greedy at temperature 0) with no top-k or top-p truncation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ccpo_cli.agents.base import TextPolicyAgent
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.extras import require_extra
from ccpo_cli.vocabulary import EVAL_TEMPERATURE

DEFAULT_MAX_NEW_TOKENS = 512
DEFAULT_BATCH_SIZE = 8


def chat_prompt(tokenizer: Any, prompt: str) -> str:
    """The model input for one prompt: a single user turn plus the generation cue."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInput(
            "the tokenizer has no chat template (tokenizer_config.json: chat_template)"
        )
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )


def check_model_folder(path: str | Path) -> None:
    """Refuse a local folder that is not a Hugging Face model folder, naming what it is instead.

    A verl checkpoint (FSDP shards under actor/) is only loadable once merged; `ccpo eval` and
    `ccpo publish` do that (ccpo_cli/backends/verl/checkpoint.py), the agents take the result."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "config.json").is_file():
        return
    if (folder / "actor").is_dir() or any(folder.glob("model_world_size_*_rank_*.pt")):
        raise InvalidInput(
            f"{path}: a verl checkpoint, not a model folder; `ccpo eval --model` merges it "
            "with verl-agent's model merger (set VERL_AGENT_HOME)"
        )
    raise InvalidInput(f"{path}: not a model folder (no config.json)")


# What a model needs to load; a repository's other formats (ONNX, GGUF, ...) are never fetched.
MODEL_FILE_PATTERNS = ("*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken", "*.jinja")


def download_model(repo_id: str) -> Path:
    """Fetch a Hub model's config, tokenizer and weights into the Hugging Face cache through
    ccpo's one Hub client (hub_access.py): every request under its timeouts, the answers its retry rule
    names (408, 429, 500, 502-504) and an unreachable Hub tried again; a timeout ends the download at
    its first attempt (the same request now would meet the same fault). The whole download within
    the Hub deadline (CCPO_HUB_DEADLINE, else 900 s: a model's size is not known up front). A Hub that fails, refuses or never answers is exit 4. PyTorch `.bin` weights are fetched
    only when the repository has no safetensors."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import validate_repo_id

    from ccpo_cli.hub_access import HubClient, hub_timeouts, resolve_timeouts

    try:
        validate_repo_id(repo_id)
    except ValueError:
        raise InvalidInput(
            f"--model {repo_id}: no such folder, and not a Hub model id either"
        ) from None
    timeouts = resolve_timeouts()
    client = HubClient(None, None, repo_id, timeouts)
    # One call of unknown size: every read is bounded, the whole by the command's deadline.
    with hub_timeouts(timeouts):
        folder = Path(
            client.call(
                "downloading the model",
                snapshot_download,
                repo_id,
                allow_patterns=list(MODEL_FILE_PATTERNS),
                whole_deadline=True,
            )
        )
        if not any(folder.glob("*.safetensors")):
            folder = Path(
                client.call(
                    "downloading the model",
                    snapshot_download,
                    repo_id,
                    allow_patterns=[*MODEL_FILE_PATTERNS, "*.bin"],
                    whole_deadline=True,
                )
            )
    return folder


def load_model_and_tokenizer(path: str | Path, device: str = "cpu"):
    """Load a causal LM and its tokenizer from a local folder, or a Hub id fetched first."""
    require_extra("local", "transformers", what="the hf agent")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_folder(path)
    if not Path(path).exists():
        path = download_model(str(path))
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path))
        model = AutoModelForCausalLM.from_pretrained(str(path))
    except (OSError, ValueError) as error:
        first_line = (
            str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        )
        raise InvalidInput(f"{path}: cannot load a causal language model ({first_line})") from None
    return model.to(device), tokenizer


class HFAgent(TextPolicyAgent):
    name = "hf"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        temperature: float = EVAL_TEMPERATURE,
        seed: int = 0,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        device: str | None = None,
    ):
        torch = require_extra("local", "torch", what="the hf agent")
        if temperature < 0:
            raise InvalidInput(f"--temperature must be >= 0, got {temperature}")
        if isinstance(model, (str, Path)):
            device = device or ("cuda" if torch.cuda.is_available() else "cpu")
            model, tokenizer = load_model_and_tokenizer(model, device)
        elif tokenizer is None:
            raise CcpoError("HFAgent: a model object needs its tokenizer")
        if not getattr(tokenizer, "chat_template", None):
            raise InvalidInput(
                "the model's tokenizer has no chat template (tokenizer_config.json: chat_template)"
            )
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.temperature = float(temperature)
        self.max_new_tokens = int(max_new_tokens)
        self.batch_size = max(1, int(batch_size))
        self.seed = seed
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._torch = torch
        self.start(seed)

    def start(self, seed: int) -> None:
        self.seed = seed
        self._torch.manual_seed(seed)

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured])
        return sorted(i for i in ids if i is not None)

    def _generation_config(self):
        """Sampling as verl-agent's rollout does it: plain temperature sampling, no top-k/top-p
        truncation and no repetition penalty, whatever the checkpoint's generation_config.json
        suggests (instruct checkpoints often ship top_k/top_p/repetition_penalty defaults)."""
        from transformers import GenerationConfig

        options = {
            "max_new_tokens": self.max_new_tokens,
            "pad_token_id": self.tokenizer.pad_token_id,
            "eos_token_id": self._stop_token_ids(),
            "repetition_penalty": 1.0,
        }
        if self.temperature == 0:
            return GenerationConfig(
                do_sample=False, top_k=None, top_p=None, temperature=None, **options
            )
        return GenerationConfig(
            do_sample=True, temperature=self.temperature, top_k=0, top_p=1.0, **options
        )

    def _generate_batch(self, prompts: Sequence[str]) -> list[str]:
        texts = [chat_prompt(self.tokenizer, prompt) for prompt in prompts]
        # no token_type_ids: a decoder's generate() refuses them, and a generic fast tokenizer
        # (PreTrainedTokenizerFast under transformers 4.x) emits them by default
        encoded = self.tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=False,
            return_token_type_ids=False,
        ).to(self.model.device)
        with self._torch.inference_mode():
            output = self.model.generate(**encoded, generation_config=self._generation_config())
        generated = output[:, encoded["input_ids"].shape[1] :]
        return self.tokenizer.batch_decode(generated, skip_special_tokens=True)

    def generate(self, prompts: Sequence[str]) -> list[str]:
        responses: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            responses.extend(self._generate_batch(prompts[start : start + self.batch_size]))
        return responses


def make_hf_agent(
    model: str | None, *, temperature: float = EVAL_TEMPERATURE, seed: int = 0, **options: Any
) -> HFAgent:
    """Registry factory: `--agent hf --model PATH`."""
    if not model:
        raise InvalidInput("--agent hf needs --model PATH")
    return HFAgent(model, temperature=temperature, seed=seed, **options)
