"""Writing to runs.db: runs, evaluations (append-only, content-hashed), checkpoints, publications.

Raw evaluation rows are never overwritten. The same content twice is one row (keyed by a hash
of everything the evaluation measured); a different result for the same run, step, split and
eval seed is kept in `conflicts` next to the row that was there first, and reported.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ccpo_cli.names import check_run_name
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import utc_now, write_transaction
from ccpo_cli.task_types import TASK_TYPES, short_key

# Fields that say *which* experiment a run is; changing one after the fact would silently
# relabel recorded evaluations, so a different value is refused rather than updated.
IDENTITY_FIELDS = ("arm", "arm_fingerprint", "seed", "base_model", "benchmark", "data_order_seed")
MUTABLE_FIELDS = (
    "backend",
    "total_steps",
    "status",
    "hardware",
    "git_commit",
    "git_dirty",
    "package_versions",
    "config",
)
RUN_STATUSES = ("created", "running", "finished", "failed", "stopped")
DEFAULT_BENCHMARK = "alfworld"
_UNSET: Any = object()  # "not given": a new run gets the default, an existing one keeps its value
# Rates are compared and hashed at this many decimals, so 0.835 * 100 and 83.5 are one value.
RATE_DECIMALS = 12


@dataclass(frozen=True)
class EvaluationOutcome:
    """What `record_evaluation_outcome` did: `new`, `duplicate` or `conflict`."""

    evaluation_id: int
    outcome: str
    conflict_id: int | None = None


def _json_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _round_rate(value: float | None) -> float | None:
    if value is None:
        return None
    return round(float(value), RATE_DECIMALS)


def run_id(db: sqlite_utils.Database, run: str | int) -> int:
    """The id of a run given its name or id; InvalidInput if there is no such run."""
    if isinstance(run, int) and not isinstance(run, bool):
        row = db.execute("SELECT id FROM runs WHERE id = ?", [run]).fetchone()
    else:
        row = db.execute("SELECT id FROM runs WHERE name = ?", [str(run)]).fetchone()
    if row is None:
        raise InvalidInput(f"no run named {run!r} in the database")
    return int(row[0])


def ensure_run(
    db: sqlite_utils.Database,
    name: str,
    *,
    arm: str | None = None,
    arm_fingerprint: str | None = None,
    seed: int | None = None,
    base_model: str | None = None,
    benchmark: str | None = _UNSET,
    backend: str | None = None,
    total_steps: int | None = None,
    status: str | None = None,
    hardware: str | None = None,
    data_order_seed: int | None = None,
    git_commit: str | None = None,
    git_dirty: bool | None = None,
    package_versions: Mapping[str, str] | None = None,
    config: Mapping[str, Any] | None = None,
) -> int:
    """Create the run `name`, or fill in / update the given fields of an existing one; its id.

    Options left as None never erase what is recorded. Identity fields (arm, arm fingerprint,
    seed, base model, benchmark, data-order seed) may be filled in once but never changed:
    a different value raises InvalidInput (exit 3), e.g. ingesting a GiGPO log into a
    return-hard run. `config` and `package_versions` are stored as JSON. `benchmark` defaults
    to "alfworld" for a new run.
    """
    check_run_name(name)
    if status is not None and status not in RUN_STATUSES:
        raise InvalidInput(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
    given = {
        "arm": arm,
        "arm_fingerprint": arm_fingerprint,
        "seed": seed,
        "base_model": base_model,
        "benchmark": None if benchmark is _UNSET else benchmark,
        "data_order_seed": data_order_seed,
        "backend": backend,
        "total_steps": total_steps,
        "status": status,
        "hardware": hardware,
        "git_commit": git_commit,
        "git_dirty": None if git_dirty is None else int(bool(git_dirty)),
        "package_versions": _json_text(package_versions),
        "config": _json_text(config),
    }
    given = {key: value for key, value in given.items() if value is not None}
    with write_transaction(db):
        existing = db.execute("SELECT * FROM runs WHERE name = ?", [name]).fetchone()
        now = utc_now()
        if existing is None:
            row = dict(given, name=name, created_at=now, updated_at=now)
            row.setdefault("status", "created")
            if benchmark is _UNSET:
                row["benchmark"] = DEFAULT_BENCHMARK
            columns = ", ".join(row)
            marks = ", ".join("?" for _ in row)
            cursor = db.execute(f"INSERT INTO runs ({columns}) VALUES ({marks})", list(row.values()))
            return int(cursor.lastrowid)
        recorded = dict(zip([d[0] for d in db.execute("SELECT * FROM runs LIMIT 0").description], existing))
        for field in IDENTITY_FIELDS:
            if field in given and recorded[field] is not None and recorded[field] != given[field]:
                raise InvalidInput(
                    f"run {name!r} is recorded with {field} {recorded[field]!r}, "
                    f"refusing {given[field]!r} (use a new --run name)"
                )
        changes = {key: value for key, value in given.items() if recorded[key] != value}
        if changes:
            changes["updated_at"] = now
            assignments = ", ".join(f"{key} = ?" for key in changes)
            db.execute(
                f"UPDATE runs SET {assignments} WHERE id = ?", [*changes.values(), recorded["id"]]
            )
        return int(recorded["id"])


def update_run_state(
    db: sqlite_utils.Database,
    run: str | int,
    *,
    status: str | None = None,
    last_step: int | None = None,
    step1_rollout_hash: str | None = None,
) -> None:
    """Record training progress: status, the last step reached, the step-1 rollout hash.

    `last_step` only ever moves forward. The step-1 rollout hash (a digest of the first
    batch's rollouts, before any gradient) is written once; a different value later raises
    InvalidInput, since it would mean the run was restarted with different data or policy.
    `updated_at` is always refreshed.
    """
    if status is not None and status not in RUN_STATUSES:
        raise InvalidInput(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
    with write_transaction(db):
        identifier = run_id(db, run)
        recorded_hash, recorded_last = db.execute(
            "SELECT step1_rollout_hash, last_step FROM runs WHERE id = ?", [identifier]
        ).fetchone()
        changes: dict[str, Any] = {"updated_at": utc_now()}
        if status is not None:
            changes["status"] = status
        if last_step is not None and (recorded_last is None or last_step > recorded_last):
            changes["last_step"] = int(last_step)
        if step1_rollout_hash is not None:
            if recorded_hash is not None and recorded_hash != step1_rollout_hash:
                raise InvalidInput(
                    f"run {run!r} has step-1 rollout hash {recorded_hash}, refusing a different "
                    f"one ({step1_rollout_hash})"
                )
            changes["step1_rollout_hash"] = step1_rollout_hash
        assignments = ", ".join(f"{key} = ?" for key in changes)
        db.execute(f"UPDATE runs SET {assignments} WHERE id = ?", [*changes.values(), identifier])


def _finite(value: Any, field: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise InvalidInput(f"{field} is {value!r}; an evaluation needs a finite value")
    return number


def _check_rate(rate: float | None, field: str) -> float | None:
    if rate is not None and not 0.0 <= rate <= 100.0:
        raise InvalidInput(f"{field} is {rate}; success rates are percent (0-100)")
    return _round_rate(rate)


def _count(value: Any, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or int(value) != value or value < 0:
        raise InvalidInput(f"{field} must be a non-negative integer, got {value!r}")
    return int(value)


def _normalise_episodes(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    known = {"game_id", "task_type", "won", "turns", "invalid_turns", "reward", "episode_index"}
    episodes = []
    for index, row in enumerate(rows):
        if "won" not in row:
            raise InvalidInput(f"episode {index} has no 'won' field")
        task_type = row.get("task_type")
        if task_type is not None:
            try:
                task_type = short_key(str(task_type))
            except KeyError as error:
                raise InvalidInput(f"episode {index}: {error.args[0]}") from None
        extra = {key: value for key, value in row.items() if key not in known}
        episodes.append(
            {
                "episode_index": int(row.get("episode_index", index)),
                "game_id": None if row.get("game_id") is None else str(row["game_id"]),
                "task_type": task_type,
                "won": int(bool(row["won"])),
                "turns": _count(row.get("turns"), f"episode {index} turns"),
                "invalid_turns": _count(row.get("invalid_turns"), f"episode {index} invalid_turns"),
                "reward": _finite(row.get("reward"), f"episode {index} reward"),
                "extra": _json_text(extra) if extra else None,
            }
        )
    return episodes


def _normalise_task_types(
    task_types: Mapping[str, Any] | None, episodes: list[dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for name, value in (task_types or {}).items():
        try:
            key = short_key(name)
        except KeyError as error:
            raise InvalidInput(error.args[0]) from None
        if isinstance(value, Mapping):
            count = _count(value.get("episodes"), f"task type {key} episodes")
            wins = _count(value.get("successes"), f"task type {key} successes")
            rate = _finite(value.get("success", value.get("success_rate")), f"task type {key} success")
        else:
            count, wins, rate = None, None, _finite(value, f"task type {key} success")
        if rate is None and count:
            rate = 100.0 * (wins or 0) / count
        if rate is None:
            continue
        result[key] = {"episodes": count, "successes": wins, "success_rate": _check_rate(rate, f"task type {key} success")}
    if episodes and not result:
        for key in TASK_TYPES:
            mine = [e for e in episodes if e["task_type"] == key]
            if mine:
                wins = sum(e["won"] for e in mine)
                result[key] = {
                    "episodes": len(mine),
                    "successes": wins,
                    "success_rate": _round_rate(100.0 * wins / len(mine)),
                }
    return result


def _content_hash(content: Mapping[str, Any]) -> str:
    text = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def record_evaluation_outcome(
    db: sqlite_utils.Database,
    run: str | int,
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
    source_file: str | None = None,
    source_line: int | None = None,
) -> EvaluationOutcome:
    """`record_evaluation`, also saying whether the row was new, a duplicate or a conflict."""
    step = _count(step, "step")
    episode_list = _normalise_episodes(episode_rows or [])
    if episode_list:
        if episodes is None:
            episodes = len(episode_list)
        if successes is None:
            successes = sum(e["won"] for e in episode_list)
        turns = [e["turns"] for e in episode_list if e["turns"] is not None]
        if mean_turns is None and turns:
            mean_turns = sum(turns) / len(turns)
    episodes = _count(episodes, "episodes")
    successes = _count(successes, "successes")
    if episodes is not None and successes is not None and successes > episodes:
        raise InvalidInput(f"step {step}: {successes} successes out of {episodes} episodes")
    rate = _finite(success_rate, f"step {step} success_rate")
    if rate is None:
        if not episodes:
            raise InvalidInput(f"step {step}: an evaluation needs success_rate or episodes and successes")
        rate = 100.0 * (successes or 0) / episodes
    elif episodes and successes is not None and abs(rate - 100.0 * successes / episodes) > 1e-6:
        raise InvalidInput(
            f"step {step}: success_rate {rate} disagrees with {successes}/{episodes} episodes"
        )
    rate = _check_rate(rate, f"step {step} success_rate")
    types = _normalise_task_types(task_types, episode_list)
    row = {
        "step": step,
        "split": str(split),
        "episodes": episodes,
        "successes": successes,
        "success_rate": rate,
        "mean_turns": _round_rate(_finite(mean_turns, f"step {step} mean_turns")),
        "temperature": _finite(temperature, "temperature"),
        "eval_seed": None if eval_seed is None else int(eval_seed),
    }
    content = dict(row, task_types=types, episodes_rows=episode_list)
    digest = _content_hash(content)
    train_rate = _check_rate(_finite(train_success_rate, "train_success_rate"), "train_success_rate")
    with write_transaction(db):
        identifier = run_id(db, run)
        same = db.execute(
            "SELECT id FROM evaluations WHERE run_id = ? AND content_hash = ?", [identifier, digest]
        ).fetchone()
        if same is not None:
            return EvaluationOutcome(int(same[0]), "duplicate")
        clash = db.execute(
            "SELECT id FROM evaluations WHERE run_id = ? AND step = ? AND split = ? "
            "AND eval_seed IS ? ORDER BY id LIMIT 1",
            [identifier, step, row["split"], row["eval_seed"]],
        ).fetchone()
        now = utc_now()
        if clash is not None:
            db.execute(
                "INSERT OR IGNORE INTO conflicts (run_id, step, split, eval_seed, kept_evaluation_id, "
                "content_hash, content, source_file, source_line, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [identifier, step, row["split"], row["eval_seed"], clash[0], digest,
                 _json_text(content), source_file, source_line, now],
            )
            conflict = db.execute(
                "SELECT id FROM conflicts WHERE run_id = ? AND content_hash = ?", [identifier, digest]
            ).fetchone()
            return EvaluationOutcome(int(clash[0]), "conflict", int(conflict[0]))
        cursor = db.execute(
            "INSERT INTO evaluations (run_id, step, split, episodes, successes, success_rate, "
            "mean_turns, temperature, eval_seed, train_success_rate, source_file, source_line, "
            "content_hash, recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [identifier, step, row["split"], row["episodes"], row["successes"], row["success_rate"],
             row["mean_turns"], row["temperature"], row["eval_seed"], train_rate, source_file,
             source_line, digest, now],
        )
        evaluation_id = int(cursor.lastrowid)
        db.conn.executemany(
            "INSERT INTO task_type_results (evaluation_id, task_type, episodes, successes, success_rate) "
            "VALUES (?, ?, ?, ?, ?)",
            [(evaluation_id, key, value["episodes"], value["successes"], value["success_rate"])
             for key, value in types.items()],
        )
        db.conn.executemany(
            "INSERT INTO episodes (evaluation_id, episode_index, game_id, task_type, won, turns, "
            "invalid_turns, reward, extra) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(evaluation_id, e["episode_index"], e["game_id"], e["task_type"], e["won"], e["turns"],
              e["invalid_turns"], e["reward"], e["extra"]) for e in episode_list],
        )
        db.execute(
            "UPDATE runs SET last_step = MAX(COALESCE(last_step, ?), ?), updated_at = ? WHERE id = ?",
            [step, step, now, identifier],
        )
        return EvaluationOutcome(evaluation_id, "new")


def record_evaluation(db: sqlite_utils.Database, run: str | int, step: int, **fields: Any) -> int:
    """Record one evaluation of `run` (name or id; the run must exist) at training `step`.

    All in one transaction: the evaluation row, its per-task-type rows and its episodes.
    `success_rate` is percent (0-100); it may be left out when `episodes` and `successes`
    (or `episode_rows`) give it. `task_types` maps a short key (`pick`, ..., or an ALFWorld
    name) to ``{"episodes", "successes", "success"}`` (success in percent) or just to the rate.
    `episode_rows` are dicts with `won` (required), `game_id`, `task_type`, `turns`,
    `invalid_turns`, `reward`; other keys are kept as JSON. Missing totals, mean turns and
    per-type rates are derived from the episodes.

    Idempotent: recording the same content again returns the existing id. A *different*
    result for the same run, step, split and eval seed is stored in `conflicts` (and the
    existing id returned); nothing is overwritten. Returns the evaluation id. The keyword
    fields are those of `record_evaluation_outcome` (split, episodes, successes, success_rate,
    mean_turns, temperature, eval_seed, task_types, episode_rows, train_success_rate,
    source_file, source_line).
    """
    return record_evaluation_outcome(db, run, step, **fields).evaluation_id


def record_checkpoint(
    db: sqlite_utils.Database,
    run: str | int,
    step: int,
    path: str,
    *,
    sha256: str | None = None,
    size_bytes: int | None = None,
    evaluation_id: int | None = None,
) -> int:
    """Record a saved checkpoint of `run` at `step` (idempotent on run, step, path); its id.

    A digest given later fills in a missing one; a different digest for the same path and
    step raises InvalidInput (the file was replaced).
    """
    step = _count(step, "step")
    with write_transaction(db):
        identifier = run_id(db, run)
        existing = db.execute(
            "SELECT id, sha256 FROM checkpoints WHERE run_id = ? AND step = ? AND path = ?",
            [identifier, step, str(path)],
        ).fetchone()
        if existing is not None:
            if sha256 is not None and existing[1] not in (None, sha256):
                raise InvalidInput(
                    f"checkpoint {path} of run {run!r} at step {step} was recorded with sha256 "
                    f"{existing[1]}, not {sha256}"
                )
            db.execute(
                "UPDATE checkpoints SET sha256 = COALESCE(sha256, ?), size_bytes = COALESCE(size_bytes, ?), "
                "evaluation_id = COALESCE(evaluation_id, ?) WHERE id = ?",
                [sha256, size_bytes, evaluation_id, existing[0]],
            )
            return int(existing[0])
        cursor = db.execute(
            "INSERT INTO checkpoints (run_id, step, path, sha256, size_bytes, evaluation_id, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            [identifier, step, str(path), sha256, size_bytes, evaluation_id, utc_now()],
        )
        return int(cursor.lastrowid)


def record_publication(
    db: sqlite_utils.Database,
    run: str | int,
    repo_id: str,
    *,
    revision: str | None = None,
    commit_id: str | None = None,
    card_hash: str | None = None,
    status: str | None = None,
    checkpoint_step: int | None = None,
    url: str | None = None,
) -> int:
    """Record that a card (and maybe a checkpoint) of `run` was pushed to the Hub; its id.

    Append-only: every push is one row (status is `interim` or `final`, as on the card).
    """
    if status is not None and status not in ("interim", "final"):
        raise InvalidInput(f"publication status {status!r} is not interim or final")
    with write_transaction(db):
        identifier = run_id(db, run)
        cursor = db.execute(
            "INSERT INTO publications (run_id, repo_id, revision, commit_id, card_hash, status, "
            "checkpoint_step, url, published_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [identifier, repo_id, revision, commit_id, card_hash, status, checkpoint_step, url, utc_now()],
        )
        return int(cursor.lastrowid)
