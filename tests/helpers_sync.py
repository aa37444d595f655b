"""Databases of simulated machines for the sync tests: a folder each, a host name each, runs with
every kind of row `ccpo sync` carries (evaluations with per-type results and episodes, a conflict,
facts, a publication)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ccpo_cli.store import ensure_run, open_db, record_evaluation, record_publication
from ccpo_cli.store.facts import record_run_facts
from ccpo_cli.store.identity import ExternalArm

GAMES = (
    "pick_and_place_simple-Apple-None-Fridge-1",
    "look_at_obj_in_light-Book-None-DeskLamp-2",
    "pick_clean_then_place_in_recep-Cup-None-Shelf-3",
    "pick_heat_then_place_in_recep-Egg-None-Table-4",
)


def episodes(step: int, wins: int, salt: int = 0) -> list[dict[str, Any]]:
    """Four episodes, the first `wins` of them won, with an extra per-turn field (kept as JSON)."""
    types = ("pick", "look", "clean", "heat")
    return [
        {
            "game_id": f"{GAMES[index]}/trial_{salt}",
            "task_type": types[index],
            "won": index < wins,
            "turns": 5 + index + step,
            "invalid_turns": index % 2,
            "reward": 10.0 if index < wins else 0.0,
            "invalid_flags": [False] * (index + 1),
        }
        for index in range(4)
    ]


def record_step(db, run: str, step: int, wins: int, *, salt: int = 0, eval_seed: int = 0) -> int:
    return record_evaluation(
        db,
        run,
        step,
        split="heldout",
        episode_rows=episodes(step, wins, salt),
        temperature=0.4,
        eval_seed=eval_seed,
        train_success_rate=12.5 * wins,
    )


def machine(root: Path, host: str, monkeypatch) -> Path:
    """The runs.db path of a simulated machine (its own folder); later writes record `host`."""
    folder = root / host
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("CCPO_HOST", host)
    return folder / "runs.db"


@contextlib.contextmanager
def as_machine(db_path: Path) -> Iterator[None]:
    """Run the block as the machine whose runs.db `db_path` is (`machine`'s folder name is its
    host): a pull runs on the machine that pulls, whose own runs no part may rewrite."""
    host = os.environ.get("CCPO_HOST")
    os.environ["CCPO_HOST"] = db_path.parent.name
    try:
        yield
    finally:
        if host is None:
            os.environ.pop("CCPO_HOST", None)
        else:
            os.environ["CCPO_HOST"] = host


def copy_database(source: Path, target: Path) -> None:
    """`cp runs.db` of a database nobody is writing: its WAL checkpointed into the file first."""
    import shutil

    open_db(source).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(source, target)


def full_run(
    db_path: Path,
    name: str,
    *,
    steps=(2, 4),
    arm: str = "grpo",
    seed: int = 0,
    wins_offset: int = 0,
) -> None:
    """A run with evaluations at `steps`, facts, a publication and one recorded conflict."""
    db = open_db(db_path)
    ensure_run(
        db,
        name,
        arm=ExternalArm(arm, "f" * 64),
        seed=seed,
        base_model="tiny",
        backend="local",
        total_steps=max(steps),
        status="finished",
        config={"train": {"steps": max(steps)}},
    )
    for index, step in enumerate(steps):
        record_step(db, name, step, (index + wins_offset) % 5)
    record_run_facts(db, name, {"split": "heldout", "temperature": 0.4}, source="tests")
    record_publication(
        db, name, "tester/card", commit_id="c" * 40, status="interim", card_hash="h" * 64
    )
    # The same step once more with other results: a conflict beside the first row.
    record_step(db, name, steps[0], 4 - (wins_offset % 5), salt=1)


def table_snapshot(db_path: Path) -> dict[str, list]:
    """What a run's evidence is, independent of local ids: per run uid, its evaluations (content
    hashes with their episodes and types), conflicts, facts and publications."""
    db = open_db(db_path)
    uids = {row["id"]: row["uid"] for row in db["runs"].rows}
    snapshot: dict[str, list] = {}
    snapshot["evaluations"] = sorted(
        (
            uids[row["run_id"]],
            row["step"],
            row["content_hash"],
            db["episodes"].count_where("evaluation_id = ?", [row["id"]]),
            db["task_type_results"].count_where("evaluation_id = ?", [row["id"]]),
        )
        for row in db["evaluations"].rows
    )
    snapshot["conflicts"] = sorted(
        (uids[row["run_id"]], row["step"], row["content_hash"]) for row in db["conflicts"].rows
    )
    snapshot["facts"] = sorted(
        (uids[row["run_id"]], row["key"], row["value"]) for row in db["run_facts"].rows
    )
    snapshot["publications"] = sorted(
        (uids[row["run_id"]], row["repo_id"], row["commit_id"], row["published_at"])
        for row in db["publications"].rows
    )
    return snapshot
