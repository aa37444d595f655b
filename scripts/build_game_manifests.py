"""Build the shipped game-set manifests (configs/games/*-manifest.json).

Generates the training pool (split train, seed 0, 600 games) and the held-out panel (split
heldout, seed 0, 128 games), each game validated by the planner's walkthrough, checks that the
two sets share no game, and writes one manifest per set. Run once when the generator changes:

    PYTHONPATH=. python scripts/build_game_manifests.py --workers 2
    PYTHONPATH=. python scripts/build_game_manifests.py --workers 2 --room large   # large-*-manifest.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path

from ccpo_cli.envs.games import manifest_name
from ccpo_cli.envs.generate import GENERATOR_VERSION, ROOMS, generate_games
from ccpo_cli.paths import configs_dir

SETS = {"pool-manifest.json": ("train", 0, 600), "heldout-manifest.json": ("heldout", 0, 128)}


def _problem_key(path: str) -> str:
    game = json.loads(Path(path).read_text())
    body = game["pddl_problem"].split("\n", 1)[1]  # without the (define (problem NAME) line
    return hashlib.sha256((game["grammar"] + body).encode()).hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--room",
        choices=ROOMS,
        default="small",
        help="small: the shipped pool and panel; large: the search-sized rooms' sets",
    )
    args = parser.parse_args()
    keys: dict[str, set[str]] = {}
    documents = {}
    for name, (split, seed, n) in SETS.items():
        name = manifest_name(name, args.room)
        started = time.time()
        with tempfile.TemporaryDirectory() as scratch:
            games = generate_games(scratch, split, n, seed, room=args.room, workers=args.workers)
            keys[name] = {_problem_key(g.path) for g in games}
        print(f"{name}: {len(games)} games in {time.time() - started:.1f} s", file=sys.stderr)
        documents[name] = {
            "format": 1,
            "split": split,
            "seed": seed,
            "room": args.room,
            "n": n,
            "generator": GENERATOR_VERSION,
            "engine": {"alfworld": version("alfworld"), "textworld": version("textworld")},
            "games": [
                {
                    "index": g.index,
                    "game_id": g.game_id,
                    "task_type": g.task_type,
                    "sha256": g.sha256,
                    "walkthrough": list(g.walkthrough),
                }
                for g in games
            ],
        }
    overlap = (
        keys[manifest_name("pool-manifest.json", args.room)]
        & keys[manifest_name("heldout-manifest.json", args.room)]
    )
    if overlap:
        print(f"error: {len(overlap)} games are in both sets", file=sys.stderr)
        return 3
    out = configs_dir() / "games"
    out.mkdir(parents=True, exist_ok=True)
    for name, document in documents.items():
        lines = ",\n".join(
            json.dumps(game, separators=(",", ":")) for game in document.pop("games")
        )
        head = json.dumps(document, indent=1)[:-2]
        (out / name).write_text(f'{head},\n "games": [\n{lines}\n]}}\n')
    return 0


if __name__ == "__main__":
    sys.exit(main())
