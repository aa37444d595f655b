"""Game folders for the local-trainer tests, generated (planner-validated) once and shared by
every test process (tests/helpers_cache.py)."""

from __future__ import annotations

from pathlib import Path

from helpers_cache import built_once


def generated_games(split: str, n: int, seed: int = 0) -> Path:
    """A folder with `n` generated games of (split, seed), one per task type in turn."""
    from ccpo_cli.envs import generate_games

    return built_once(
        f"games-{split}-{n}-{seed}", lambda folder: generate_games(folder, split, n, seed=seed)
    )
