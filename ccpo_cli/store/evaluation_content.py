"""The content of one evaluation, checked and in canonical form, before anything is written.

Totals, mean turns and per-type rates missing from the arguments are derived from the episode
rows; rates are percent and rounded to RATE_DECIMALS so that 0.835 * 100 and 83.5 are one value;
the content hash (what makes a repeat a duplicate) is taken over this canonical form.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

from ccpo_cli.benchmarks import task_type_keys
from ccpo_cli.errors import InvalidInput
from ccpo_cli.task_types import TASK_TYPES, short_key

# Rates are compared and hashed at this many decimals, so 0.835 * 100 and 83.5 are one value.
RATE_DECIMALS = 12
# The columns of an `evaluations` row that its content holds (and its hash is taken over, with
# the per-type rates and the episodes), in the order the row gives them.
RESULT_FIELDS = (
    "step",
    "split",
    "episodes",
    "successes",
    "success_rate",
    "mean_turns",
    "temperature",
    "eval_seed",
)


@dataclass(frozen=True)
class EvaluationContent:
    """One evaluation ready to record: its `evaluations` row (without run and provenance), its
    per-type rows, its episode rows, and the hash that identifies the content."""

    row: dict[str, Any]
    task_types: dict[str, dict[str, Any]]
    episodes: list[dict[str, Any]]
    content_hash: str
    content_json: str
    train_success_rate: float | None


# Overloads so that callers passing a value known to be there get `str`, not `str | None`.
@overload
def json_text(value: None) -> None: ...
@overload
def json_text(value: str | Mapping[str, Any]) -> str: ...
@overload
def json_text(value: Any) -> str | None: ...
def json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def round_rate(value: float | None) -> float | None:
    if value is None:
        return None
    return round(float(value), RATE_DECIMALS)


def finite(value: Any, field: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{field} is {value!r}; an evaluation needs a finite value")
    return number


def check_rate(rate: float | None, field: str) -> float | None:
    if rate is not None and not 0.0 <= rate <= 100.0:
        raise InvalidInput(f"{field} is {rate}; success rates are percent (0-100)")
    return round_rate(rate)


# Overloads so that a step typed `int` stays `int` once checked; None passes through as None.
@overload
def non_negative_int(value: None, field: str) -> None: ...
@overload
def non_negative_int(value: int, field: str) -> int: ...
@overload
def non_negative_int(value: Any, field: str) -> int | None: ...
def non_negative_int(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise InvalidInput(f"{field} must be a non-negative integer, got {value!r}")
    return int(value)


def task_type_key(name: str) -> str:
    """The short key of a task type: any benchmark's key as it is (`pick`, `nq`), else an
    ALFWorld task-type name, game folder or path. KeyError for anything else."""
    if name in task_type_keys():
        return name
    return short_key(name)


def normalise_episodes(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    known = {"game_id", "task_type", "won", "turns", "invalid_turns", "reward", "episode_index"}
    episodes = []
    for index, row in enumerate(rows):
        if "won" not in row:
            raise InvalidInput(f"episode {index} has no 'won' field")
        task_type = row.get("task_type")
        if task_type is not None:
            try:
                task_type = task_type_key(str(task_type))
            except KeyError as error:
                raise InvalidInput(f"episode {index}: {error.args[0]}") from None
        extra = {key: value for key, value in row.items() if key not in known}
        episodes.append(
            {
                "episode_index": int(row.get("episode_index", index)),
                "game_id": None if row.get("game_id") is None else str(row["game_id"]),
                "task_type": task_type,
                "won": int(bool(row["won"])),
                "turns": non_negative_int(row.get("turns"), f"episode {index} turns"),
                "invalid_turns": non_negative_int(
                    row.get("invalid_turns"), f"episode {index} invalid_turns"
                ),
                "reward": finite(row.get("reward"), f"episode {index} reward"),
                "extra": json_text(extra) if extra else None,
            }
        )
    return episodes


def normalise_task_types(
    task_types: Mapping[str, Any] | None, episodes: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for name, value in (task_types or {}).items():
        try:
            key = task_type_key(name)
        except KeyError as error:
            raise InvalidInput(error.args[0]) from None
        if isinstance(value, Mapping):
            count = non_negative_int(value.get("episodes"), f"task type {key} episodes")
            wins = non_negative_int(value.get("successes"), f"task type {key} successes")
            rate = finite(
                value.get("success", value.get("success_rate")), f"task type {key} success"
            )
        else:
            count, wins, rate = None, None, finite(value, f"task type {key} success")
        if rate is None and count:
            rate = 100.0 * (wins or 0) / count
        if rate is None:
            continue
        result[key] = {
            "episodes": count,
            "successes": wins,
            "success_rate": check_rate(rate, f"task type {key} success"),
        }
    if episodes and not result:
        for key in TASK_TYPES:
            mine = [e for e in episodes if e["task_type"] == key]
            if mine:
                wins = sum(e["won"] for e in mine)
                result[key] = {
                    "episodes": len(mine),
                    "successes": wins,
                    "success_rate": round_rate(100.0 * wins / len(mine)),
                }
    return result


def content_hash(content: Mapping[str, Any]) -> str:
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def evaluation_content(
    step: int,
    *,
    split: str = "heldout",
    episodes: int | None = None,
    successes: int | None = None,
    success_rate: float | None = None,
    mean_turns: float | None = None,
    temperature: float | None = None,
    eval_seed: int | None = None,
    task_types: Mapping[str, Any] | None = None,
    episode_rows: Sequence[Mapping[str, Any]] | None = None,
    train_success_rate: float | None = None,
) -> EvaluationContent:
    """Check and complete one evaluation's fields (InvalidInput naming the field otherwise)."""
    step = non_negative_int(step, "step")
    episode_list = normalise_episodes(episode_rows or [])
    episodes, successes, mean_turns = _totals_from_episodes(
        episode_list, episodes, successes, mean_turns
    )
    episodes = non_negative_int(episodes, "episodes")
    successes = non_negative_int(successes, "successes")
    rate = _checked_success_rate(step, success_rate, episodes, successes)
    types = normalise_task_types(task_types, episode_list)
    row = {
        "step": step,
        "split": str(split),
        "episodes": episodes,
        "successes": successes,
        "success_rate": rate,
        "mean_turns": round_rate(finite(mean_turns, f"step {step} mean_turns")),
        "temperature": finite(temperature, "temperature"),
        "eval_seed": None if eval_seed is None else int(eval_seed),
    }
    content = dict(row, task_types=types, episodes_rows=episode_list)
    digest = content_hash(content)
    train_rate = check_rate(finite(train_success_rate, "train_success_rate"), "train_success_rate")
    return EvaluationContent(row, types, episode_list, digest, json_text(content), train_rate)


def _totals_from_episodes(
    episode_list: list[dict[str, Any]],
    episodes: Any,
    successes: Any,
    mean_turns: Any,
) -> tuple[Any, Any, Any]:
    """The episodes, successes and mean turns given, each derived from the episode rows when
    it was not given (a value given is kept, and checked against the rows elsewhere)."""
    if episode_list:
        if episodes is None:
            episodes = len(episode_list)
        if successes is None:
            successes = sum(e["won"] for e in episode_list)
        turns = [e["turns"] for e in episode_list if e["turns"] is not None]
        if mean_turns is None and turns:
            mean_turns = sum(turns) / len(turns)
    return episodes, successes, mean_turns


def _checked_success_rate(
    step: int, success_rate: Any, episodes: int | None, successes: int | None
) -> float | None:
    """The success rate in percent: the one given, which must agree with the counts, else the
    counts' own; InvalidInput when neither is there."""
    if episodes is not None and successes is not None and successes > episodes:
        raise InvalidInput(f"step {step}: {successes} successes out of {episodes} episodes")
    rate = finite(success_rate, f"step {step} success_rate")
    if rate is None:
        if not episodes:
            raise InvalidInput(
                f"step {step}: an evaluation needs success_rate or episodes and successes"
            )
        rate = 100.0 * (successes or 0) / episodes
    elif episodes and successes is not None and abs(rate - 100.0 * successes / episodes) > 1e-6:
        raise InvalidInput(
            f"step {step}: success_rate {rate} disagrees with {successes}/{episodes} episodes"
        )
    return check_rate(rate, f"step {step} success_rate")
