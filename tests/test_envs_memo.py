"""The parse memo changes speed only: identical transcripts with and without it."""

from __future__ import annotations

import pytest
from helpers_envs import REAL_VALID_SEEN, one_per_type, panel_paths, transcript

from ccpo_cli.agents.random_agent import RandomAgent
from ccpo_cli.envs import AlfworldBatchEnv, find_games, memo


def _play(games, use_memo: bool) -> str:
    try:
        with AlfworldBatchEnv(games, workers=0, memo=use_memo, max_steps=10) as env:
            assert memo.installed() == use_memo
            first = transcript(env, RandomAgent(seed=11))
            second = transcript(env, RandomAgent(seed=12))  # the same games, reset again
            # Each game was loaded once: the second round only reset the loaded games.
            pool = env._local
            assert len(pool.active) + len(pool.idle) == len(games)
        return first + "\n" + second
    finally:
        memo.uninstall()


@pytest.mark.slow
def test_memo_transcripts_are_byte_identical():
    games = one_per_type(panel_paths()) + [
        p for p in find_games(REAL_VALID_SEEN) if "pick_and_place" in p
    ]
    without = _play(games, use_memo=False)
    with_memo = _play(games, use_memo=True)
    assert without.count("\nS") > 100  # enough steps were compared
    assert without.encode() == with_memo.encode()


def test_memo_installs_and_uninstalls_cleanly():
    from textworld.envs.pddl import textgen
    from textworld.logic import Rule

    memo.uninstall()  # an earlier in-process env may have left it installed
    original_parse, original_query = textgen._parse_and_convert, Rule.parse_conjunctive_query
    original_copy, original_deepcopy, original_flag = (
        textgen.copy_context,
        textgen.deepcopy,
        textgen.check_flag,
    )
    memo.install()
    memo.install()
    assert textgen._parse_and_convert is not original_parse
    assert textgen.copy_context is not original_copy
    assert textgen.deepcopy is not original_deepcopy
    assert textgen.check_flag("TW_CSG_DEBUG") is original_flag("TW_CSG_DEBUG")
    query = "openable(r:receptacle) & opened(r:receptacle)"
    assert Rule.parse_conjunctive_query(query) is Rule.parse_conjunctive_query(query)
    memo.uninstall()
    assert textgen._parse_and_convert is original_parse
    assert textgen.copy_context is original_copy
    assert textgen.deepcopy is original_deepcopy
    assert textgen.check_flag is original_flag
    assert Rule.parse_conjunctive_query(query) is not Rule.parse_conjunctive_query(query)
    assert Rule.parse_conjunctive_query.__func__ is original_query.__func__
