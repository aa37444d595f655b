"""What a run's evaluations call for on the Hub, written into the outbox.

Every held-out evaluation asks for an interim card of the run as it stands at that step. An
evaluation that is the best so far (by `store.queries.best_evaluation`, the rule the card
states: the highest held-out success, the earliest on ties) also asks for its checkpoint, which
goes up before the card that names it. The end of a finished run asks for the final weights
(the last step's checkpoint) and the final card. Everything is read from runs.db, so a resumed
run, or a follower started days later, asks for exactly what the recorded evaluations call for,
and a resumed run's first evaluation never displaces a better one recorded before it.

A checkpoint source is frozen when it is enqueued: a local checkpoint file is hard-linked (or
copied) under the run folder's `publish/`, so the trainer's rotation of old checkpoints never
removes what waits for upload; a verl `global_step_N` folder is protected from pruning while
its entry is pending (backends/verl/follow.py).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import sqlite_utils

from ccpo_cli.backends.verl.checkpoint import DEFAULT_MERGED_NAME
from ccpo_cli.paths import file_sha256
from ccpo_cli.publishing.target import PushTarget
from ccpo_cli.store import best_evaluation, run_evaluations
from ccpo_cli.store.outbox import OutboxEntry, enqueue, entries
from ccpo_cli.vocabulary import INTERIM

CheckpointFinder = Callable[[int], Path | None]
PUBLISH_FOLDER = "publish"


def card_content_hash(evaluations: list[dict], step: int, role: str) -> str:
    """A card request's content: the evaluations it would report (their content hashes) and its kind."""
    digest = hashlib.sha256(role.encode())
    for row in evaluations:
        if row["step"] <= step:
            digest.update(row["content_hash"].encode())
    return digest.hexdigest()


def source_hash(path: Path) -> str:
    """sha256 of a checkpoint file, or of a folder's file names, sizes and modification times
    (a verl checkpoint of many gigabytes is identified without reading it)."""
    if path.is_file():
        return file_sha256(path)
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        parts = item.relative_to(path).parts
        if parts[0] == DEFAULT_MERGED_NAME or any(part.startswith(".") for part in parts):
            continue  # ccpo's own merge inside a verl checkpoint, and hidden files, are not its content
        stat = item.stat()
        digest.update(
            f"{item.relative_to(path).as_posix()}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode()
        )
    return digest.hexdigest()


def freeze(source: Path, run_dir: Path | None) -> Path:
    """A local checkpoint file kept for upload under RUN/publish/ (hard link, else copy);
    folders (verl checkpoints) are used where they are."""
    # Absolute: the outbox is read by an uploader process that may run in another folder.
    source = source.absolute()
    if source.is_dir() or run_dir is None:
        return source
    kept = Path(run_dir).absolute() / PUBLISH_FOLDER / source.name
    if kept.exists():
        return kept
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_name(f".{kept.name}.partial")
    try:
        os.link(source, partial)
    except OSError:
        shutil.copy2(source, partial)
    os.replace(partial, kept)
    return kept


def _enqueue(db, run, target: PushTarget, **fields) -> list[OutboxEntry]:
    """One outbox entry for `target`; in a list when it is new (an entry queued before is not)."""
    entry, created = enqueue(
        db,
        run,
        repo_id=target.repo_id,
        revision=target.revision,
        private=target.private,
        endpoint=target.endpoint,
        **fields,
    )
    return [entry] if created else []


def _card_request(db, run, target: PushTarget, evaluations, role: str, step: int) -> list:
    """The card of `run` at `step`, its content the evaluations it reports."""
    return _enqueue(
        db,
        run,
        target,
        kind="card",
        role=role,
        step=step,
        content_hash=card_content_hash(evaluations, step, role),
    )


def _checkpoint_request(
    db, run, target: PushTarget, source: Path, run_dir: Path | None, role: str, step: int
) -> list:
    """The checkpoint of `run` at `step`, frozen for upload first (see `freeze`)."""
    kept = freeze(source, run_dir)
    return _enqueue(
        db,
        run,
        target,
        kind="checkpoint",
        role=role,
        step=step,
        content_hash=source_hash(kept),
        source=str(kept),
    )


def note_evaluations(
    db: sqlite_utils.Database,
    run: str,
    target: PushTarget,
    *,
    checkpoint_for: CheckpointFinder,
    run_dir: Path | None = None,
) -> list[OutboxEntry]:
    """Enqueue what the run's recorded evaluations call for and is not queued yet; the new entries."""
    evaluations = run_evaluations(db, run)
    queued = entries(db, run, target.repo_id)
    carded = {entry.step for entry in queued if entry.kind == "card"}
    new: list[OutboxEntry] = []
    for row in evaluations:
        if row["step"] in carded:
            continue
        carded.add(row["step"])
        new += _card_request(db, run, target, evaluations, INTERIM, row["step"])
    best = best_evaluation(evaluations)
    if best is not None and not any(
        e.kind == "checkpoint" and e.step == best["step"] for e in queued
    ):
        source = checkpoint_for(best["step"])
        if source is not None:
            new += _checkpoint_request(db, run, target, source, run_dir, "best", best["step"])
    return new


def note_end(
    db: sqlite_utils.Database,
    run: str,
    target: PushTarget,
    *,
    last_step: int,
    checkpoint: Path | None,
    run_dir: Path | None = None,
) -> list[OutboxEntry]:
    """Enqueue the final weights (when the last step's checkpoint exists) and the final card."""
    new: list[OutboxEntry] = []
    queued = any(
        e.kind == "checkpoint" and e.step == last_step for e in entries(db, run, target.repo_id)
    )
    if checkpoint is not None and checkpoint.exists() and not queued:
        new += _checkpoint_request(db, run, target, checkpoint, run_dir, "final", last_step)
    evaluations = run_evaluations(db, run)
    return new + _card_request(db, run, target, evaluations, "final", last_step)


def local_checkpoints(
    db: sqlite_utils.Database, run: str, run_dir: Path | None = None
) -> CheckpointFinder:
    """The local trainer's checkpoint file of a step, as runs.db records it (None once removed,
    or when the file's sha256 is not the one runs.db records for that run and step).

    A ccpo from before absolute paths recorded them relative to the trainer's working folder,
    which a follower elsewhere does not share: such a path is looked up in the run folder's
    `checkpoints/` by its file name (the layout backends/local/checkpoints.py writes)."""
    from ccpo_cli.store import run_checkpoints

    def find(step: int) -> Path | None:
        for row in reversed(run_checkpoints(db, run)):
            if row["step"] != step:
                continue
            path = Path(row["path"])
            if path.is_absolute() or path.is_file():
                candidates = [path]
            else:
                candidates = (
                    [Path(run_dir) / "checkpoints" / path.name] if run_dir is not None else []
                )
            for candidate in candidates:
                # Only the file runs.db recorded for this run and step: same name, other weights
                # (another run's folder, a file swapped in) is not this run's checkpoint.
                if (
                    candidate.is_file()
                    and row["sha256"]
                    and file_sha256(candidate) == row["sha256"]
                ):
                    return candidate.absolute()
        return None

    return find


def recorded_sha256s(db: sqlite_utils.Database, run: str, step: int) -> set[str]:
    """The sha256 digests runs.db records for the checkpoints of `run` at `step`."""
    from ccpo_cli.store import run_checkpoints

    return {
        row["sha256"] for row in run_checkpoints(db, run) if row["step"] == step and row["sha256"]
    }


def verl_checkpoints(run_dir: Path) -> CheckpointFinder:
    """A verl run's `global_step_N` folder, once its save is complete (the tracker names N or later)."""
    from ccpo_cli.backends.verl.preflight import TRACKER_FILE

    root = Path(run_dir) / "checkpoints"

    def find(step: int) -> Path | None:
        folder = root / f"global_step_{step}"
        tracker = root / TRACKER_FILE
        if not folder.is_dir() or not tracker.is_file():
            return None
        text = tracker.read_text(encoding="utf-8").strip()
        return folder if text.isdigit() and int(text) >= step else None

    return find
