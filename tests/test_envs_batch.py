"""The batch environment on the real engine: oracle, random, limits, order, real data."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers_envs import REAL_GAMES, REAL_VALID_SEEN, one_per_type, panel_paths

from ccpo_cli.agents.oracle import OracleAgent
from ccpo_cli.agents.random_agent import RandomAgent
from ccpo_cli.envs import AlfworldBatchEnv, find_games, game_id, play_episodes
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.task_types import TASK_TYPES


@pytest.mark.slow
def test_oracle_wins_a_panel_subset_in_two_workers():
    games = one_per_type(panel_paths(), per_type=2)
    with AlfworldBatchEnv(games, workers=2, walkthrough=True) as env:
        episodes = play_episodes(env, OracleAgent())
    assert len(episodes) == 12 and all(e.won for e in episodes)
    assert {e.task_type for e in episodes} == set(TASK_TYPES)
    assert all(e.reward == 10.0 and 3 <= e.turns < 50 for e in episodes)
    assert [e.actions for e in episodes] == [
        list(json.loads(Path(p).read_text())["walkthrough"]) for p in games
    ]


@pytest.mark.slow
def test_oracle_wins_the_six_real_games_with_their_own_grammar():
    games = find_games(REAL_GAMES)  # the data root, json_2.1.1 layout with a split folder
    assert len(games) == 6
    with AlfworldBatchEnv(games, workers=2, walkthrough=True) as env:
        episodes = play_episodes(env, OracleAgent())
    assert all(e.won for e in episodes), [(e.game_id, e.turns) for e in episodes]
    assert sorted(e.task_type for e in episodes) == sorted(TASK_TYPES)
    # The json_2.1.1 grammar says "put X in/on Y", not the installed "move X to Y".
    assert any(a.startswith("put ") and " in/on " in a for e in episodes for a in e.actions)
    assert not any(a.startswith("move ") for e in episodes for a in e.actions)


def test_random_plays_to_the_step_limit_with_reward_only_on_win():
    games = one_per_type(panel_paths())
    with AlfworldBatchEnv(games, workers=0, max_steps=8) as env:
        observations, infos = env.reset()
        assert [i["game_path"] for i in infos] == sorted(games)
        assert all(i["task"].startswith("Your task is to: ") for i in infos)
        assert all(i["admissible_commands"] and not i["won"] for i in infos)
        agent = RandomAgent(seed=7)
        agent.reset(observations, infos)
        totals, steps = [0.0] * len(games), 0
        dones = [False] * len(games)
        while not all(dones):
            observations, rewards, dones, infos = env.step(agent.act(observations, infos))
            steps += 1
            for slot, (reward, info) in enumerate(zip(rewards, infos)):
                totals[slot] += reward
                assert reward in (0.0, 10.0) and (reward == 10.0) == (
                    info["won"] and info["active"]
                )
        assert steps == 8
        for total, info in zip(totals, infos):
            assert total == (10.0 if info["won"] else 0.0)
            assert info["truncated"] == (not info["won"])
            assert info["step"] <= 8


def test_group_rollouts_and_ended_slots():
    games = one_per_type(panel_paths())[:2]
    with AlfworldBatchEnv(games, workers=2, walkthrough=True, max_steps=50) as env:
        observations, infos = env.reset(games=[0, 0, 1, 1, games[0]])
        assert [i["game_path"] for i in infos] == [env.game_paths[k] for k in (0, 0, 1, 1, 0)]
        assert observations[0] == observations[1] == observations[4]
        plan = infos[0]["walkthrough"]
        # Slot 0 follows the plan, slot 1 only looks: independent states of the same game.
        for command in plan:
            observations, rewards, dones, infos = env.step(
                [command, "look", "look", "look", "look"]
            )
        assert infos[0]["won"] and dones[0] and rewards[0] == 10.0 and not infos[1]["won"]
        observations, rewards, dones, infos = env.step([None, "look", "look", "look", "look"])
        assert not infos[0]["active"] and rewards[0] == 0.0 and dones[0]
        with pytest.raises(UsageError):
            env.step(["look"])
        with pytest.raises(UsageError):
            env.reset(games=[99])


def test_sys_argv_survives_engine_loads():
    before = list(sys.argv)
    with AlfworldBatchEnv(one_per_type(panel_paths())[:1], workers=0) as env:
        env.reset()
        env.reset()
    assert sys.argv == before


def test_bad_game_folders_are_invalid_input(tmp_path):
    with pytest.raises(InvalidInput):
        AlfworldBatchEnv([tmp_path / "nothing"], workers=0)
    with pytest.raises(InvalidInput):
        find_games(tmp_path / "missing")
    broken = tmp_path / "pick_and_place_simple-Apple-None-CounterTop-1" / "trial_x"
    broken.mkdir(parents=True)
    shutil.copy(
        REAL_VALID_SEEN
        / "pick_and_place_simple-Book-None-SideTable-329"
        / "trial_T20190908_050633_745514"
        / "traj_data.json",
        broken,
    )
    (broken / "game.tw-pddl").write_text(
        '{"solvable": true, "pddl_domain": "(oops", "grammar": "{}", "pddl_problem": ""}'
    )
    with AlfworldBatchEnv(find_games(tmp_path), workers=1) as env:
        with pytest.raises(InvalidInput, match="not a playable ALFWorld game"):
            env.reset()


def test_game_ids_are_machine_independent():
    path = panel_paths()[0]
    folder, trial = path.split("/")[-3:-1]
    assert game_id(path) == f"{folder}/{trial}"


def test_loaded_games_are_reset_not_reloaded():
    games = one_per_type(panel_paths())[:2]
    with AlfworldBatchEnv(games, workers=0) as env:
        pool = env._local
        env.reset(games=[0, 0, 1])
        env.reset(games=[1])
        assert len(pool.active) == 1 and len(pool.active) + len(pool.idle) == 3
        loaded = {id(s) for s in [*pool.active.values(), *pool.idle.values()]}
        observations, _ = env.reset(games=[0, 0, 1])
        assert {id(s) for s in pool.active.values()} == loaded  # the same three loaded games
        assert observations[0] == observations[1] != observations[2]
