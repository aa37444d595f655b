"""How hard are a set of ALFWorld games for search? Rooms measured side by side.

For each set of games (the shipped small-room panel, the search-sized large-room panel, and
any folder such as the six real ALFWorld games), per game:

- receptacles: distinct receptacle ids of the PDDL problem;
- closed containers: receptacles the problem declares openable (cabinets, drawers, fridges...);
- oracle plan length: the planner's walkthrough from the start (the engine computes it);
- random-play success: episodes of a uniform random policy over the admissible commands (without
  `help`, as the policy sees them) that win within the turn limit;
- admissible commands per state: their mean number over the states random play visits.

    PYTHONPATH=. python scripts/room_statistics.py --set small --set large --folder REAL_GAMES_FOLDER \
        --games 24 --episodes 5
    PYTHONPATH=. python scripts/room_statistics.py --set small --games 2 --episodes 1 --json   # a quick check

The shipped sets are the first --games panel games (type-balanced, as `ccpo eval --episodes N`);
a folder's games are all of them. Random play is seeded per (game, episode).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
from pathlib import Path

RECEPTACLE = re.compile(r"\(receptacleType (\S+) \S+\)")
OPENABLE = re.compile(r"\(openable (\S+)\)")


def game_facts(path: str) -> dict:
    problem = json.loads(Path(path).read_text())["pddl_problem"]
    receptacles = set(RECEPTACLE.findall(problem))
    return {
        "receptacles": len(receptacles),
        "closed_containers": len(set(OPENABLE.findall(problem)) & receptacles),
    }


def play(path: str, episodes: int, turn_limit: int) -> dict:
    from ccpo_cli.envs.engine import GameSession

    session = GameSession(path, max_steps=turn_limit, walkthrough=True)
    plan = len(session.reset().info["walkthrough"])
    wins, sizes = 0, []
    for episode in range(episodes):
        rng = random.Random(f"room-statistics/{Path(path).parent.name}/{episode}")
        result = session.reset()
        while True:
            commands = [
                command for command in result.info["admissible_commands"] if command != "help"
            ]
            sizes.append(len(commands))
            result = session.step(rng.choice(commands))
            if result.done:
                wins += bool(result.info["won"])
                break
    session.close()
    return {
        "oracle_plan_length": plan,
        "random_wins": wins,
        "random_episodes": episodes,
        "admissible_per_state": statistics.fmean(sizes),
    }


def measure(name: str, paths: list[str], episodes: int, turn_limit: int) -> dict:
    rows = [{**game_facts(path), **play(path, episodes, turn_limit)} for path in paths]
    played = sum(row["random_episodes"] for row in rows)
    return {
        "set": name,
        "games": len(rows),
        "episodes_per_game": episodes,
        "turn_limit": turn_limit,
        "random_success_percent": 100.0 * sum(row["random_wins"] for row in rows) / played
        if played
        else None,
        "oracle_plan_length_mean": statistics.fmean(row["oracle_plan_length"] for row in rows),
        "receptacles_mean": statistics.fmean(row["receptacles"] for row in rows),
        "closed_containers_mean": statistics.fmean(row["closed_containers"] for row in rows),
        "admissible_per_state_mean": statistics.fmean(row["admissible_per_state"] for row in rows),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        choices=["small", "large"],
        help="a shipped held-out panel by room size (repeatable)",
    )
    parser.add_argument(
        "--folder", action="append", default=[], help="a folder of games (repeatable)"
    )
    parser.add_argument("--games", type=int, default=24, help="panel games per shipped set")
    parser.add_argument("--episodes", type=int, default=5, help="random-play episodes per game")
    parser.add_argument("--turn-limit", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ccpo_cli.agents.evaluate import select_games
    from ccpo_cli.envs import find_games, heldout_panel

    sets = [
        (
            f"{room} rooms (panel, {args.games} games)",
            select_games(list(heldout_panel(room=room)), args.games),
        )
        for room in args.set
    ]
    sets += [(folder, find_games(folder)) for folder in args.folder]
    results = [measure(name, paths, args.episodes, args.turn_limit) for name, paths in sets]
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    header = (
        "set",
        "games",
        "random success %",
        "oracle plan",
        "receptacles",
        "closed containers",
        "admissible/state",
    )
    print(" | ".join(header))
    for row in results:
        print(
            " | ".join(
                [
                    row["set"],
                    str(row["games"]),
                    f"{row['random_success_percent']:.1f}",
                    f"{row['oracle_plan_length_mean']:.1f}",
                    f"{row['receptacles_mean']:.1f}",
                    f"{row['closed_containers_mean']:.1f}",
                    f"{row['admissible_per_state_mean']:.1f}",
                ]
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
