"""A matrix's own records: one small JSON file per finished seed block, committed to the
repository under `results/<preregistration>/`, so that a block stopped part-way resumes where
it stopped on any machine, and anyone can re-analyse a matrix without retraining it.

A record holds what the analysis of a block needs and nothing it does not: the seed, the design
and the compared window, the warm-up and each arm's run with its arm fingerprint and protocol
fingerprint (the training configuration's hash, less what does not change what a run measures),
every evaluation as its per-game outcomes, and the CPU seconds of every training step and
evaluation as the trainer recorded them. `load_records` turns a folder of records back into the
testbed's `MatrixData` (testbed_runs.py), the one form its statistics and cost read.

A record is written atomically (a temporary file renamed over it) once its block is complete;
writing it again gives the same bytes. A matrix given `--results DIR` skips the blocks DIR
already records (`recorded_seeds`), and refuses records of another protocol under its prefix,
as it refuses runs of another protocol in runs.db.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.experiments.testbed_runs import MatrixData, RunData, load_run

if TYPE_CHECKING:
    from ccpo_cli.experiments.blocks import Block
    from ccpo_cli.experiments.budget import MatrixCost

SCHEMA = 1


def record_path(folder: str | Path, prefix: str, seed: int) -> Path:
    return Path(folder) / f"{prefix}-seed{seed}.json"


def protocol_fingerprint(train: dict[str, Any]) -> str:
    """The hash of a run's training configuration (TrainConfig.as_dict, as runs.db records it)
    less what does not change what it measures (workers, threads, labels; matrix.NOT_PROTOCOL)
    and less its seed, start checkpoint and rollout stream, which the record names on their own.
    Fields added to TrainConfig after a run was recorded count at their defaults."""
    from ccpo_cli.experiments.matrix import NOT_PROTOCOL, _with_later_defaults

    plain = json.loads(json.dumps(_with_later_defaults(dict(train)), sort_keys=True))
    kept = {
        key: value
        for key, value in plain.items()
        if key not in NOT_PROTOCOL and key not in ("seed", "start_from", "rollout_stream")
    }
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _run_entry(run: RunData, games: list[str]) -> dict[str, Any]:
    index = {game: position for position, game in enumerate(games)}
    evaluations = {}
    for step, outcomes in sorted(run.evaluations.items()):
        won = ["-"] * len(games)
        for game, result in outcomes.items():
            won[index[game]] = "1" if result else "0"
        evaluations[str(step)] = {
            "success": round(100.0 * sum(outcomes.values()) / len(outcomes), 4)
            if outcomes
            else None,
            "won": "".join(won),
            "turns": run.eval_turns.get(step),
        }
    return {
        "run": run.name,
        "stream": run.stream,
        "start_step": run.start_step,
        "evaluations": evaluations,
        "step_cpu_s": {
            str(step): round(value, 3) for step, value in sorted(run.step_cpu_s.items())
        },
        "eval_cpu_s": {
            str(step): round(value, 3) for step, value in sorted(run.eval_cpu_s.items())
        },
        "step_decisions": {str(step): value for step, value in sorted(run.step_decisions.items())},
        "cpu_s": round(sum(run.step_cpu_s.values()) + sum(run.eval_cpu_s.values()), 3),
    }


def recorded_cpu_s(folder: str | Path, prefix: str, seed: int) -> float:
    """The CPU seconds a recorded block's runs took (a resumed matrix's budget counts them)."""
    return float(read_record(record_path(folder, prefix, seed))["cpu_s"])


def _finished_runs(
    db, prefix: str, labels: Sequence[str], seed: int
) -> dict[str, dict[str, Any]] | None:
    """Every arm's run of the block by label, or None while one is missing or not finished."""
    from ccpo_cli.experiments.blocks import run_name
    from ccpo_cli.store import get_run

    rows: dict[str, dict[str, Any]] = {}
    for label in labels:
        try:
            row = get_run(db, run_name(prefix, label, seed))
        except InvalidInput:
            return None
        if row.get("status") != "finished":
            return None
        rows[label] = row
    return rows


def block_record(
    db, prefix: str, labels: Sequence[str], seed: int, preregistration: str
) -> dict[str, Any] | None:
    """The record of one seed's block, read from runs.db and the runs' metrics files: every
    arm's finished run PREFIX-LABEL-seedN and the warm-up it forked from (None when an arm's run
    is not finished: the block is not complete)."""
    from ccpo_cli.experiments.testbed_runs import warmup_name_of
    from ccpo_cli.store import get_run

    rows = _finished_runs(db, prefix, labels, seed)
    if rows is None:
        return None
    loaded = {label: load_run(db, row["name"]) for label, row in rows.items()}
    warm_names = {warmup_name_of(run) for run in loaded.values()} - {None}
    warm_row = get_run(db, next(iter(warm_names))) if len(warm_names) == 1 else None
    warm_run = load_run(db, warm_row["name"]) if warm_row else None
    every = [*loaded.values(), *([warm_run] if warm_run else [])]
    games = sorted({game for run in every for step in run.evaluations.values() for game in step})

    def entry(row: dict[str, Any], run: RunData) -> dict[str, Any]:
        train = (row.get("config") or {}).get("train") or {}
        return {
            **_run_entry(run, games),
            "arm": row.get("arm"),
            "arm_fingerprint": row.get("arm_fingerprint"),
            "protocol": protocol_fingerprint(train),
        }

    runs = {label: entry(rows[label], loaded[label]) for label in labels}
    warm_up = None
    if warm_row is not None and warm_run is not None:
        first = next(iter(loaded.values()))
        warm_up = {**entry(warm_row, warm_run), "trained_by": first.start_arm}
    first_train = (next(iter(rows.values())).get("config") or {}).get("train") or {}
    return {
        "schema": SCHEMA,
        "preregistration": preregistration,
        "prefix": prefix,
        "seed": seed,
        "design": first_train.get("design"),
        "window_start": first_train.get("window_start"),
        "warm_start": next(iter(loaded.values())).start_step,
        "games": games,
        "warm_up": warm_up,
        "runs": runs,
        "cpu_s": round(
            sum(item["cpu_s"] for item in runs.values()) + (warm_up or {}).get("cpu_s", 0.0), 3
        ),
    }


def write_record(folder: str | Path, record: dict[str, Any]) -> Path:
    """Write one block's record atomically (same content, same bytes)."""
    path = record_path(folder, record["prefix"], record["seed"])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)
    return path


def read_record(path: Path) -> dict[str, Any]:
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise InvalidInput(f"{path}: not a matrix record ({error})") from None
    if not isinstance(record, dict) or record.get("schema") != SCHEMA or "runs" not in record:
        raise InvalidInput(f"{path}: not a matrix record of schema {SCHEMA}")
    return record


def read_records(folder: str | Path, prefix: str | None = None) -> list[dict[str, Any]]:
    """Every record of `folder` (of one prefix, if given), in seed order."""
    paths = sorted(Path(folder).glob("*-seed*.json")) if Path(folder).is_dir() else []
    records = [read_record(path) for path in paths]
    records = [record for record in records if prefix is None or record["prefix"] == prefix]
    return sorted(records, key=lambda record: (record["prefix"], record["seed"]))


def recorded_seeds(folder: str | Path, blocks: Sequence[Block]) -> set[int]:
    """The seeds of `blocks` whose record `folder` holds; InvalidInput when a record of the same
    prefix and seed was trained under another protocol or another arm."""
    found: set[int] = set()
    mismatched: list[str] = []
    for block in blocks:
        path = record_path(folder, block.prefix, block.seed)
        if not path.is_file():
            continue
        record = read_record(path)
        compared = [run for run in block.runs() if run.compared]
        for arm, run in zip(block.arms, compared, strict=True):
            entry = record["runs"].get(arm.label)
            if entry is None:
                mismatched.append(f"{path.name}: no run of arm {arm.label}")
            elif (
                entry["protocol"] != protocol_fingerprint(run.config.as_dict())
                or entry["arm_fingerprint"] != run.arm.fingerprint
            ):
                mismatched.append(f"{path.name}: {arm.label} was trained with other settings")
        found.add(block.seed)
    if mismatched:
        raise InvalidInput(
            f"results records of prefix {blocks[0].prefix!r} do not match this matrix "
            f"({'; '.join(mismatched[:3])}); give a new --prefix or --results folder"
        )
    return found


def _run_data(entry: dict[str, Any], seed: int, games: list[str]) -> RunData:
    evaluations = {
        int(step): {game: flag == "1" for game, flag in zip(games, value["won"]) if flag != "-"}
        for step, value in entry["evaluations"].items()
    }
    return RunData(
        entry["run"],
        seed,
        int(entry.get("stream") or 0),
        int(entry.get("start_step") or 0),
        None,
        evaluations,
        step_cpu_s={int(k): float(v) for k, v in entry.get("step_cpu_s", {}).items()},
        eval_cpu_s={int(k): float(v) for k, v in entry.get("eval_cpu_s", {}).items()},
        step_decisions={int(k): int(v) for k, v in entry.get("step_decisions", {}).items()},
        eval_turns={
            int(step): int(value["turns"])
            for step, value in entry["evaluations"].items()
            if value.get("turns") is not None
        },
    )


def load_records(
    folder: str | Path, prefix: str, labels: Iterable[str] | None = None
) -> MatrixData:
    """A matrix read back from its records, as `testbed_runs.load_matrix` reads it from runs.db:
    runs[label][seed] and the warm-ups, each fork's `start_from` naming its warm-up."""
    from ccpo_cli.backends.local.checkpoints import checkpoint_path

    wanted = None if labels is None else set(labels)
    runs: dict[str, dict[int, RunData]] = {}
    warmups: dict[str, RunData] = {}
    for record in read_records(folder, prefix):
        seed, games = int(record["seed"]), record["games"]
        start_from = None
        if record.get("warm_up"):
            warm = _run_data(record["warm_up"], seed, games)
            warmups[warm.name] = warm
            start_from = str(checkpoint_path(Path("ccpo-runs") / warm.name, record["warm_start"]))
        for label, entry in record["runs"].items():
            if wanted is not None and label not in wanted:
                continue
            run = _run_data(entry, seed, games)
            run.start_from = start_from
            run.start_arm = (record.get("warm_up") or {}).get("trained_by")
            runs.setdefault(label, {})[seed] = run
    return MatrixData(prefix, runs, warmups)


def measured_cost(folder: str | Path) -> MatrixCost:
    """The mean CPU-minutes of a warm-up and of a fork in the records of `folder`, as the
    trainer recorded them (InvalidInput without a record that has them)."""
    from ccpo_cli.experiments.budget import MatrixCost

    warmups, forks = [], []
    for record in read_records(folder):
        if record.get("warm_up") and record["warm_up"].get("cpu_s"):
            warmups.append(record["warm_up"]["cpu_s"] / 60)
        forks.extend(entry["cpu_s"] / 60 for entry in record["runs"].values() if entry.get("cpu_s"))
    if not forks:
        raise InvalidInput(f"{folder}: no matrix record with CPU seconds")
    return MatrixCost(
        sum(warmups) / len(warmups) if warmups else 0.0,
        sum(forks) / len(forks),
        f"measured by {len(forks)} runs recorded in {folder}",
    )
