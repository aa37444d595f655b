"""Which games the local trainer plays: the shipped training pool and the held-out panel.

`room` picks the shipped sets of one room size (`small`, the default, or the search-sized
`large` rooms of configs/games/large-*-manifest.json). Evaluation may use a fixed subset of the panel for speed: the same type-balanced games
`ccpo eval --episodes N` plays, recorded in the run's config as such. Any folder of games in the
ALFWorld layout can replace either set.
"""

from __future__ import annotations

from pathlib import Path

from ccpo_cli.errors import InvalidInput


def _games_in(folder: str) -> list[str]:
    from ccpo_cli.envs import find_games

    found = find_games(folder)
    if not found:
        raise InvalidInput(f"{folder}: no ALFWorld games (traj_data.json + game.tw-pddl) found")
    return found


def training_games(folder: str | None = None, room: str = "small") -> list[str]:
    if folder:
        return _games_in(folder)
    from ccpo_cli.envs import training_pool

    return list(training_pool(room=room))


def panel_games(folder: str | None = None, room: str = "small") -> list[str]:
    if folder:
        return _games_in(folder)
    from ccpo_cli.envs import heldout_panel

    return list(heldout_panel(room=room))


def evaluation_games(
    count: int | None, folder: str | None = None, room: str = "small"
) -> list[str]:
    """The whole panel (None), or the same type-balanced `count` games `ccpo eval --episodes`
    would play."""
    from ccpo_cli.agents.evaluate import select_games

    return select_games(panel_games(folder, room), count)


def describe_training(folder: str | None = None, room: str = "small") -> str:
    from ccpo_cli.envs.games import POOL_MANIFEST, manifest_name

    return folder or f"shipped training pool (configs/games/{manifest_name(POOL_MANIFEST, room)})"


def describe_panel(
    games: list[str], count: int | None, folder: str | None = None, room: str = "small"
) -> dict:
    from ccpo_cli.envs.games import HELDOUT_MANIFEST, manifest_name

    panel_size = len(panel_games(folder, room))
    return {
        "source": folder
        or f"shipped held-out panel (configs/games/{manifest_name(HELDOUT_MANIFEST, room)})",
        "games": len(games),
        "panel_games": panel_size,
        "subset": None
        if count is None or count == panel_size
        else f"fixed type-balanced subset: {len(games)} of the {panel_size} panel games, task types "
        "taken in turn in sorted order (as `ccpo eval --episodes N`)",
        "game_ids": [f"{Path(g).parent.parent.name}/{Path(g).parent.name}" for g in games],
    }
