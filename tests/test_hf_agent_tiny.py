"""The hf agent with a tiny randomly initialised Qwen2 and a tokenizer trained here on game text."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers_tiny_lm import IM_START, save_tiny_lm, tiny_lm
from typer.testing import CliRunner

from ccpo_cli.agents.evaluate import evaluate
from ccpo_cli.agents.hf import HFAgent, chat_prompt
from ccpo_cli.agents.projection import project_action
from ccpo_cli.agents.prompts import first_turn_prompt
from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    from ccpo_cli.envs import generate_games

    folder = tmp_path_factory.mktemp("hf-games")
    generate_games(folder, "heldout", 2, seed=3)
    return folder


@pytest.fixture(scope="module")
def game_text(games) -> list[str]:
    """Observations and admissible commands of the games' first turn: the tokenizer's corpus."""
    from ccpo_cli.envs import AlfworldBatchEnv, find_games

    with AlfworldBatchEnv(find_games(games), workers=0) as env:
        observations, infos = env.reset()
    texts = list(observations)
    for observation, info in zip(observations, infos):
        texts.append(first_turn_prompt(observation, info["admissible_commands"]))
    return texts


@pytest.fixture(scope="module")
def model_and_tokenizer(game_text):
    return tiny_lm(game_text)


def test_tokenizer_round_trips_game_text_and_has_a_chat_template(model_and_tokenizer, game_text):
    _, tokenizer = model_and_tokenizer
    sample = game_text[0]
    assert tokenizer.decode(tokenizer(sample)["input_ids"]) == sample
    text = chat_prompt(tokenizer, "hello")
    assert text == f"{IM_START}user\nhello<|im_end|>\n{IM_START}assistant\n"


def test_batched_left_padded_greedy_generation_matches_one_at_a_time(
    model_and_tokenizer, game_text
):
    model, tokenizer = model_and_tokenizer
    agent = HFAgent(model, tokenizer, temperature=0.0, max_new_tokens=6, batch_size=4)
    prompts = [game_text[2], "short prompt", game_text[3][:300]]
    batched = agent.generate(prompts)
    single = [agent.generate([prompt])[0] for prompt in prompts]
    assert len(batched) == 3
    assert batched == single


def test_sampling_is_reproducible_per_seed_and_depends_on_it(model_and_tokenizer, game_text):
    model, tokenizer = model_and_tokenizer
    agent = HFAgent(model, tokenizer, temperature=1.0, max_new_tokens=12)
    prompts = [game_text[2]] * 3
    agent.start(7)
    first = agent.generate(prompts)
    agent.start(7)
    assert agent.generate(prompts) == first
    agent.start(8)
    assert agent.generate(prompts) != first
    # sampling (not greedy): the three identical prompts do not all get one answer
    assert len(set(first)) > 1


def test_checkpoint_generation_defaults_do_not_change_sampling(model_and_tokenizer, game_text):
    """Instruct checkpoints ship top_k/top_p/repetition_penalty defaults; verl-agent samples
    with none of them, and so does the agent."""
    model, tokenizer = model_and_tokenizer
    prompts = [game_text[2], game_text[3][:200]]
    plain = HFAgent(model, tokenizer, temperature=1.0, max_new_tokens=10, seed=2).generate(prompts)
    saved = model.generation_config.to_dict()
    try:
        model.generation_config.top_k = 2
        model.generation_config.top_p = 0.5
        model.generation_config.repetition_penalty = 5.0
        assert (
            HFAgent(model, tokenizer, temperature=1.0, max_new_tokens=10, seed=2).generate(prompts)
            == plain
        )
    finally:
        for key in ("top_k", "top_p", "repetition_penalty"):
            setattr(model.generation_config, key, saved.get(key))


def test_negative_temperature_is_refused(model_and_tokenizer):
    model, tokenizer = model_and_tokenizer
    with pytest.raises(InvalidInput):
        HFAgent(model, tokenizer, temperature=-0.1)


def test_hf_agent_plays_real_games_and_invalid_turns_are_recorded(model_and_tokenizer, games):
    from ccpo_cli.envs import find_games

    model, tokenizer = model_and_tokenizer
    agent = HFAgent(model, tokenizer, temperature=1.0, max_new_tokens=16, batch_size=2)
    results = evaluate(agent, find_games(games), seeds=[0], workers=0, max_steps=3)
    episodes = results[0].episodes
    assert len(episodes) == 2
    for episode in episodes:
        assert episode.turns == 3 and not episode.won
        assert len(episode.responses) == len(episode.invalid_flags) == 3
        for response, flag, command in zip(
            episode.responses, episode.invalid_flags, episode.commands
        ):
            assert (command, not flag) == tuple(project_action(response))
    # a random tiny model cannot write the tag format: (almost) every turn is invalid
    assert results[0].invalid_turn_rate >= 50.0
    row = episodes[0].as_row()
    assert row["invalid_turns"] == sum(row["invalid_flags"]) == episodes[0].invalid_turns


def test_ccpo_eval_with_a_saved_tiny_model(tmp_path, games, game_text):
    model_dir = save_tiny_lm(tmp_path / "tiny", game_text)
    db = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(db),
            "--quiet",
            "eval",
            "--run",
            "tiny",
            "--agent",
            "hf",
            "--model",
            str(model_dir),
            "--games",
            str(games),
            "--max-steps",
            "2",
            "--max-new-tokens",
            "8",
            "--temperature",
            "0.7",
            "--workers",
            "0",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    evaluation = document["evaluations"][0]
    assert evaluation["episodes"] == 2 and evaluation["successes"] == 0
    assert evaluation["mean_turns"] == 2
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT temperature FROM evaluations").fetchall() == [(0.7,)]
        rows = connection.execute("SELECT turns, invalid_turns, extra FROM episodes").fetchall()
    assert len(rows) == 2
    for turns, invalid_turns, extra in rows:
        flags = json.loads(extra)["invalid_flags"]
        assert turns == 2 and len(flags) == 2 and invalid_turns == sum(flags)


def test_a_folder_without_a_model_is_exit_3(tmp_path, games):
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "eval",
            "--run",
            "x",
            "--agent",
            "hf",
            "--model",
            str(tmp_path),
            "--games",
            str(games),
            "--workers",
            "0",
        ],
    )
    assert result.exit_code == 3
    assert str(tmp_path) in result.output


def test_a_tokenizer_without_chat_template_is_refused_up_front(model_and_tokenizer):
    import copy

    model, tokenizer = model_and_tokenizer
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = None
    with pytest.raises(InvalidInput, match="chat template"):
        HFAgent(model, plain)
