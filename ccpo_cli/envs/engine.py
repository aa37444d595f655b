"""One ALFWorld game in the real text engine: load once, reset for every episode.

`GameSession` is the unit both the in-process path and the worker processes use. It wraps
TextWorld's `PddlEnv` in ALFWorld's `AlfredDemangler` and `AlfredInfos` (the stack
`AlfredTWEnv.init_env` builds, without the gym batching layer, which reloads the game on every
reset, and without the stochastic hand-coded expert).

Engine quirks handled here (docs/alfworld-games.md, "Engine quirks ccpo works around"):
- every load and reset runs Fast Downward's translator, which overwrites `sys.argv`: it is
  saved and restored around each call;
- importing `alfworld` creates `$ALFWORLD_DATA` (default ~/.cache/alfworld): the variable is
  pointed at a ccpo cache folder when the caller has not set it;
- the grammar is data inside each game file, so both the json_2.1.1 grammar ("put X in/on Y")
  and the 0.4.2 grammar ("move X to Y") play unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.extras import require_extra
from ccpo_cli.task_types import short_key

WIN_REWARD = 10.0
DEFAULT_MAX_STEPS = 50
TASK_PREFIX = "Your task is to: "


def default_cache_dir() -> Path:
    """ccpo's cache root: $CCPO_CACHE_DIR, else $XDG_CACHE_HOME/ccpo, else ~/.cache/ccpo."""
    explicit = os.environ.get("CCPO_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "ccpo"


def _ensure_alfworld_data() -> None:
    if not os.environ.get("ALFWORLD_DATA"):
        os.environ["ALFWORLD_DATA"] = str(default_cache_dir() / "alfworld-data")


@contextlib.contextmanager
def preserved_argv() -> Iterator[None]:
    """Fast Downward's translator sets `sys.argv = ["translate.py", ...]` on every load."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


def require_engine() -> None:
    """Import the engine or fail with one clear line (exit 1) naming the install command."""
    _ensure_alfworld_data()
    for module in ("alfworld.agents.environment.alfred_tw_env", "fast_downward", "textworld.envs"):
        require_extra("alfworld", module, what="the ALFWorld engine")


@functools.lru_cache(maxsize=1)
def engine_assets() -> tuple[str, str]:
    """The installed engine's PDDL domain text and text grammar (with `UNKNOWN GOAL`)."""
    require_engine()
    from alfworld.info import ALFRED_PDDL_PATH, ALFRED_TWL2_PATH

    return Path(ALFRED_PDDL_PATH).read_text(), Path(ALFRED_TWL2_PATH).read_text()


def engine_copy_failure(error: OSError) -> str:
    """Why a new engine shell could not start: each one first copies Fast Downward's library
    (about 34 MB) into a temporary folder, which a full disk or a file-size limit refuses."""
    reason = error.strerror or str(error)
    hint = (
        "the file-size limit (ulimit -f) is below the library's size"
        if error.errno == errno.EFBIG
        else f"check the free space in {tempfile.gettempdir()} (TMPDIR)"
    )
    return (
        f"the ALFWorld engine could not copy its planner library into a temporary folder ({reason}): "
        f"{hint}; nothing was played"
    )


def game_id(game_path: str | os.PathLike) -> str:
    """A machine-independent id: `<task folder>/<trial folder>` of a `game.tw-pddl` path (the
    ALFWorld json_2.1.1 layout), so the same game has the same id wherever it is stored."""
    path = Path(game_path)
    if path.name == "game.tw-pddl":
        path = path.parent
    return f"{path.parent.name}/{path.name}"


def task_of(observation: str) -> str:
    """The `Your task is to: ...` line of an intro observation ('' when absent)."""
    for line in observation.splitlines():
        if line.startswith(TASK_PREFIX):
            return line.strip()
    return ""


@dataclass
class StepResult:
    """What one reset or step returns for one game."""

    observation: str
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)


class GameSession:
    """One engine shell that plays one game at a time: `load()` a game once, then `reset()` it
    for every episode. `load()` again to reuse the shell (and its private copy of Fast
    Downward's library, which holds the game state) for another game.

    Episodes end on a win (reward 10 on that step) or after `max_steps` steps; success is the
    engine's `won` flag only. Steps after the end are refused (ValueError); the batch wrapper
    never sends them.
    """

    def __init__(
        self,
        game_path: str | os.PathLike | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        walkthrough: bool = False,
    ):
        require_engine()
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs import PddlEnv

        self.max_steps = max_steps
        self.want_walkthrough = walkthrough
        infos = textworld.EnvInfos(
            admissible_commands=True, won=True, extras=["walkthrough"] if walkthrough else []
        )
        try:
            self._env = AlfredInfos(AlfredDemangler(PddlEnv(infos)))
        except OSError as error:  # Fast Downward copies its library into a temp folder first
            raise CcpoError(engine_copy_failure(error)) from None
        self.game_path = ""
        self._steps = 0
        self._done = True
        self._task = ""
        if game_path is not None:
            self.load(game_path)

    def load(self, game_path: str | os.PathLike) -> None:
        path = Path(game_path)
        try:
            traj_path = path.parent / "traj_data.json"
            traj = json.loads(traj_path.read_text()) if traj_path.exists() else {}
            task_type = short_key(traj.get("task_type") or path.parent.parent.name)
            with preserved_argv():
                self._env.load(str(path))
        except (Exception, SystemExit) as error:  # noqa: BLE001 - TatSu, translator, JSON, I/O
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            raise InvalidInput(f"{path}: not a playable ALFWorld game ({first_line})") from None
        self.game_path = str(path)
        self.task_type = task_type
        self.game_id = game_id(path)
        self._done = True

    def _info(self, state: Any) -> dict[str, Any]:
        commands = list(state["admissible_commands"])
        info = {
            "admissible_commands": commands,
            "won": bool(state["won"]),
            "task_type": self.task_type,
            "game_id": self.game_id,
            "game_path": self.game_path,
            "task": self._task,
            "step": self._steps,
            "truncated": False,
        }
        if self.want_walkthrough:
            info["walkthrough"] = list(state.get("extra.walkthrough") or [])
        return info

    def reset(self) -> StepResult:
        return self.begin(self.engine_reset())

    def step(self, command: str) -> StepResult:
        self.check_running()
        return self.advance(self.engine_step(command))

    # The engine calls and the episode bookkeeping are separate so that a transition cache
    # (`ccpo_cli.envs.transitions`) can serve engine states without moving the engine.
    def engine_reset(self) -> Any:
        with preserved_argv():
            return self._env.reset()

    def engine_step(self, command: str) -> Any:
        state, _, _ = self._env.step(command)
        return state

    def check_running(self) -> None:
        if self._done:
            raise ValueError(f"episode of {self.game_id} is over; reset first")

    def begin(self, state: Any) -> StepResult:
        """The reset result for an engine state (TextWorld's, or a cached copy)."""
        self._steps = 0
        self._done = False
        observation = state.feedback
        self._task = task_of(observation)
        return StepResult(observation, 0.0, False, self._info(state))

    def advance(self, state: Any) -> StepResult:
        """The step result for the engine state one command later."""
        self._steps += 1
        won = bool(state["won"])
        truncated = not won and self._steps >= self.max_steps
        self._done = won or truncated
        info = self._info(state)
        info["truncated"] = truncated
        return StepResult(state.feedback, WIN_REWARD if won else 0.0, self._done, info)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._env.close()


@functools.lru_cache(maxsize=1)
def validation_session() -> GameSession:
    """This process's shell for checking games one after another (each `GameSession` holds
    its own copy of Fast Downward's library, so checking reuses one instead of making many)."""
    return GameSession(None, max_steps=1_000_000, walkthrough=True)
