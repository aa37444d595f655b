"""ALFWorld's six task types, as its benchmark file declares them (configs/benchmarks/alfworld.yaml).

Short keys (`pick`, `look`, ...) are the contract's JSON keys; the long names are ALFWorld's
game-folder prefixes; verl-agent logs `val/<name>_success_rate` with the name it matches in
the game path. The other benchmarks' task types are theirs (ccpo_cli/benchmarks.py); this
module keeps ALFWorld's under the names the environments, agents and reports import.
"""

from __future__ import annotations

from ccpo_cli.benchmarks import load_benchmark

_ALFWORLD = load_benchmark("alfworld")

# short key -> ALFWorld task-type name, in the order the seed card's per-type row uses.
TASK_TYPES: dict[str, str] = {
    task.key: task.game_folder or task.key for task in _ALFWORLD.task_types
}

# verl-agent matches these substrings of the game path (first match wins) and logs
# `val/<substring>_success_rate`; note `pick_and_place` (not `..._simple`).
VERL_METRIC_NAMES: dict[str, str] = {task.key: task.source_name for task in _ALFWORLD.task_types}

# Longest names first, so that no name is read as another one it contains.
_BY_LENGTH = sorted(
    ((name, key) for key in TASK_TYPES for name in {TASK_TYPES[key], VERL_METRIC_NAMES[key]}),
    key=lambda pair: -len(pair[0]),
)


def short_key(name: str) -> str:
    """The short key of a task-type name, game folder name or path."""
    lowered = name.lower()
    if lowered in TASK_TYPES:
        return lowered
    for long_name, key in _BY_LENGTH:
        if long_name in lowered:
            return key
    raise KeyError(f"not an ALFWorld task type: {name!r}")


# The room sizes of generated games (ccpo_cli/envs/generate.py): "small" rooms of the shipped
# CPU-testbed sets, "large" (search-sized) rooms with closed containers and more receptacles.
ROOMS = ("small", "large")
