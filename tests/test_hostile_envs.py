"""Game files and `games generate --out` refuse bad input, and a failed eval leaves no empty run.

Asked for in issue 12, cases 7 and 13.
"""

from __future__ import annotations

import sqlite3

import pytest
from helpers_hostile import assert_refused, db_state, invoke


def _game(root, task="pick_and_place_simple-Apple-None-Fridge-1", content='{"solvable": true}'):
    folder = root / task / "trial_T0"
    folder.mkdir(parents=True)
    (folder / "traj_data.json").write_text('{"task_type": "pick_and_place_simple"}')
    (folder / "game.tw-pddl").write_text(content)
    return folder / "game.tw-pddl"


@pytest.mark.parametrize("content", ["[1,2,3]", '"text"', "7", "null"])
def test_games_check_on_a_game_file_that_is_not_an_object(tmp_path, content):
    game = _game(tmp_path / "games", content=content)
    assert_refused(invoke("games", "check", tmp_path / "games"), 3, str(game), "JSON object")


def test_eval_on_a_game_file_that_is_not_an_object_records_nothing(tmp_path):
    game = _game(tmp_path / "games", content="[1,2,3]")
    db = tmp_path / "runs.db"
    result = invoke(
        "--db",
        db,
        "eval",
        "--run",
        "ev",
        "--agent",
        "random",
        "--games",
        tmp_path / "games",
        "--workers",
        "0",
    )
    assert_refused(result, 3, str(game))
    if db.exists():
        assert db_state(db)[1].get("runs", 0) == 0


def test_games_generate_onto_an_existing_file(tmp_path):
    target = tmp_path / "games.txt"
    target.write_text("mine\n")
    assert_refused(
        invoke("games", "generate", "--out", target, "--n", "1"), 3, str(target), "not a folder"
    )
    assert target.read_text() == "mine\n"


def test_a_failed_eval_leaves_no_empty_run(tmp_path):
    # Found by find_games (marked solvable) but not playable: the engine fails during the evaluation.
    _game(tmp_path / "games", task="t1")
    db = tmp_path / "runs.db"
    result = invoke(
        "--db",
        db,
        "eval",
        "--run",
        "ev",
        "--agent",
        "random",
        "--games",
        tmp_path / "games",
        "--workers",
        "0",
    )
    assert_refused(result, 3, "not a playable ALFWorld game")
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
