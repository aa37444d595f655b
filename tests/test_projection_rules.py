"""verl-agent's ALFWorld action projection rules, one by one."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccpo_cli.agents.projection import FALLBACK_CHARS, project_action, project_actions


def test_well_formed_response_gives_the_stripped_lowercased_action():
    command, valid = project_action(
        "<think>The apple is in the fridge.</think><action>  Go to Fridge 1 </action>"
    )
    assert (command, valid) == ("go to fridge 1", True)


def test_first_action_pair_wins():
    response = "<think>x</think><action>open fridge 1</action> then <action>take apple 1</action>"
    assert project_action(response) == ("open fridge 1", True)


def test_inadmissible_but_well_formed_command_is_still_valid():
    assert project_action("<think>hm</think><action>fly to the moon</action>") == (
        "fly to the moon",
        True,
    )


def test_missing_action_pair_falls_back_to_last_30_lowercased_characters():
    response = (
        "<think>I will go somewhere</think> I choose: GO TO COUNTERTOP 1 right now, definitely."
    )
    command, valid = project_action(response)
    assert valid is False
    assert command == response.lower()[-30:]
    assert len(command) == FALLBACK_CHARS


def test_short_response_without_tags_is_sent_whole():
    assert project_action("Look") == ("look", False)


def test_unclosed_action_tag_is_no_pair():
    response = "<think>a</think><action>go to desk 1"
    assert project_action(response) == (response.lower()[-30:], False)


def test_closing_tag_before_opening_tag_gives_an_empty_valid_command_as_in_verl_agent():
    assert project_action("<think>a</think></action>look<action>") == ("", True)
    assert project_action("</action>look<action>") == ("", False)


def test_tags_are_found_case_insensitively_but_command_is_lowercased():
    assert project_action("<think>a</think><ACTION>Take Apple 1 From Fridge 1</ACTION>") == (
        "take apple 1 from fridge 1",
        True,
    )


def test_missing_think_open_or_close_tag_is_invalid_but_command_kept():
    assert project_action("<action>look</action>") == ("look", False)
    assert project_action("reasoning</think><action>look</action>") == ("look", False)
    assert project_action("<think>reasoning<action>look</action>") == ("look", False)


def test_think_tags_are_checked_on_the_original_case():
    # lower-casing happens only for the command: "<THINK>" is not "<think>"
    assert project_action("<THINK>x</THINK><action>look</action>") == ("look", False)


def test_cjk_anywhere_makes_the_response_invalid():
    assert project_action("<think>我想</think><action>look</action>") == ("look", False)
    assert project_action("<think>ok</think><action>go to 桌子 1</action>") == (
        "go to 桌子 1",
        False,
    )


def test_non_cjk_unicode_is_fine():
    assert project_action("<think>café — ok</think><action>look</action>") == ("look", True)


def test_empty_response_is_invalid_and_empty():
    assert project_action("") == ("", False)


def test_batch_projection_keeps_order():
    results = project_actions(["<think>a</think><action>look</action>", "nothing"])
    assert [tuple(r) for r in results] == [("look", True), ("nothing", False)]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_any_text_projects_without_error_and_command_is_lowercase(text):
    command, valid = project_action(text)
    assert command == command.lower() or command == text.lower()[-30:]
    if "<action>" not in text.lower():
        assert valid is False
        assert command == text.lower()[-FALLBACK_CHARS:]


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[a-z0-9 ]{1,40}", fullmatch=True), st.text(alphabet="abc xyz.", max_size=40))
def test_round_trip_of_a_formatted_answer(command, reasoning):
    response = f"<think>{reasoning}</think>\n<action>{command}</action>"
    assert project_action(response) == (command.strip(), True)
