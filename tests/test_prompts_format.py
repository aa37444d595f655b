"""The prompt a text policy sees, byte for byte (verl-agent layout, history length 2)."""

from __future__ import annotations

import pytest

from ccpo_cli.agents.prompts import (
    EpisodePrompter,
    extract_task,
    first_turn_prompt,
    format_admissible,
    format_history,
)

INTRO = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly "
    "around you, you see a fridge 1, a microwave 1, and a sinkbasin 1.\n\n"
    "Your task is to: put a hot apple in fridge."
)
# verl-agent's wording, verbatim (trailing space before the newline included).
INSTRUCTION = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)


def test_admissible_list_is_quoted_newline_space_joined_without_help():
    assert format_admissible(["go to fridge 1", "help", "look"]) == "'go to fridge 1'\n 'look'"
    assert format_admissible(["help"]) == ""


def test_task_is_the_text_after_the_marker():
    assert extract_task(INTRO) == "put a hot apple in fridge."
    with pytest.raises(ValueError):
        extract_task("You are in a room.")


def test_first_turn_prompt_exact_text():
    expected = (
        "\nYou are an expert agent operating in the ALFRED Embodied Environment.\n"
        f"Your current observation is: {INTRO}\n"
        "Your admissible actions of the current situation are: ['go to fridge 1'\n 'look'].\n"
        "\n"
        f"{INSTRUCTION}\n"
    )
    assert first_turn_prompt(INTRO, ["go to fridge 1", "help", "look"]) == expected


def test_history_entries_use_absolute_step_numbers_and_newlines():
    text = format_history([("obs a", "look"), ("obs b", "go to fridge 1")], first_step=4)
    assert (
        text
        == "[Observation 4: 'obs a', Action 4: 'look']\n[Observation 5: 'obs b', Action 5: 'go to fridge 1']"
    )


def play(prompter, turns):
    """Feed (observation, admissible, command) turns; return every prompt."""
    prompts = []
    for observation, admissible, command in turns:
        prompts.append(prompter.prompt(observation, admissible))
        prompter.record(command)
    return prompts


def test_episode_prompts_keep_the_last_two_pairs_with_the_observation_before_each_action():
    prompter = EpisodePrompter()  # history length 2 by default
    prompts = play(
        prompter,
        [
            (INTRO, ["go to fridge 1", "go to microwave 1"], "go to fridge 1"),
            ("You arrive at fridge 1. The fridge 1 is closed.", ["open fridge 1"], "open fridge 1"),
            (
                "You open the fridge 1. In it, you see a apple 1.",
                ["take apple 1 from fridge 1"],
                "take apple 1 from fridge 1",
            ),
        ],
    )
    prompts.append(
        prompter.prompt("You pick up the apple 1 from the fridge 1.", ["go to microwave 1", "help"])
    )

    assert prompts[0] == first_turn_prompt(INTRO, ["go to fridge 1", "go to microwave 1"])
    assert prompts[1] == (
        "\nYou are an expert agent operating in the ALFRED Embodied Environment. "
        "Your task is to: put a hot apple in fridge.\n"
        "Prior to this step, you have already taken 1 step(s). Below are the most recent 1 "
        "observaitons and the corresponding actions you took: "
        f"[Observation 1: '{INTRO}', Action 1: 'go to fridge 1']\n"
        "You are now at step 2 and your current observation is: You arrive at fridge 1. The fridge 1 is closed.\n"
        "Your admissible actions of the current situation are: ['open fridge 1'].\n"
        "\n"
        f"{INSTRUCTION}\n"
    )
    assert prompts[3] == (
        "\nYou are an expert agent operating in the ALFRED Embodied Environment. "
        "Your task is to: put a hot apple in fridge.\n"
        "Prior to this step, you have already taken 3 step(s). Below are the most recent 2 "
        "observaitons and the corresponding actions you took: "
        "[Observation 2: 'You arrive at fridge 1. The fridge 1 is closed.', Action 2: 'open fridge 1']\n"
        "[Observation 3: 'You open the fridge 1. In it, you see a apple 1.', Action 3: 'take apple 1 from fridge 1']\n"
        "You are now at step 4 and your current observation is: You pick up the apple 1 from the fridge 1.\n"
        "Your admissible actions of the current situation are: ['go to microwave 1'].\n"
        "\n"
        f"{INSTRUCTION}\n"
    )
    # the first observation (with the task) has left the window
    assert INTRO not in prompts[3]


def test_history_length_zero_always_uses_the_first_turn_layout():
    prompter = EpisodePrompter(history_length=0)
    prompts = play(prompter, [(INTRO, ["look"], "look"), ("Nothing happens.", ["look"], "look")])
    assert prompts[1] == first_turn_prompt("Nothing happens.", ["look"])


def test_record_without_prompt_is_refused():
    with pytest.raises(RuntimeError):
        EpisodePrompter().record("look")
