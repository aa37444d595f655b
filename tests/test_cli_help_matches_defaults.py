"""One vocabulary: the help says what the code does, and each small fact is named once.

Backends, agent kinds, card statuses, ingest formats and the evaluation temperature come from
`ccpo_cli/vocabulary.py`; an option of the other backend is refused when it was typed, whatever
its value (Click's parameter source), not when it differs from a restated default.
"""

from __future__ import annotations

import inspect
import re

import typer
from typer.testing import CliRunner

from ccpo_cli import vocabulary
from ccpo_cli.cli.app import app

runner = CliRunner()


def leaf_commands():
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for sub_name, leaf in (getattr(command, "commands", None) or {None: command}).items():
            yield (name if sub_name is None else f"{name} {sub_name}"), leaf


def test_an_option_of_the_other_backend_is_refused_even_at_its_default_value(tmp_path):
    db = str(tmp_path / "runs.db")
    for args, named in (
        (["--backend", "local", "--nnodes", "1"], "--nnodes"),
        (["--backend", "local", "--host-profile", "reference"], "--host-profile"),
        (["--backend", "verl", "--eval-from", "0"], "--eval-from"),
    ):
        result = runner.invoke(app, ["--db", db, "train", "--arm", "grpo", *args, "--dry-run"])
        assert result.exit_code == 2, result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and named in lines[0] and "only apply to --backend" in lines[0]


def test_the_local_backend_without_verl_options_is_not_refused(tmp_path):
    result = runner.invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--steps",
            "2",
            "--dry-run",
        ],
    )
    assert result.exit_code == 0, result.stderr


def used_defaults() -> dict[tuple[str, str], float]:
    """What the code falls back to for each option whose help states its default in words
    (the option itself defaults to None: the library decides)."""
    from ccpo_cli.agents.hf import DEFAULT_MAX_NEW_TOKENS
    from ccpo_cli.backends.local.config import TrainConfig
    from ccpo_cli.cli.train import seed_list
    from ccpo_cli.hub_sync import SyncLimits
    from ccpo_cli.publishing.target import PushTarget

    mib = 1 << 20
    return {
        ("train", "--seed"): seed_list(None, None)[0],
        ("train", "--eval-from"): TrainConfig().eval_from,
        ("train", "--push-wait"): PushTarget.__dataclass_fields__["end_wait_s"].default,
        ("eval", "--max-new-tokens"): DEFAULT_MAX_NEW_TOKENS,
        ("sync push", "--max-mb"): SyncLimits().max_push_bytes / mib,
        ("sync pull", "--max-mb"): SyncLimits().max_pull_bytes / mib,
    }


def test_every_default_a_help_text_states_is_the_default_the_code_uses():
    """A help text that states a number as its option's default names the value the option has,
    or, for an option left to the library (None), the value the library falls back to."""
    stated = re.compile(
        r"[Dd]efault:? (-?[0-9]+(?:\.[0-9]+)?)(?![0-9/])"
    )  # a number, not a share (7/15)
    used = used_defaults()
    seen = set()
    for name, command in leaf_commands():
        for param in command.params:
            match = stated.search(getattr(param, "help", None) or "")
            if not match:
                continue
            value = float(match.group(1))
            key = (name, param.opts[0])
            actual = param.default if param.default is not None else used.get(key)
            assert actual is not None, (
                f"ccpo {name} {param.opts[0]}: help states default {value}; add what the code uses"
            )
            assert float(actual) == value, (
                f"ccpo {name} {param.opts[0]}: help says {value}, the code uses {actual}"
            )
            seen.add(key)
    assert seen >= set(used)  # every default named above is still stated in a help text


def test_the_evaluation_temperature_is_one_number_everywhere():
    from ccpo_cli.agents import registry
    from ccpo_cli.agents.hf import HFAgent, make_hf_agent
    from ccpo_cli.agents.vllm_agent import VLLMAgent, make_vllm_agent
    from ccpo_cli.backends.local.agent import LocalPolicyAgent, make_local_agent
    from ccpo_cli.backends.local.config import TrainConfig
    from ccpo_cli.evaluation import EvalOptions

    def default(function, name="temperature"):
        return inspect.signature(function).parameters[name].default

    assert vocabulary.EVAL_TEMPERATURE == 0.4  # verl-agent's validation temperature
    for function in (
        registry.make_agent,
        make_hf_agent,
        HFAgent,
        make_vllm_agent,
        VLLMAgent,
        make_local_agent,
        LocalPolicyAgent,
    ):
        assert default(function) == vocabulary.EVAL_TEMPERATURE, function
    assert TrainConfig().eval_temperature == vocabulary.EVAL_TEMPERATURE
    assert EvalOptions.__dataclass_fields__["temperature"].default == vocabulary.EVAL_TEMPERATURE
    root = typer.main.get_command(app)
    temperature = next(
        param for param in root.commands["eval"].params if param.name == "temperature"
    )
    assert temperature.default == vocabulary.EVAL_TEMPERATURE


def test_the_words_of_choices_and_completions_come_from_the_vocabulary():
    from ccpo_cli.agents.registry import AGENT_KINDS
    from ccpo_cli.cards.guards import STATUSES
    from ccpo_cli.cli import completion
    from ccpo_cli.store.readers import FORMATS

    assert completion.backend_names("") == list(vocabulary.BACKENDS)
    assert completion.agent_names("") == list(vocabulary.AGENT_KINDS) == list(AGENT_KINDS)
    assert STATUSES == vocabulary.CARD_STATUSES and FORMATS == vocabulary.INGEST_FORMATS
    result = runner.invoke(app, ["train", "--help"])
    assert result.exit_code == 0
    assert " | ".join(vocabulary.BACKENDS) in " ".join(result.output.split())
