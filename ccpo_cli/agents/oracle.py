"""The oracle: plays the planner's walkthrough (deterministic; wins every solvable game).

Needs an environment built with `walkthrough=True`, so each reset info carries the plan (the
one stored in the game file, else Fast Downward's plan for it).
"""

from __future__ import annotations

from typing import Any

from ccpo_cli.errors import UsageError


class OracleAgent:
    name = "oracle"

    def __init__(self) -> None:
        self._plans: list[list[str]] = []

    def reset(self, observations: list[str], infos: list[dict[str, Any]]) -> None:
        if any("walkthrough" not in info for info in infos):
            raise UsageError("the oracle agent needs AlfworldBatchEnv(..., walkthrough=True)")
        self._plans = [list(info["walkthrough"]) for info in infos]

    def act(self, observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        # Past the end of its plan (an unwinnable game) the oracle only looks, so the episode
        # runs to the step limit and counts as a failure rather than crashing.
        return [
            plan[info["step"]] if info["step"] < len(plan) else "look"
            for plan, info in zip(self._plans, infos)
        ]
