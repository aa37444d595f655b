"""Writing to runs.db: runs, evaluations (append-only, content-hashed), checkpoints, publications.

Raw evaluation rows are never overwritten. The same content twice is one row (keyed by a hash
of everything the evaluation measured); a different result for the same run, step, split and
eval seed is kept in `conflicts` next to the row that was there first, and reported.

Rows go in and out through sqlite-utils' table API (`insert`, `insert_all`, `update`,
`rows_where`, `get`); each write sits in one `write_transaction`, so it is all or nothing.

One concern, kept in one file past 400 lines: every write of a run's records goes through here:
the run row (`ensure_run`, the one writer of a run's identity) and its evaluations, checkpoints
and publications share the run lookup, the content-hash rule and `write_transaction`, and the
standing rule (`STANDING`) the readers use sits beside the writes it describes.
"""

from __future__ import annotations

import json
import os
import socket
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.names import check_run_name, host_label
from ccpo_cli.store.db import inserted_id, utc_now, write_transaction
from ccpo_cli.store.evaluation_content import (
    EvaluationContent,
    evaluation_content,
    json_text,
    non_negative_int,
)
from ccpo_cli.vocabulary import CARD_STATUSES

if TYPE_CHECKING:
    from ccpo_cli.arms import Arm
    from ccpo_cli.store.identity import ExternalArm

# Fields that say *which* experiment a run is; changing one after the fact would silently
# relabel recorded evaluations, so a different value is refused rather than updated.
IDENTITY_FIELDS = (
    "arm",
    "arm_fingerprint",
    "seed",
    "base_model",
    "benchmark",
    "data_order_seed",
    "kind",
    "arm_flags",
    "arm_overrides",
)
# A run either trains (an arm on a base model) or only evaluates an agent: a reference run
# (`ccpo eval` of the oracle, the random agent or a checkpoint under a new run name).
RUN_KINDS = ("training", "evaluation")
RUN_STATUSES = ("created", "running", "finished", "failed", "stopped")
# The machine name recorded with the runs this machine creates; cluster jobs whose host names
# change from job to job set it to one stable name.
HOST_ENV = "CCPO_HOST"


# The WHERE condition that keeps only standing evaluations (not retracted, store/retractions.py).
STANDING = "id NOT IN (SELECT evaluation_id FROM retractions WHERE evaluation_id IS NOT NULL)"


@dataclass(frozen=True)
class EvaluationOutcome:
    """What `record_evaluation_outcome` did: `new`, `duplicate` or `conflict`."""

    evaluation_id: int
    outcome: str
    conflict_id: int | None = None
    # A duplicate that completed the kept row: the fields it filled in (`task_types`, ...).
    completed: tuple[str, ...] = ()


def _first(
    table: sqlite_utils.db.Table, where: str, values: Sequence[Any], **options: Any
) -> dict[str, Any] | None:
    return next(table.rows_where(where, list(values), limit=1, **options), None)


def run_id(db: sqlite_utils.Database, run: str | int) -> int:
    """The id of a run given its name or id; InvalidInput if there is no such run."""
    by_id = isinstance(run, int) and not isinstance(run, bool)
    row = _first(
        db.table("runs"),
        "id = ?" if by_id else "name = ?",
        [run if by_id else str(run)],
        select="id",
    )
    if row is None:
        raise InvalidInput(f"no run named {run!r} in the database")
    return int(row["id"])


def new_run_uid() -> str:
    """A run's global id, created with the run: a name is only unique on one machine."""
    return uuid.uuid4().hex


def this_host() -> str:
    """$CCPO_HOST, else the host name, as a host label (ccpo_cli/names.py)."""
    return host_label(os.environ.get(HOST_ENV) or socket.gethostname())


def _arm_columns(arm: Arm | ExternalArm | None) -> dict[str, Any]:
    """The runs columns of an arm: an `Arm` records its name, fingerprint, resolved flags and
    overrides; an `ExternalArm` (store/identity.py) only its name and fingerprint. Anything else
    is a programming error (TypeError): a bare name says neither which of the two it is nor its
    fingerprint."""
    if arm is None:
        return {}
    from ccpo_cli.store.identity import ExternalArm

    if isinstance(arm, ExternalArm):
        return {"arm": arm.name, "arm_fingerprint": arm.fingerprint}
    from ccpo_cli.arms import Arm

    if not isinstance(arm, Arm):
        raise TypeError(
            "ensure_run's arm is an Arm (ccpo_cli/arms.py) or an ExternalArm "
            f"(ccpo_cli/store/identity.py), not {type(arm).__name__} {arm!r}"
        )
    return {
        "arm": arm.name,
        "arm_fingerprint": arm.fingerprint,
        "arm_flags": json.dumps(arm.flags(), sort_keys=True),
        "arm_overrides": json.dumps(dict(arm.overrides), sort_keys=True),
    }


def run_exists(db: sqlite_utils.Database, name: str) -> bool:
    return _first(db.table("runs"), "name = ?", [name], select="id") is not None


def _check_choice(value: str | None, choices: tuple[str, ...], what: str) -> None:
    if value is not None and value not in choices:
        raise InvalidInput(f"{what} {value!r} is not one of {', '.join(choices)}")


def _new_run_row(name: str, given: Mapping[str, Any], now: str) -> dict[str, Any]:
    """A new run's row: what was given, its global id and the host that creates it; a run is
    created, and trains, unless told otherwise."""
    row = dict(
        given, name=name, uid=new_run_uid(), host=this_host(), created_at=now, updated_at=now
    )
    row.setdefault("status", "created")
    row.setdefault("kind", "training")
    return row


def _refuse_identity_change(
    name: str, recorded: Mapping[str, Any], given: Mapping[str, Any]
) -> None:
    """InvalidInput when a given identity field differs from the one recorded: filled in once,
    never changed (it would relabel the run's recorded evaluations)."""
    for field in IDENTITY_FIELDS:
        if field in given and recorded[field] is not None and recorded[field] != given[field]:
            raise InvalidInput(
                f"run {name!r} is recorded with {field} {recorded[field]!r}, "
                f"refusing {given[field]!r} (use a new --run name)"
            )


def ensure_run(
    db: sqlite_utils.Database,
    name: str,
    *,
    arm: Arm | ExternalArm | None = None,
    kind: str | None = None,
    seed: int | None = None,
    base_model: str | None = None,
    benchmark: str | None = None,
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

    This is the one writer of a run's identity. `arm` is an `Arm` (its name, fingerprint, resolved
    flags and overrides are recorded) or an `ExternalArm` (store/identity.py: a name and a
    fingerprint only, for an arm ccpo did not resolve); anything else raises TypeError. `kind` is training (the
    default for a new run) or evaluation (a reference run that only evaluated an agent).
    Options left as None never erase what is recorded. Identity fields (arm, arm fingerprint,
    flags and overrides, kind, seed, base model, benchmark, data-order seed) may be filled in
    once but never changed: a different value raises InvalidInput (exit 3), e.g. ingesting a
    GiGPO log into a return-hard run. `config` and `package_versions` are stored as JSON.
    A benchmark is never assumed: a run records one only when it is given. A new run gets its global id (`uid`) and
    the host that created it.
    """
    given = {
        **_arm_columns(arm),
        "kind": kind,
        "seed": seed,
        "base_model": base_model,
        "benchmark": benchmark,
        "data_order_seed": data_order_seed,
        "backend": backend,
        "total_steps": total_steps,
        "status": status,
        "hardware": hardware,
        "git_commit": git_commit,
        "git_dirty": None if git_dirty is None else int(bool(git_dirty)),
        "package_versions": json_text(package_versions),
        "config": json_text(config),
    }
    return _write_run(db, name, {key: value for key, value in given.items() if value is not None})


def _write_run(db: sqlite_utils.Database, name: str, given: Mapping[str, Any]) -> int:
    """Create the run `name` with the `given` columns, or fill in and update them on the
    recorded one (an identity field is never changed); its id. The name, status and kind are
    checked first, so nothing is written for a value a run cannot hold."""
    check_run_name(name)
    _check_choice(given.get("status"), RUN_STATUSES, "run status")
    _check_choice(given.get("kind"), RUN_KINDS, "run kind")
    runs = db.table("runs")
    with write_transaction(db):
        recorded = _first(runs, "name = ?", [name])
        now = utc_now()
        if recorded is None:
            return inserted_id(runs.insert(_new_run_row(name, given, now)))
        _refuse_identity_change(name, recorded, given)
        changes = {key: value for key, value in given.items() if recorded[key] != value}
        if changes:
            runs.update(recorded["id"], dict(changes, updated_at=now))
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
    _check_choice(status, RUN_STATUSES, "run status")
    with write_transaction(db):
        identifier = run_id(db, run)
        recorded = db.table("runs").get(identifier)
        recorded_hash, recorded_last = recorded["step1_rollout_hash"], recorded["last_step"]
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
        db.table("runs").update(identifier, changes)


def record_evaluation_outcome(
    db: sqlite_utils.Database,
    run: str | int,
    step: int,
    *,
    source_file: str | None = None,
    source_line: int | None = None,
    **fields: Any,
) -> EvaluationOutcome:
    """`record_evaluation`, also saying whether the row was new, a duplicate or a conflict.
    `fields` are the evaluation's, as `evaluation_content` takes and checks them (split, episodes,
    successes, success_rate, mean_turns, temperature, eval_seed, task_types, episode_rows,
    train_success_rate)."""
    checked = evaluation_content(step, **fields)
    with write_transaction(db):
        identifier = run_id(db, run)
        same = _first(
            db.table("evaluations"),
            "run_id = ? AND content_hash = ?",
            [identifier, checked.content_hash],
        )
        if same is not None:
            # The training rate is no part of the content hash: a repeat may still carry it.
            return _duplicate(db, same, _completion(db, same, checked) or {})
        clash = _standing_clash(db, identifier, checked.row)
        completion = None if clash is None else _completion(db, clash, checked)
        if clash is not None and completion is not None:
            # One result recorded twice: written at two precisions (the console's 0.477, the
            # summary's 0.4765625), or with fields only one of the records carries (a console's
            # per-type rates, a history's training rate), which complete the kept row.
            return _duplicate(db, clash, completion)
        now = utc_now()
        if clash is not None:
            return _record_conflict(db, identifier, clash, checked, source_file, source_line, now)
        evaluation_id = insert_evaluation_rows(
            db,
            identifier,
            checked.row,
            checked.task_types,
            checked.episodes,
            content_hash=checked.content_hash,
            train_success_rate=checked.train_success_rate,
            source_file=source_file,
            source_line=source_line,
            recorded_at=now,
        )
        return EvaluationOutcome(evaluation_id, "new")


def _standing_clash(
    db: sqlite_utils.Database, identifier: int, row: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The standing evaluation of the same run, step, split and eval seed, if any. Against the
    result that stands: a retracted one (store/retractions.py) no longer does, so a corrected
    evaluation recorded after a retraction is new, not a conflict."""
    return _first(
        db.table("evaluations"),
        f"run_id = ? AND step = ? AND split = ? AND eval_seed IS ? AND {STANDING}",
        [identifier, row["step"], row["split"], row["eval_seed"]],
        order_by="id",
    )


def _duplicate(
    db: sqlite_utils.Database, recorded: Mapping[str, Any], adds: Mapping[str, Any]
) -> EvaluationOutcome:
    """A result recorded before: complete the kept row with what only the new record carries."""
    _complete(db, recorded, adds)
    return EvaluationOutcome(int(recorded["id"]), "duplicate", completed=tuple(sorted(adds)))


def _record_conflict(
    db: sqlite_utils.Database,
    identifier: int,
    clash: Mapping[str, Any],
    checked: EvaluationContent,
    source_file: str | None,
    source_line: int | None,
    now: str,
) -> EvaluationOutcome:
    """Keep a differing result beside the one that stands (`clash`), in `conflicts`. The same
    differing content seen twice is one conflict row (UNIQUE (run_id, content_hash)), so the
    insert ignores a repeat."""
    row = checked.row
    db.table("conflicts").insert(
        {
            "run_id": identifier,
            "step": row["step"],
            "split": row["split"],
            "eval_seed": row["eval_seed"],
            "kept_evaluation_id": clash["id"],
            "content_hash": checked.content_hash,
            "content": checked.content_json,
            "source_file": source_file,
            "source_line": source_line,
            "recorded_at": now,
        },
        ignore=True,
    )
    conflict = _first(
        db.table("conflicts"),
        "run_id = ? AND content_hash = ?",
        [identifier, checked.content_hash],
        select="id",
    )
    # Inserted just now or by the same content before (the insert ignored a repeat).
    assert conflict is not None
    return EvaluationOutcome(int(clash["id"]), "conflict", int(conflict["id"]))


# The fields of an evaluation compared when one result may be written at another precision,
# or recorded by two files that each carry some of them.
_COMPARED_FIELDS = (
    "episodes",
    "successes",
    "success_rate",
    "mean_turns",
    "temperature",
    "train_success_rate",
)


def _decimals(value: float) -> int:
    text = repr(round(float(value), 9))
    return len(text.split(".")[1]) if "." in text and "e" not in text else 9


def agree_at_precision(first: float, second: float) -> bool:
    """Whether two numbers are one value written at two precisions: the finer one rounds to the
    coarser one at the coarser one's decimals (47.7 and 47.65625; never 47.7 and 47.6)."""
    coarse, fine = (first, second) if _decimals(first) <= _decimals(second) else (second, first)
    return abs(float(fine) - float(coarse)) <= 0.5 * 10.0 ** -_decimals(coarse) + 1e-9


def _agree(mine: Any, theirs: Any) -> bool:
    return mine is None or theirs is None or agree_at_precision(float(mine), float(theirs))


def _completion(
    db: sqlite_utils.Database, recorded: Mapping[str, Any], checked: EvaluationContent
) -> dict[str, Any] | None:
    """What a new record of a recorded result adds to it, or None when the two disagree.

    Two records are one result when every value both carry agrees at the coarser of the two
    precisions (47.7 and 47.65625); a value only one carries is no disagreement. The fields, the
    per-type rates (`task_types`) and episode rows (`episodes`) that only the new one carries
    are returned, to complete the kept row; an empty dict is a plain duplicate."""
    fields = dict(checked.row, train_success_rate=checked.train_success_rate)
    adds: dict[str, Any] = {}
    for name in _COMPARED_FIELDS:
        mine, theirs = fields.get(name), recorded.get(name)
        if not _agree(mine, theirs):
            return None
        if theirs is None and mine is not None:
            adds[name] = mine
    recorded_types = {
        item["task_type"]: item["success_rate"]
        for item in db.table("task_type_results").rows_where("evaluation_id = ?", [recorded["id"]])
    }
    for key, value in checked.task_types.items():
        if key in recorded_types and not _agree(value.get("success_rate"), recorded_types[key]):
            return None
    missing_types = {
        key: value for key, value in checked.task_types.items() if key not in recorded_types
    }
    if missing_types:
        adds["task_types"] = missing_types
    if (
        checked.episodes
        and _first(db.table("episodes"), "evaluation_id = ?", [recorded["id"]], select="id") is None
    ):
        adds["episodes"] = checked.episodes
    return adds


def _complete(
    db: sqlite_utils.Database, recorded: Mapping[str, Any], adds: Mapping[str, Any]
) -> None:
    """Fill in what the kept evaluation did not record (a value, once recorded, never changes:
    the append-only trigger of migration m010_completed_evaluations allows only this)."""
    identifier = recorded["id"]
    columns = {key: value for key, value in adds.items() if key in _COMPARED_FIELDS}
    if columns:
        db.table("evaluations").update(identifier, columns)
    db.table("task_type_results").insert_all(
        {"evaluation_id": identifier, "task_type": key, **value}
        for key, value in adds.get("task_types", {}).items()
    )
    db.table("episodes").insert_all(
        dict(episode, evaluation_id=identifier) for episode in adds.get("episodes", [])
    )


def latest_standing_evaluation(
    db: sqlite_utils.Database, run: str | int, *, at_most: int, split: str = "heldout"
) -> dict[str, Any] | None:
    """The run's standing evaluation of the latest step not after `at_most` (its step and rate)."""
    return _first(
        db.table("evaluations"),
        f"run_id = ? AND step <= ? AND split = ? AND {STANDING}",
        [run_id(db, run), int(at_most), split],
        select="id, step, success_rate",
        order_by="step DESC, id",
    )


def mark_new_run_reference(db: sqlite_utils.Database, run: str, run_is_new: bool) -> bool:
    """Make a run created by this ingest a reference run (kind evaluation); True when it is one.
    A run recorded as a training run before is never changed (kind is part of its identity)."""
    row = _first(db.table("runs"), "name = ?", [run], select="id, kind")
    # The caller recorded the run (ensure_run) before marking it.
    assert row is not None, f"run {run!r} is not recorded"
    if row["kind"] == "evaluation":
        return True
    if not run_is_new:
        return False
    db.table("runs").update(row["id"], {"kind": "evaluation", "updated_at": utc_now()})
    return True


def insert_evaluation_rows(
    db: sqlite_utils.Database,
    identifier: int,
    row: Mapping[str, Any],
    task_types: Mapping[str, Mapping[str, Any]],
    episodes: Sequence[Mapping[str, Any]],
    *,
    content_hash: str,
    train_success_rate: float | None,
    source_file: str | None,
    source_line: int | None,
    recorded_at: str,
) -> int:
    """Write one checked evaluation (its row, per-type rows and episodes) and move the run's
    last step on; the caller holds the write transaction and has ruled out a duplicate. The one
    place an evaluation row is inserted (a settled conflict's kept result comes through here too,
    store/retractions.py)."""
    evaluation_id = inserted_id(
        db.table("evaluations").insert(
            dict(
                row,
                run_id=identifier,
                train_success_rate=train_success_rate,
                source_file=source_file,
                source_line=source_line,
                content_hash=content_hash,
                recorded_at=recorded_at,
            )
        )
    )
    db.table("task_type_results").insert_all(
        {"evaluation_id": evaluation_id, "task_type": key, **value}
        for key, value in task_types.items()
    )
    db.table("episodes").insert_all(
        dict(episode, evaluation_id=evaluation_id) for episode in episodes
    )
    step = row["step"]
    recorded_last = db.table("runs").get(identifier)["last_step"]
    db.table("runs").update(
        identifier,
        {
            "last_step": step if recorded_last is None else max(recorded_last, step),
            "updated_at": recorded_at,
        },
    )
    return evaluation_id


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
    step = non_negative_int(step, "step")
    checkpoints = db.table("checkpoints")
    with write_transaction(db):
        identifier = run_id(db, run)
        existing = _first(
            checkpoints, "run_id = ? AND step = ? AND path = ?", [identifier, step, str(path)]
        )
        if existing is not None:
            if sha256 is not None and existing["sha256"] not in (None, sha256):
                raise InvalidInput(
                    f"checkpoint {path} of run {run!r} at step {step} was recorded with sha256 "
                    f"{existing['sha256']}, not {sha256}"
                )
            given = {"sha256": sha256, "size_bytes": size_bytes, "evaluation_id": evaluation_id}
            missing = {
                key: value
                for key, value in given.items()
                if value is not None and existing[key] is None
            }
            if missing:
                checkpoints.update(existing["id"], missing)
            return int(existing["id"])
        row = {
            "run_id": identifier,
            "step": step,
            "path": str(path),
            "sha256": sha256,
            "size_bytes": size_bytes,
            "evaluation_id": evaluation_id,
            "created_at": utc_now(),
        }
        return inserted_id(checkpoints.insert(row))


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
    if status is not None and status not in CARD_STATUSES:
        raise InvalidInput(f"publication status {status!r} is not interim or final")
    with write_transaction(db):
        row = {
            "run_id": run_id(db, run),
            "repo_id": repo_id,
            "revision": revision,
            "commit_id": commit_id,
            "card_hash": card_hash,
            "status": status,
            "checkpoint_step": checkpoint_step,
            "url": url,
            "published_at": utc_now(),
        }
        return inserted_id(db.table("publications").insert(row))
