"""Agent registry, game selection and per-seed statistics of the evaluation loop."""

from __future__ import annotations

import math

import pytest

from ccpo_cli.agents.base import Agent, Decision, SlotAgentAdapter, Turn
from ccpo_cli.agents.evaluate import EpisodeResult, SeedEvaluation, select_games, task_type_of_path
from ccpo_cli.agents.registry import _BUILTIN_FACTORIES, AGENT_FACTORIES, make_agent, register_agent
from ccpo_cli.cli.common import parse_seeds
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.evaluation import across_seeds, build_agent

FOLDERS = {
    "pick": "pick_and_place_simple-Apple-None-Fridge-{i}",
    "look": "look_at_obj_in_light-Book-None-DeskLamp-{i}",
    "clean": "pick_clean_then_place_in_recep-Cup-None-Shelf-{i}",
    "heat": "pick_heat_then_place_in_recep-Egg-None-Fridge-{i}",
    "cool": "pick_cool_then_place_in_recep-Apple-None-Shelf-{i}",
    "pick2": "pick_two_obj_and_place-Book-None-Desk-{i}",
}


def paths(counts: dict[str, int]) -> list[str]:
    return [
        f"/games/{FOLDERS[key].format(i=i)}/trial_1/game.tw-pddl"
        for key, count in counts.items()
        for i in range(count)
    ]


def test_task_type_comes_from_the_alfworld_folder_name():
    assert task_type_of_path(paths({"pick2": 1})[0]) == "pick2"
    assert task_type_of_path(paths({"pick": 1})[0].removesuffix("/game.tw-pddl")) == "pick"
    with pytest.raises(InvalidInput):
        task_type_of_path("/games/something/trial/game.tw-pddl")


def test_selection_default_is_every_game_sorted():
    games = paths({"cool": 2, "pick": 2})
    assert select_games(games, None) == sorted(games)


def test_selection_subset_takes_types_in_turn_and_larger_counts_cycle():
    games = paths({"pick": 3, "look": 1, "heat": 2})
    chosen = select_games(games, 5)
    assert [task_type_of_path(p) for p in chosen] == ["pick", "look", "heat", "pick", "heat"]
    assert len(set(chosen)) == 5
    cycled = select_games(games, 8)
    assert cycled[6:] == cycled[:2]
    with pytest.raises(InvalidInput):
        select_games(games, 0)
    with pytest.raises(InvalidInput):
        select_games([], None)


def episode(index, task_type, won, flags):
    return EpisodeResult(index, f"g{index}", task_type, won, len(flags), invalid_flags=flags)


def test_seed_statistics_and_rows():
    result = SeedEvaluation(
        seed=4,
        episodes=[
            episode(0, "pick", True, [False, True]),
            episode(1, "pick", False, [True, True, False, False]),
            episode(2, "cool", True, [False]),
        ],
    )
    summary = result.summary()
    assert summary["successes"] == 2 and math.isclose(summary["success"], 200 / 3)
    assert math.isclose(summary["mean_turns"], 7 / 3)
    assert math.isclose(summary["invalid_turn_rate"], 300 / 7)
    assert summary["task_types"] == {
        "pick": {"episodes": 2, "successes": 1, "success": 50.0},
        "cool": {"episodes": 1, "successes": 1, "success": 100.0},
    }
    row = result.episodes[1].as_row()
    assert (
        row["invalid_turns"] == 2 and row["invalid_flags"] == [1, 1, 0, 0] and row["reward"] == 0.0
    )
    assert result.episodes[0].as_row()["reward"] == 10.0


def test_mean_and_sd_over_seeds_overall_and_per_type():
    seeds = [
        SeedEvaluation(0, [episode(0, "pick", True, [False]), episode(1, "look", False, [False])]),
        SeedEvaluation(1, [episode(0, "pick", False, [False]), episode(1, "look", False, [False])]),
    ]
    summary = across_seeds(seeds)
    assert summary["mean"] == 25.0 and math.isclose(summary["sd"], math.sqrt(2 * 25.0**2))
    assert summary["task_type_means"]["pick"]["per_seed"] == [100.0, 0.0]
    assert summary["task_type_means"]["look"]["sd"] == 0.0


def test_seed_lists_parse_strictly():
    assert parse_seeds("0,1, 2") == [0, 1, 2]
    for bad in ("", "x", "1,1", "-1"):
        with pytest.raises(InvalidInput):
            parse_seeds(bad)


class FirstCommand(Agent):
    name = "first"

    def __init__(self, seed):
        self.seed = seed

    def act(self, turns):
        return [Decision(turn.admissible[0]) for turn in turns]


def test_registered_factories_are_used_and_unknown_kinds_refused(monkeypatch):
    monkeypatch.setattr("ccpo_cli.agents.registry.AGENT_FACTORIES", dict(AGENT_FACTORIES))
    register_agent("first", lambda model, *, temperature, seed: FirstCommand(seed))
    agent = make_agent("first", seed=9)
    assert isinstance(agent, FirstCommand) and agent.seed == 9
    with pytest.raises(InvalidInput):
        make_agent("no-such-agent")
    with pytest.raises(InvalidInput):
        make_agent("hf")  # no --model


def test_local_kind_resolves_lazily_like_the_other_built_ins(monkeypatch):
    # ccpo eval's library layer plugs the local backend's policy in; the agents never name it.
    monkeypatch.setattr(
        "ccpo_cli.agents.registry.AGENT_FACTORIES", {}
    )  # nothing registered by import
    with pytest.raises(InvalidInput, match="--agent local needs --model"):
        build_agent("local", None, temperature=0.4, seed=0)


def test_a_built_in_kind_whose_module_is_missing_is_a_clear_runtime_error(monkeypatch):
    monkeypatch.setitem(_BUILTIN_FACTORIES, "local", "ccpo_cli.no_such_backend:make_local_agent")
    with pytest.raises(CcpoError) as caught:
        make_agent("local", "checkpoint.pt")
    assert caught.value.exit_code == 1 and "'local' agent is not available" in str(caught.value)


def test_slot_adapter_shows_the_batch_agent_every_slot():
    seen = []

    class Echo:
        def reset(self, observations, infos):
            seen.append(("reset", list(observations)))

        def act(self, observations, infos):
            seen.append(("act", list(observations)))
            return [f"cmd {o}" for o in observations]

    adapter = SlotAgentAdapter("echo", lambda seed: Echo())
    adapter.start_batch(["a0", "b0", "c0"], [{}, {}, {}])
    turns = [
        Turn(slot=s, game_id="", step=1, observation=o, admissible=(), task="", prompt="")
        for s, o in ((0, "a1"), (2, "c1"))
    ]
    decisions = adapter.act(turns)
    assert [d.command for d in decisions] == ["cmd a1", "cmd c1"]
    # slot 1 had ended: it keeps its last observation
    assert seen[-1] == ("act", ["a1", "b0", "c1"])
