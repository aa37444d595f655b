"""Agent kinds by name: `make_agent("oracle" | "random" | "hf" | "vllm" | "local", ...)`.

Built-in kinds are imported lazily (so `oracle` never imports torch and `vllm` is only needed
when asked for). The `local` kind, the CPU policy of the local backend, lives a layer below the
agents (docs/architecture.md §1), so the agents never name it: `ccpo_cli.evaluation`, which
may import the backends, registers it lazily with `register_lazy_agent`. Other kinds register a
factory:

    from ccpo_cli.agents.registry import register_agent
    register_agent("mine", make_my_agent)

A factory is called as `factory(model, temperature=..., seed=..., **options)` and returns an
`ccpo_cli.agents.base.Agent`; `model` is the `--model` path (None when not given).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any

from ccpo_cli import vocabulary
from ccpo_cli.agents.base import Agent, SlotAgentAdapter
from ccpo_cli.errors import CcpoError, InvalidInput

AgentFactory = Callable[..., Agent]

# name -> factory, filled by register_agent
AGENT_FACTORIES: dict[str, AgentFactory] = {}

AGENT_KINDS = vocabulary.AGENT_KINDS

# built-in kinds: "module:function" resolved on first use (`local` is added by register_lazy_agent)
_BUILTIN_FACTORIES = {
    "oracle": "ccpo_cli.agents.registry:make_oracle_agent",
    "random": "ccpo_cli.agents.registry:make_random_agent",
    "hf": "ccpo_cli.agents.hf:make_hf_agent",
    "vllm": "ccpo_cli.agents.vllm_agent:make_vllm_agent",
}
NEEDS_MODEL = {"hf", "vllm"}


def make_oracle_agent(model: str | None = None, **_: Any) -> Agent:
    """The planner's walkthrough (deterministic; temperature and seed do not apply)."""
    from ccpo_cli.agents.oracle import OracleAgent

    return SlotAgentAdapter("oracle", lambda seed: OracleAgent(), needs_walkthrough=True)


def make_random_agent(model: str | None = None, *, seed: int = 0, **_: Any) -> Agent:
    """Uniform over the admissible commands; each evaluation seed reseeds it."""
    from ccpo_cli.agents.random_agent import RandomAgent

    return SlotAgentAdapter("random", lambda eval_seed: RandomAgent(seed=eval_seed))


def register_agent(kind: str, factory: AgentFactory) -> None:
    AGENT_FACTORIES[kind] = factory


def register_lazy_agent(kind: str, target: str) -> None:
    """A kind whose factory ("module:function") is imported on first use, as the built-ins are."""
    _BUILTIN_FACTORIES.setdefault(kind, target)


def _resolve(kind: str) -> AgentFactory:
    if kind in AGENT_FACTORIES:
        return AGENT_FACTORIES[kind]
    target = _BUILTIN_FACTORIES.get(kind)
    if target is None:
        if kind in AGENT_KINDS:
            raise CcpoError(
                f"the '{kind}' agent is not available in this installation (nothing registered it)"
            )
        known = ", ".join(sorted(set(AGENT_KINDS) | set(AGENT_FACTORIES)))
        raise InvalidInput(f"unknown agent '{kind}' (known: {known})")
    module_name, function_name = target.split(":")
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as error:  # e.g. no torch in this installation
        raise CcpoError(
            f"the '{kind}' agent is not available in this installation ({error})"
        ) from None
    return getattr(module, function_name)


def make_agent(
    kind: str,
    model: str | None = None,
    *,
    temperature: float = vocabulary.EVAL_TEMPERATURE,
    seed: int = 0,
    **options: Any,
) -> Agent:
    """An agent of the given kind; hf and vllm need `model` (a local folder or hub id)."""
    if kind in NEEDS_MODEL and not model:
        raise InvalidInput(f"--agent {kind} needs --model PATH")
    if temperature < 0:
        raise InvalidInput(f"--temperature must be >= 0, got {temperature}")
    factory = _resolve(kind)
    return factory(model, temperature=temperature, seed=seed, **options)
