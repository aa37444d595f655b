"""`ccpo eval` end to end: real ALFWorld engine, real runs.db, real Typer."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.task_types import TASK_TYPES

runner = CliRunner()


@pytest.fixture(scope="module")
def six_games(tmp_path_factory) -> Path:
    """One generated game of each task type (held-out split, seeded)."""
    from ccpo_cli.envs import generate_games

    folder = tmp_path_factory.mktemp("eval-games")
    generated = generate_games(folder, "heldout", 6, seed=11)
    assert sorted(g.task_type for g in generated) == sorted(TASK_TYPES)
    return folder


def ccpo(db: Path, *args: str):
    return runner.invoke(app, ["--db", str(db), *args])


def eval_json(db: Path, *args: str) -> dict:
    result = ccpo(db, "eval", *args, "--workers", "0", "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def table(db: Path, sql: str, params=()):
    with sqlite3.connect(db) as connection:
        return connection.execute(sql, params).fetchall()


def test_oracle_wins_every_game_and_records_every_episode(tmp_path, six_games):
    db = tmp_path / "runs.db"
    document = eval_json(
        db,
        "--run",
        "oracle-check",
        "--agent",
        "oracle",
        "--games",
        str(six_games),
        "--seeds",
        "0,1",
    )

    assert document["schema_version"] == 1
    assert document["run"] == "oracle-check" and document["agent"] == "oracle"
    assert [e["seed"] for e in document["evaluations"]] == [0, 1]
    for evaluation in document["evaluations"]:
        assert evaluation["episodes"] == 6 and evaluation["successes"] == 6
        assert evaluation["success"] == 100.0
        assert 1 <= evaluation["mean_turns"] < 50
        assert list(evaluation["task_types"]) == list(TASK_TYPES)
        for row in evaluation["task_types"].values():
            assert row == {"episodes": 1, "successes": 1, "success": 100.0}
        assert evaluation["wilson_95"]["high"] == 100.0 and evaluation["wilson_95"]["low"] < 100.0
    assert document["mean"] == 100.0 and document["sd"] == 0.0

    evaluations = table(
        db,
        "SELECT id, eval_seed, episodes, successes, success_rate, split, step "
        "FROM evaluations ORDER BY eval_seed",
    )
    assert [row[1:] for row in evaluations] == [
        (0, 6, 6, 100.0, "heldout", 0),
        (1, 6, 6, 100.0, "heldout", 0),
    ]
    # A new run that only evaluated is a reference run: its agent and protocol are recorded facts.
    assert sorted(table(db, "SELECT key, value FROM run_facts")) == [
        ("agent", '"oracle"'),
        ("episodes", "6"),
        ("max_steps", "50"),
        ("split", '"heldout"'),
    ]
    assert table(db, "SELECT kind FROM runs") == [("evaluation",)]
    first_id = evaluations[0][0]
    assert table(
        db, "SELECT COUNT(*) FROM task_type_results WHERE evaluation_id = ?", (first_id,)
    ) == [(6,)]
    episodes = table(
        db,
        "SELECT game_id, task_type, won, turns, invalid_turns, extra FROM episodes "
        "WHERE evaluation_id = ? ORDER BY episode_index",
        (first_id,),
    )
    assert len(episodes) == 6
    assert {row[1] for row in episodes} == set(TASK_TYPES)
    for game_id, _, won, turns, invalid_turns, extra in episodes:
        assert "/" in game_id and won == 1 and invalid_turns == 0
        assert json.loads(extra)["invalid_flags"] == [0] * turns


def test_random_agent_records_a_lower_rate_and_full_length_failures(tmp_path, six_games):
    db = tmp_path / "runs.db"
    oracle = eval_json(db, "--run", "oracle", "--agent", "oracle", "--games", str(six_games))
    random_run = eval_json(
        db, "--run", "random", "--agent", "random", "--games", str(six_games), "--seeds", "3"
    )
    assert random_run["mean"] < oracle["mean"]
    turns = table(
        db,
        "SELECT e.won, e.turns FROM episodes e JOIN evaluations v ON v.id = e.evaluation_id "
        "JOIN runs r ON r.id = v.run_id WHERE r.name = 'random'",
    )
    assert len(turns) == 6
    assert all(turns_taken == 50 for won, turns_taken in turns if not won)
    # oracle and random evaluations carry no sampling temperature
    assert table(db, "SELECT DISTINCT temperature FROM evaluations") == [(None,)]


def test_random_agent_is_reproducible_per_seed(tmp_path, six_games):
    first = eval_json(
        tmp_path / "a.db",
        "--run",
        "r",
        "--agent",
        "random",
        "--games",
        str(six_games),
        "--seeds",
        "5",
        "--max-steps",
        "8",
    )
    second = eval_json(
        tmp_path / "b.db",
        "--run",
        "r",
        "--agent",
        "random",
        "--games",
        str(six_games),
        "--seeds",
        "5",
        "--max-steps",
        "8",
    )
    assert first["evaluations"][0]["mean_turns"] == second["evaluations"][0]["mean_turns"]
    rows = [
        table(tmp_path / name, "SELECT game_id, won, turns FROM episodes ORDER BY episode_index")
        for name in ("a.db", "b.db")
    ]
    assert rows[0] == rows[1]


def test_episode_subset_is_balanced_over_types(tmp_path, six_games):
    document = eval_json(
        tmp_path / "runs.db",
        "--run",
        "subset",
        "--agent",
        "oracle",
        "--games",
        str(six_games),
        "--episodes",
        "3",
    )
    evaluation = document["evaluations"][0]
    assert evaluation["episodes"] == 3
    assert list(evaluation["task_types"]) == ["pick", "look", "clean"]


def test_human_output_has_seed_rows_type_rows_and_interval(tmp_path, six_games):
    result = ccpo(
        tmp_path / "runs.db",
        "eval",
        "--run",
        "human",
        "--agent",
        "oracle",
        "--games",
        str(six_games),
        "--episodes",
        "6",
        "--seeds",
        "0,1",
        "--workers",
        "0",
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Wilson" in out and "mean ± sd" in out
    for key in TASK_TYPES:
        assert key in out
    assert "100.0 % ± 0.0" in out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--agent", "oracle", "--seeds", "a,b"], "--seeds"),
        (["--agent", "oracle", "--seeds", "1,1"], "--seeds"),
        (["--agent", "nonsense"], "--agent nonsense"),
        (["--agent", "hf"], "--model"),
        (["--agent", "oracle", "--episodes", "0"], "--episodes"),
        (["--agent", "oracle", "--temperature", "-1"], "--temperature"),
        (["--agent", "oracle", "--max-new-tokens", "0"], "--max-new-tokens"),
        (["--agent", "oracle", "--workers", "-2"], "--workers"),
    ],
)
def test_bad_input_is_one_line_and_exit_3(tmp_path, six_games, args, fragment):
    db = tmp_path / "runs.db"
    result = ccpo(db, "eval", "--run", "bad", "--games", str(six_games), *args)
    assert result.exit_code == 3, result.output
    assert fragment in result.output
    assert "Traceback" not in result.output
    # nothing was recorded for a refused evaluation
    assert not db.exists() or table(db, "SELECT COUNT(*) FROM evaluations") == [(0,)]


def test_missing_games_folder_is_exit_3(tmp_path):
    result = ccpo(
        tmp_path / "runs.db",
        "eval",
        "--run",
        "x",
        "--agent",
        "oracle",
        "--games",
        str(tmp_path / "nowhere"),
    )
    assert result.exit_code == 3
    assert "nowhere" in result.output


def test_vllm_without_vllm_installed_is_a_clear_exit_1(tmp_path, six_games):
    result = ccpo(
        tmp_path / "runs.db",
        "eval",
        "--run",
        "v",
        "--agent",
        "vllm",
        "--model",
        "some/model",
        "--games",
        str(six_games),
    )
    assert result.exit_code == 1
    assert "vllm" in result.output and "Traceback" not in result.output


def test_text_policy_sees_verl_agent_prompts_with_a_two_step_history(six_games):
    """A scripted text policy (answers the first listed admissible action in the tag format)
    plays a real game: its prompts carry the history window and its turns are valid."""
    import re

    from ccpo_cli.agents.base import TextPolicyAgent
    from ccpo_cli.agents.evaluate import evaluate
    from ccpo_cli.envs import find_games

    class FirstListed(TextPolicyAgent):
        name = "first-listed"

        def __init__(self):
            self.prompts: list[str] = []

        def generate(self, prompts):
            self.prompts += prompts
            answers = []
            for prompt in prompts:
                first = re.search(r"situation are: \['([^']*)'", prompt).group(1)
                answers.append(f"<think>take the first one</think><action>{first}</action>")
            return answers

    agent = FirstListed()
    game = find_games(six_games)[:1]
    episode = evaluate(agent, game, workers=0, max_steps=4)[0].episodes[0]
    assert episode.invalid_flags == [False] * episode.turns
    prompts = agent.prompts
    assert len(prompts) == episode.turns
    assert prompts[0].startswith(
        "\nYou are an expert agent operating in the ALFRED Embodied Environment.\n"
        "Your current observation is: "
    )
    assert episode.turns == 4 and not episode.won
    last = prompts[3]
    assert "Prior to this step, you have already taken 3 step(s)" in last
    assert f"Action 2: '{episode.commands[1]}']\n[Observation 3: '" in last
    assert f"Action 3: '{episode.commands[2]}']\nYou are now at step 4 and" in last
    assert "Observation 1:" not in last


def test_default_games_are_the_shipped_panel_and_a_subset_covers_every_type(tmp_path, monkeypatch):
    from ccpo_cli.envs.games import HELDOUT_MANIFEST, load_manifest
    from ccpo_cli.paths import configs_dir

    monkeypatch.setenv("CCPO_GAMES_DIR", str(tmp_path / "games-cache"))
    db = tmp_path / "runs.db"
    document = eval_json(db, "--run", "panel", "--agent", "oracle", "--episodes", "6")
    assert document["games"] == "heldout-panel"
    evaluation = document["evaluations"][0]
    assert evaluation["success"] == 100.0 and evaluation["episodes"] == 6
    assert list(evaluation["task_types"]) == list(TASK_TYPES)
    manifest_ids = {
        game["game_id"]
        for game in load_manifest(configs_dir() / "games" / HELDOUT_MANIFEST)["games"]
    }
    recorded = {row[0] for row in table(db, "SELECT game_id FROM episodes")}
    assert len(recorded) == 6 and recorded <= manifest_ids


def test_local_agent_is_found_through_its_registration_and_needs_a_checkpoint(tmp_path, six_games):
    result = ccpo(
        tmp_path / "runs.db", "eval", "--run", "l", "--agent", "local", "--games", str(six_games)
    )
    assert result.exit_code == 3
    assert "--model" in result.output and "Traceback" not in result.output
