"""Correcting the record without losing it: retractions and settled conflicts.

Nothing recorded is ever deleted or edited. A wrong result is *retracted*: a row in
`retractions` says which run (the whole run) or which evaluations (a run's evaluations at one
step), why, who and when; the readers that compute numbers (`store.queries`, the identity
reader, the comparison document and so the cards and publishing) leave retracted evaluations
out and retracted runs out of every pool, and say so. `ccpo runs show` still shows everything,
marked.

A *conflict* (the same run, step, split and evaluation seed recorded with two results,
store/records.py) is *settled* by keeping one value: a row in `conflict_resolutions` records
the value kept, who and when, and `settled_conflicts` the conflicts it settles. When the value
kept is the one that was standing, nothing else changes; when it is a conflicting one, that
result is recorded as an evaluation of its own and the one that stood is retracted, pointing at
the resolution. A conflict recorded later at the same step is open again.

The three tables are append-only (triggers refuse UPDATE and DELETE; migration m008_retractions).

One concern, kept in one file past 400 lines: retractions and settled conflicts are one
append-only correction record: settling a conflict retracts the result that stood, so both use
the same tables, checks and readers (`retracted_evaluations`, `resolutions`), and sync merges
them through `resolve_by_content`.
"""

from __future__ import annotations

import getpass
import json
import math
import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, overload

import sqlite_utils

from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import inserted_id, utc_now, write_transaction
from ccpo_cli.store.evaluation_content import RESULT_FIELDS
from ccpo_cli.store.field_values import field_values
from ccpo_cli.store.records import STANDING, insert_evaluation_rows, run_id, this_host

MAX_REASON = 1000
RESOLVED_SOURCE = "ccpo runs resolve"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def default_actor() -> str:
    """Who corrects the record when `--by` is not given: the login name at this host."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name in a bare container
        user = "unknown"
    return f"{user}@{this_host()}"


# Overloads so that a required text (the author) is typed `str`: an empty one raises instead.
@overload
def _checked_text(value: str, what: str, *, required: Literal[True]) -> str: ...
@overload
def _checked_text(value: str, what: str, *, required: bool) -> str | None: ...
def _checked_text(value: str, what: str, *, required: bool) -> str | None:
    text = (value or "").strip()
    if not text:
        if required:
            raise InvalidInput(f"{what}: say why (a non-empty text)")
        return None
    if len(text) > MAX_REASON:
        raise InvalidInput(f"{what}: at most {MAX_REASON} characters, got {len(text)}")
    if _CONTROL.search(text):
        raise InvalidInput(f"{what}: one line of text without control characters")
    return text


@dataclass(frozen=True)
class Retraction:
    """What `retract` did: the retraction rows (new ones and those already there)."""

    run: str
    step: int | None
    retraction_ids: tuple[int, ...]
    evaluation_ids: tuple[int, ...]
    already: bool  # everything asked for was retracted before: nothing new was written

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "step": self.step,
            "retraction_ids": list(self.retraction_ids),
            "evaluation_ids": list(self.evaluation_ids),
            "already_retracted": self.already,
        }


def retraction_row(
    identifier: int,
    evaluation: int | None,
    step: int | None,
    reason: str,
    actor: str,
    now: str,
    resolution_id: int | None = None,
) -> dict[str, Any]:
    """One row of `retractions`: the whole run (`evaluation` None) or one evaluation; a row
    written by a settlement names its resolution."""
    row: dict[str, Any] = {
        "run_id": identifier,
        "evaluation_id": evaluation,
        "step": step,
        "reason": reason,
        "retracted_by": actor,
        "recorded_at": now,
    }
    if resolution_id is not None:
        row["resolution_id"] = resolution_id
    return row


def _retract_run(
    db: sqlite_utils.Database, run: str, identifier: int, reason: str, actor: str
) -> Retraction:
    """Retract the whole run, unless a retraction of the whole run is there already."""
    existing = next(
        db.table("retractions").rows_where(
            "run_id = ? AND evaluation_id IS NULL",
            [identifier],
            order_by="id",
            limit=1,
            select="id",
        ),
        None,
    )
    if existing is not None:
        return Retraction(run, None, (int(existing["id"]),), (), True)
    row = retraction_row(identifier, None, None, reason, actor, utc_now())
    return Retraction(run, None, (inserted_id(db.table("retractions").insert(row)),), (), False)


def _evaluations_at_step(
    db: sqlite_utils.Database, run: str, identifier: int, step: int, split: str | None
) -> list[int]:
    """The ids of the run's evaluations at `step` (of `split`); InvalidInput naming the steps
    it has when there are none, so that a mistyped step is not retracted silently."""
    where = "run_id = ? AND step = ?" + (" AND split = ?" if split is not None else "")
    params = [identifier, step, *([split] if split is not None else [])]
    at_step = list(db.table("evaluations").rows_where(where, params, order_by="id", select="id"))
    if at_step:
        return [int(row["id"]) for row in at_step]
    steps = [
        row["step"]
        for row in db.query(
            "SELECT DISTINCT step FROM evaluations WHERE run_id = ? ORDER BY step", [identifier]
        )
    ]
    shown = ", ".join(map(str, steps[:20])) + (" ..." if len(steps) > 20 else "")
    raise InvalidInput(
        f"run {run!r} has no evaluation at step {step}"
        + (f" of split {split!r}" if split else "")
        + (f" (its evaluated steps: {shown})" if steps else " (it has no evaluation)")
    )


def retract(
    db: sqlite_utils.Database,
    run: str,
    *,
    reason: str,
    step: int | None = None,
    split: str | None = None,
    by: str | None = None,
) -> Retraction:
    """Retract the whole run (`step` None) or its standing evaluations at `step` (of `split`, or
    of every split). Idempotent: what is already retracted is not retracted twice."""
    reason_text = _checked_text(reason, "--reason", required=True)
    actor = _checked_text(by if by is not None else default_actor(), "--by", required=True)
    if step is not None and (isinstance(step, bool) or step < 0):
        raise InvalidInput(f"--step must be a non-negative integer, got {step}")
    if split is not None and step is None:
        raise InvalidInput("--split chooses evaluations at a step: give --step too")
    with write_transaction(db):
        identifier = run_id(db, run)
        if step is None:
            return _retract_run(db, run, identifier, reason_text, actor)
        ids = _evaluations_at_step(db, run, identifier, step, split)
        done = {
            int(row["evaluation_id"]): int(row["id"])
            for row in db.table("retractions").rows_where(
                f"evaluation_id IN ({', '.join('?' for _ in ids)})", ids, select="id, evaluation_id"
            )
        }
        now = utc_now()
        new = [
            retraction_row(identifier, evaluation, step, reason_text, actor, now)
            for evaluation in ids
            if evaluation not in done
        ]
        retraction_ids = list(done.values())
        for row in new:
            retraction_ids.append(inserted_id(db.table("retractions").insert(row)))
        return Retraction(run, step, tuple(sorted(retraction_ids)), tuple(ids), not new)


def retracted_runs(db: sqlite_utils.Database) -> dict[int, dict[str, Any]]:
    """{run id: the first retraction of the whole run} (reason, retracted_by, recorded_at)."""
    found: dict[int, dict[str, Any]] = {}
    for row in db.query(
        "SELECT id, run_id, reason, retracted_by, recorded_at FROM retractions "
        "WHERE evaluation_id IS NULL ORDER BY id"
    ):
        found.setdefault(
            int(row["run_id"]),
            {key: row[key] for key in ("id", "reason", "retracted_by", "recorded_at")},
        )
    return found


def retracted_evaluations(
    db: sqlite_utils.Database, run_ids: list[int] | None = None
) -> dict[int, dict[str, Any]]:
    """{evaluation id: its retraction} for the runs given (all runs when None)."""
    where, params = "r.evaluation_id IS NOT NULL", []
    if run_ids is not None:
        if not run_ids:
            return {}
        where += f" AND r.run_id IN ({', '.join('?' for _ in run_ids)})"
        params = list(run_ids)
    rows = db.query(
        "SELECT r.id, r.run_id, r.evaluation_id, r.reason, r.retracted_by, r.recorded_at, e.step, e.split, "
        f"e.eval_seed, runs.name AS run FROM retractions r JOIN evaluations e ON e.id = r.evaluation_id "
        f"JOIN runs ON runs.id = r.run_id WHERE {where} ORDER BY r.id",
        params,
    )
    return {int(row["evaluation_id"]): dict(row) for row in rows}


# ----------------------------------------------------------------------------- conflicts


def _parse_value(text: str) -> tuple[float, int]:
    """'83.6' -> (83.6, 1): the value and the decimals it was written with."""
    cleaned = str(text).strip().rstrip("%").strip()
    try:
        value = float(cleaned)
    except ValueError:
        raise InvalidInput(f"--keep {text!r}: a success rate in percent, e.g. 83.6") from None
    if not math.isfinite(value) or not 0 <= value <= 100:
        raise InvalidInput(f"--keep {text!r}: a success rate in percent (0-100)")
    decimals = len(cleaned.split(".", 1)[1]) if "." in cleaned and "e" not in cleaned.lower() else 0
    return value, decimals


def _matches(candidate: float, value: float, decimals: int) -> bool:
    # The value as the user wrote it: 83.6 is 83.59375 shown with one decimal.
    return abs(candidate - value) <= 0.5 * 10**-decimals + 1e-9


@dataclass(frozen=True)
class Resolution:
    resolution_id: int
    run: str
    step: int
    split: str
    eval_seed: int | None
    kept_value: float
    kept_evaluation_id: int
    settled_conflict_ids: tuple[int, ...]
    superseded_evaluation_ids: tuple[int, ...]  # retracted because the conflicting value was kept
    already: bool = False

    def as_dict(self) -> dict[str, Any]:
        document = field_values(self, leave_out=frozenset({"already"}))
        document.update(
            settled_conflict_ids=list(self.settled_conflict_ids),
            superseded_evaluation_ids=list(self.superseded_evaluation_ids),
        )
        return {**document, "already_settled": self.already}


def _open_conflicts(db: sqlite_utils.Database, identifier: int, step: int) -> list[dict[str, Any]]:
    rows = db.query(
        "SELECT * FROM conflicts WHERE run_id = ? AND step = ? AND id NOT IN (SELECT conflict_id FROM settled_conflicts) "
        "ORDER BY id",
        [identifier, step],
    )
    return [dict(row, content=json.loads(row["content"])) for row in rows]


def _standing(
    db: sqlite_utils.Database, identifier: int, step: int, split: str, eval_seed: int | None
) -> list[dict]:
    return list(
        db.query(
            f"SELECT id, success_rate, content_hash FROM evaluations WHERE run_id = ? AND step = ? AND split = ? "
            f"AND eval_seed IS ? AND {STANDING} ORDER BY id",
            [identifier, step, split, eval_seed],
        )
    )


def _insert_conflict_result(
    db: sqlite_utils.Database, identifier: int, conflict: dict[str, Any]
) -> int:
    """The conflicting result, recorded as an evaluation of its own (its content is canonical already)."""
    content = conflict["content"]
    row = {key: content.get(key) for key in RESULT_FIELDS}
    return insert_evaluation_rows(
        db,
        identifier,
        row,
        content.get("task_types") or {},
        content.get("episodes_rows") or [],
        content_hash=conflict["content_hash"],
        train_success_rate=None,
        source_file=RESOLVED_SOURCE,
        source_line=int(conflict["id"]),
        recorded_at=utc_now(),
    )


def _earlier_resolution(
    db: sqlite_utils.Database,
    identifier: int,
    run: str,
    step: int,
    value: float,
    decimals: int,
    split: str | None,
    eval_seed: int | None,
) -> Resolution | None:
    for row in reversed(resolutions(db, [identifier]).get(identifier, [])):
        if (
            row["step"] != step
            or (split is not None and row["split"] != split)
            or (eval_seed is not None and row["eval_seed"] != eval_seed)
        ):
            continue
        if not _matches(float(row["kept_value"]), value, decimals):
            # Settled before with another value: a second settlement would silently undo the
            # first, so it is refused and the standing settlement named.
            raise InvalidInput(
                f"run {run!r} step {step}: already resolved keeping {float(row['kept_value']):g} "
                f"(resolution {row['id']}, by {row.get('resolved_by') or 'unknown'}); nothing changed"
            )
        superseded = [
            int(item["evaluation_id"])
            for item in db.table("retractions").rows_where(
                "resolution_id = ?", [row["id"]], order_by="id", select="evaluation_id"
            )
        ]
        return Resolution(
            int(row["id"]),
            run,
            step,
            row["split"],
            row["eval_seed"],
            float(row["kept_value"]),
            int(row["kept_evaluation_id"]),
            tuple(row["settled_conflict_ids"]),
            tuple(superseded),
            already=True,
        )
    return None


class _Candidate(NamedTuple):
    """A result that a settlement may keep: the standing evaluation of a (split, eval seed)
    group, or one of its conflicting results; `rate` its success rate (None when not recorded)."""

    group: tuple[str, int | None]
    kind: Literal["standing", "conflict"]
    row: dict[str, Any]
    rate: float | None


def _candidates(
    db: sqlite_utils.Database,
    identifier: int,
    step: int,
    group: tuple[str, int | None],
    conflicts: list[dict[str, Any]],
) -> list[_Candidate]:
    """The results of one group at `step`: the standing evaluation first, then the conflicts."""
    standing = [
        _Candidate(group, "standing", row, row["success_rate"])
        for row in _standing(db, identifier, step, *group)
    ]
    return standing + [
        _Candidate(group, "conflict", row, row["content"].get("success_rate"))
        for row in conflicts
        if (row["split"], row["eval_seed"]) == group
    ]


def _chosen_by_value(
    candidates: list[_Candidate], keep: str, value: float, decimals: int, step: int, run: str
) -> _Candidate:
    """The one result whose success rate is `keep` as written; InvalidInput listing the results
    when none or several of them match (a standing match wins over conflicting ones)."""
    matching = [
        candidate
        for candidate in candidates
        if candidate.rate is not None and _matches(float(candidate.rate), value, decimals)
    ]
    shown = "; ".join(
        f"{kind} {row['id']} ({group[0]}, seed {group[1]}): {rate}"
        for group, kind, row, rate in candidates
    )
    if not matching:
        raise InvalidInput(
            f"--keep {keep}: no result at step {step} of run {run!r} has that success rate "
            f"(the results: {shown})"
        )
    if len({candidate.group for candidate in matching}) > 1:
        raise InvalidInput(
            f"--keep {keep} matches results of several splits or seeds at step {step}; choose one "
            f"with --split and --eval-seed (the results: {shown})"
        )
    standing_match = [candidate for candidate in matching if candidate.kind == "standing"]
    if not standing_match and len(matching) > 1:
        raise InvalidInput(
            f"--keep {keep} matches several conflicting results at step {step} "
            f"({', '.join(str(candidate.row['id']) for candidate in matching)}); write the value "
            "with more decimals"
        )
    return (standing_match or matching)[0]


def resolve(
    db: sqlite_utils.Database,
    run: str,
    *,
    step: int,
    keep: str,
    reason: str | None = None,
    split: str | None = None,
    eval_seed: int | None = None,
    by: str | None = None,
) -> Resolution:
    """Settle the open conflicts of `run` at `step` by keeping the result whose success rate is
    `keep` (percent, as written: '83.6' matches 83.59375). `split`/`eval_seed` choose among
    several conflicting groups at the step."""
    value, decimals = _parse_value(keep)
    reason_text = _checked_text(reason or "", "--reason", required=False)
    actor = _checked_text(by if by is not None else default_actor(), "--by", required=True)
    with write_transaction(db):
        identifier = run_id(db, run)
        conflicts = [
            row
            for row in _open_conflicts(db, identifier, step)
            if (split is None or row["split"] == split)
            and (eval_seed is None or row["eval_seed"] == eval_seed)
        ]
        if not conflicts:
            earlier = _earlier_resolution(
                db, identifier, run, step, value, decimals, split, eval_seed
            )
            if earlier is not None:
                return earlier  # the same settlement asked for again: nothing new to write
            raise InvalidInput(
                f"run {run!r} has no open conflict at step {step}"
                + (" for that split and seed" if split is not None or eval_seed is not None else "")
                + " (ccpo runs show lists its conflicts)"
            )
        groups = sorted(
            {(row["split"], row["eval_seed"]) for row in conflicts},
            key=lambda g: (g[0], -1 if g[1] is None else g[1]),
        )
        candidates = [
            candidate
            for group in groups
            for candidate in _candidates(db, identifier, step, group, conflicts)
        ]
        chosen = _chosen_by_value(candidates, keep, value, decimals, step, run)
        return _settle(db, identifier, run, step, conflicts, chosen, reason_text, actor)


def _kept_evaluation(
    db: sqlite_utils.Database, identifier: int, step: int, chosen: _Candidate
) -> tuple[int, list[int]]:
    """The evaluation that stands once `chosen` is kept, and the ones it supersedes: the standing
    one supersedes nothing; a conflicting result is recorded as an evaluation of its own and
    supersedes the group's standing evaluations."""
    if chosen.kind == "standing":
        return int(chosen.row["id"]), []
    kept_id = _insert_conflict_result(db, identifier, chosen.row)
    superseded = [
        int(row["id"])
        for row in _standing(db, identifier, step, *chosen.group)
        if int(row["id"]) != kept_id
    ]
    return kept_id, superseded


def _settle(
    db: sqlite_utils.Database,
    identifier: int,
    run: str,
    step: int,
    conflicts: list[dict[str, Any]],
    chosen: _Candidate,
    reason_text: str | None,
    actor: str,
) -> Resolution:
    """Keep `chosen` (the standing evaluation, or a conflicting result) for its group at `step`:
    the resolution row, the conflicts it settles, the evaluations it supersedes."""
    assert chosen.rate is not None, "only a result with a success rate is kept"
    group, kept_rate = chosen.group, float(chosen.rate)
    settled_ids = tuple(
        int(row["id"]) for row in conflicts if (row["split"], row["eval_seed"]) == group
    )
    now = utc_now()
    kept_id, superseded = _kept_evaluation(db, identifier, step, chosen)
    resolution_id = inserted_id(
        db.table("conflict_resolutions").insert(
            {
                "run_id": identifier,
                "step": step,
                "split": group[0],
                "eval_seed": group[1],
                "kept_value": kept_rate,
                "kept_evaluation_id": kept_id,
                "kept_content_hash": chosen.row["content_hash"],
                "reason": reason_text,
                "resolved_by": actor,
                "recorded_at": now,
            }
        )
    )
    db.table("settled_conflicts").insert_all(
        {"conflict_id": conflict_id, "resolution_id": resolution_id} for conflict_id in settled_ids
    )
    why = (
        f"superseded: the conflict at step {step} was resolved keeping {kept_rate:g} "
        f"(resolution {resolution_id})"
    )
    db.table("retractions").insert_all(
        retraction_row(identifier, evaluation, step, why, actor, now, resolution_id)
        for evaluation in superseded
    )
    return Resolution(
        resolution_id, run, step, *group, kept_rate, kept_id, settled_ids, tuple(superseded)
    )


def resolve_by_content(
    db: sqlite_utils.Database,
    run: str,
    identifier: int,
    *,
    step: int,
    split: str,
    eval_seed: int | None,
    kept_content_hash: str,
    reason: str | None,
    by: str,
) -> Resolution | None:
    """Settle the open conflicts of one group as another machine settled them, keeping the
    result with `kept_content_hash` (`ccpo sync`, store/sync_corrections.py); None when nothing
    here is open for it, or the kept result is not here. Inside the caller's transaction."""
    reason_text = _checked_text(reason or "", "a synced resolution's reason", required=False)
    actor = _checked_text(by, "a synced resolution's author", required=True)
    conflicts = [
        row
        for row in _open_conflicts(db, identifier, step)
        if row["split"] == split and row["eval_seed"] == eval_seed
    ]
    if not conflicts:
        return None
    # The kept result is the standing evaluation, else one of the conflicting results.
    for candidate in _candidates(db, identifier, step, (split, eval_seed), conflicts):
        if candidate.row["content_hash"] == kept_content_hash and candidate.rate is not None:
            return _settle(db, identifier, run, step, conflicts, candidate, reason_text, actor)
    return None


def resolutions(
    db: sqlite_utils.Database, run_ids: list[int] | None = None
) -> dict[int, list[dict[str, Any]]]:
    """{run id: its conflict resolutions, oldest first, each with the conflict ids it settled}."""
    where, params = "", []
    if run_ids is not None:
        if not run_ids:
            return {}
        where, params = f"WHERE run_id IN ({', '.join('?' for _ in run_ids)})", list(run_ids)
    found: dict[int, list[dict[str, Any]]] = {}
    rows = list(db.query(f"SELECT * FROM conflict_resolutions {where} ORDER BY id", params))
    settled: dict[int, list[int]] = {}
    if rows:
        marks = ", ".join("?" for _ in rows)
        for item in db.query(
            f"SELECT conflict_id, resolution_id FROM settled_conflicts WHERE resolution_id IN ({marks}) "
            "ORDER BY conflict_id",
            [row["id"] for row in rows],
        ):
            settled.setdefault(int(item["resolution_id"]), []).append(int(item["conflict_id"]))
    for row in rows:
        found.setdefault(int(row["run_id"]), []).append(
            dict(row, settled_conflict_ids=settled.get(int(row["id"]), []))
        )
    return found
