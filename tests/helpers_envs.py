"""Shared helpers for the ALFWorld environment tests (tests/test_envs_*.py)."""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_GAMES = (REPO_ROOT / ".." / "shared" / "alfworld-real").resolve()
REAL_VALID_SEEN = REAL_GAMES / "valid_seen"


@functools.lru_cache(maxsize=1)
def games_cache() -> Path:
    """One materialization of the shipped sets per test session, in a temporary folder."""
    return Path(tempfile.mkdtemp(prefix="ccpo-test-games-"))


@functools.lru_cache(maxsize=1)
def panel_paths() -> tuple[str, ...]:
    from ccpo_cli.envs import heldout_panel

    return tuple(heldout_panel(cache_dir=games_cache()))


def one_per_type(paths, per_type: int = 1) -> list[str]:
    """The first `per_type` games of each task type, in sorted path order."""
    from ccpo_cli.task_types import short_key

    chosen: dict[str, list[str]] = {}
    for path in sorted(paths):
        bucket = chosen.setdefault(short_key(Path(path).parent.parent.name), [])
        if len(bucket) < per_type:
            bucket.append(path)
    return sorted(p for bucket in chosen.values() for p in bucket)


def transcript(env, agent, games=None) -> str:
    """Every observation, admissible list, reward, done and won of one batch, as text."""
    lines = []
    observations, infos = env.reset(games)
    agent.reset(observations, infos)
    lines += [
        f"R{slot}|{o}|{i['admissible_commands']}|{i['won']}"
        for slot, (o, i) in enumerate(zip(observations, infos))
    ]
    dones = [False] * len(infos)
    while not all(dones):
        actions = agent.act(observations, infos)
        observations, rewards, dones, infos = env.step(actions)
        for slot, (o, r, d, i) in enumerate(zip(observations, rewards, dones, infos)):
            if i["active"]:
                lines.append(
                    f"S{slot}|{actions[slot]}|{o}|{r}|{d}|{i['won']}|{i['admissible_commands']}"
                )
    return "\n".join(lines)
