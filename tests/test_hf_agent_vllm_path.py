"""The vllm agent's prompt and sampling plumbing.

vLLM needs a CUDA GPU and is not installed on CPU machines, so its engine is replaced here by a
stand-in module that records what the agent asks of it (the real tiny tokenizer supplies the
chat template). The import guard itself is tested against the real environment, where vllm is
absent.
"""

from __future__ import annotations

import sys
import types

import pytest
from helpers_tiny_lm import IM_START, train_tokenizer

from ccpo_cli.agents.base import Turn
from ccpo_cli.agents.vllm_agent import VLLM_MISSING, VLLMAgent, import_vllm
from ccpo_cli.errors import CcpoError


def test_missing_vllm_is_a_runtime_error_with_exit_1():
    assert "vllm" not in sys.modules
    with pytest.raises(CcpoError) as caught:
        import_vllm()
    assert caught.value.exit_code == 1
    assert str(caught.value) == VLLM_MISSING


@pytest.fixture
def recording_vllm(monkeypatch):
    tokenizer = train_tokenizer()
    calls: dict = {"generate": []}

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class Completion:
        def __init__(self, text):
            self.outputs = [types.SimpleNamespace(text=text)]

    class LLM:
        def __init__(self, model, **kwargs):
            calls["init"] = dict(kwargs, model=model)

        def get_tokenizer(self):
            return tokenizer

        def generate(self, texts, params, use_tqdm=False):
            calls["generate"].append((list(texts), list(params)))
            return [
                Completion(f"<think>t</think><action>go to shelf {i}</action>")
                for i in range(len(texts))
            ]

    module = types.ModuleType("vllm")
    module.LLM, module.SamplingParams = LLM, SamplingParams
    monkeypatch.setitem(sys.modules, "vllm", module)
    return calls


def turn(slot: int, prompt: str) -> Turn:
    return Turn(
        slot=slot,
        game_id="g",
        step=0,
        observation="o",
        admissible=("look",),
        task="t",
        prompt=prompt,
    )


def test_prompts_go_through_the_chat_template_with_one_seed_per_request(recording_vllm):
    agent = VLLMAgent("some/model", temperature=0.4, seed=3, max_new_tokens=64)
    assert recording_vllm["init"]["seed"] == 3 and recording_vllm["init"]["model"] == "some/model"
    decisions = agent.act([turn(0, "first prompt"), turn(1, "second prompt")])
    assert [(d.command, d.is_valid) for d in decisions] == [
        ("go to shelf 0", True),
        ("go to shelf 1", True),
    ]
    texts, params = recording_vllm["generate"][0]
    assert texts[0] == f"{IM_START}user\nfirst prompt<|im_end|>\n{IM_START}assistant\n"
    assert [p.kwargs["temperature"] for p in params] == [0.4, 0.4]
    assert all(p.kwargs["max_tokens"] == 64 and p.kwargs["top_p"] == 1.0 for p in params)
    first_seeds = [p.kwargs["seed"] for p in params]
    assert len(set(first_seeds)) == 2
    # the next call draws new seeds; restarting the seed replays the same ones
    agent.act([turn(0, "a"), turn(1, "b")])
    assert [p.kwargs["seed"] for p in recording_vllm["generate"][1][1]] != first_seeds
    agent.start(3)
    agent.act([turn(0, "a"), turn(1, "b")])
    assert [p.kwargs["seed"] for p in recording_vllm["generate"][2][1]] == first_seeds
