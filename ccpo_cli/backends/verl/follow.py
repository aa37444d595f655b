"""Starting a verl launch and following it: the run's row in runs.db, its metrics ingested while
it trains, and its checkpoints kept to the newest and the best-evaluated.

Nothing starts until the checks that would otherwise fail hours later have passed (a verl-agent
checkout, wandb credentials, no silent continuation) and the database has accepted the run's
identity (arm, fingerprint, seed, model).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ccpo_cli.arms import Arm, arm_from_flags, load_arm
from ccpo_cli.backends.observer import TrainingObserver, notify
from ccpo_cli.backends.verl import checkout, preflight, run_folder
from ccpo_cli.backends.verl.launcher import BACKEND, VerlLaunch
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.vocabulary import CCPO_JSONL


def provenance() -> dict[str, Any]:
    """Code version and package versions of the launching environment."""
    from ccpo_cli.backends.local.provenance import git_state, package_versions

    commit, dirty = git_state()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "package_versions": package_versions(("ccpo", "ray", "pyarrow", "torch", "transformers")),
    }


def protocol_facts(launch: VerlLaunch) -> dict[str, Any]:
    """The evaluation protocol and recipe the launch states (split, temperature, turn limit, batch,
    ...), read from its Hydra overrides by the same keys as an ingested config, plus the number of
    validation episodes: one per row of the validation data the launcher writes."""
    from ccpo_cli.store.facts import facts_from_config

    facts = facts_from_config({key.lstrip("+"): value for key, value in launch.overrides.items()})
    facts["episodes"] = int(launch.placeholder_rows["test"])
    return facts


def record_run(
    db: Any, launch: VerlLaunch, provenance_info: Mapping[str, Any], *, status: str
) -> int:
    from ccpo_cli.store import ensure_run
    from ccpo_cli.store.facts import record_run_facts

    identifier = ensure_run(
        db,
        launch.run,
        arm=launch.arm,
        benchmark=launch.benchmark,
        seed=launch.request.seed,
        base_model=launch.request.model,
        backend=BACKEND,
        total_steps=int(launch.overrides["trainer.total_epochs"]),
        status=status,
        hardware=f"{launch.request.nnodes} node(s) x {launch.request.gpus} GPU",
        git_commit=provenance_info.get("git_commit"),
        git_dirty=provenance_info.get("git_dirty"),
        package_versions=provenance_info.get("package_versions"),
        config=launch.config_document(),
    )
    record_run_facts(db, launch.run, protocol_facts(launch), source="ccpo train --backend verl")
    return identifier


def launch_record(run_dir: Path) -> dict[str, Any]:
    """The launch record of a verl run folder (its config.json, written by `prepare_run_folder`)."""
    import json

    path = run_dir / run_folder.CONFIG
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise InvalidInput(
            f"{path}: no readable verl launch record (config.json) in the run folder"
        ) from None
    if not isinstance(document, dict) or document.get("backend") != BACKEND:
        raise InvalidInput(f"{path}: not the launch record of a verl run")
    return document


def recorded_arm(record: Mapping[str, Any], where: Path) -> Arm | None:
    """The typed `Arm` a launch record names: its recorded flags and `--set` overrides, checked
    against the fingerprint it recorded (a record that does not rebuild is refused, never
    recorded as a bare name); None when the record names no arm."""
    stated = record.get("arm")
    arm: Mapping[str, Any] = stated if isinstance(stated, dict) else {}
    name, fingerprint = arm.get("name"), arm.get("fingerprint")
    overrides = arm.get("overrides") if isinstance(arm.get("overrides"), dict) else {}
    if not isinstance(name, str) or not name:
        return None  # the record states no arm: the run's arm is "not recorded", never guessed
    flags = arm.get("flags")
    typed: Arm | None = (
        arm_from_flags(name, flags, overrides=overrides) if isinstance(flags, dict) else None
    )
    if (
        typed is None
    ):  # a record written before flags were recorded: the arm file with its overrides
        typed = load_arm(name, overrides or None)
    if fingerprint and typed.fingerprint != fingerprint:
        raise InvalidInput(
            f"{where}: arm {name!r} rebuilds to fingerprint {typed.fingerprint[:12]}, "
            f"not the recorded {str(fingerprint)[:12]}"
        )
    return typed


def follow_run_folder(db: Any, run: str, run_dir: Path) -> Any:
    """Follow a verl run folder into runs.db: its grown metrics file ingested under `run` with the
    identity its launch record states (typed arm, seed, model, total steps). The one place this
    is done: `ccpo train --backend verl` while it trains and `ccpo publish --follow` both call it,
    so one folder records one identity whichever followed it. None while no metrics are written."""
    from ccpo_cli.store.ingest import ingest_file

    record = launch_record(run_dir)
    metrics = Path(record.get("metrics_file") or run_dir / "metrics.jsonl")
    if not metrics.is_file() or metrics.stat().st_size == 0:
        return None
    return ingest_file(
        db,
        metrics,
        run,
        fmt=CCPO_JSONL,
        arm=recorded_arm(record, run_dir / run_folder.CONFIG),
        seed=record.get("seed"),
        base_model=record.get("model"),
        total_steps=record.get("total_steps"),
        backend=BACKEND,
    )


def ingest_metrics(db: Any, launch: VerlLaunch) -> Any:
    """Bring the run's metrics file into runs.db (idempotent; safe to call while it grows)."""
    return follow_run_folder(db, launch.run, launch.run_dir)


def start(
    launch: VerlLaunch,
    db: Any,
    *,
    poll_seconds: float = 30.0,
    log: Callable[[str], None] = lambda message: None,
    observer: TrainingObserver | None = None,
) -> int:
    """Launch run.sh, ingest its metrics while it runs, and return its exit code.

    The launcher follows the trainer (it ignores SIGTERM, so it is stopped by recorded pid);
    Ctrl-C here stops following and leaves the run going, its pid in the run folder.
    """
    home = checkout.require(launch.verl_agent)
    preflight.check_wandb(launch.overrides, launch.request.host_profile, os.environ, Path.home())
    run_folder.refuse_silent_continuation(launch)
    for warning in launch.warnings:
        log(f"run {launch.run}: warning: {warning}")
    info = provenance()
    # The database checks the run's identity (arm, fingerprint, seed, model) before any file changes.
    record_run(db, launch, info, status="created")
    run_folder.prepare_run_folder(launch, provenance=info)
    from ccpo_cli.store import update_run_state

    log_path = launch.run_dir / "train.log"
    process = _spawn_run_script(launch, db, home, log_path)
    run_folder.mark_launched(launch, process.pid)
    update_run_state(db, launch.run, status="running")
    log(
        f"run {launch.run}: started pid {process.pid}; log {log_path}; metrics {launch.metrics_path}"
    )
    if observer is not None:
        notify(log, lambda: observer.started(launch.run, launch.run_dir))
    while True:
        try:
            code = process.wait(timeout=poll_seconds)
            break
        except subprocess.TimeoutExpired:
            _ingest_progress(db, launch, log, observer)
    _ingest_progress(db, launch, log, observer)
    status = "finished" if code == 0 else "failed"
    update_run_state(db, launch.run, status=status)
    if observer is not None:
        _tell_finished(db, launch, log, observer, status)
    return code


def _spawn_run_script(launch: VerlLaunch, db: Any, home: Path, log_path: Path) -> Any:
    """run.sh in its own session (so that a Ctrl-C here leaves it going), its output appended to
    `log_path`; a start that fails is recorded as failed (CcpoError)."""
    from ccpo_cli.store import update_run_state

    env = {**os.environ, **launch.environment, checkout.VERL_AGENT_HOME: str(home)}
    try:
        with log_path.open("ab") as log_file:
            return subprocess.Popen(
                ["bash", str(launch.run_dir / run_folder.RUN_SCRIPT)],
                cwd=home,
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    except OSError as error:
        update_run_state(db, launch.run, status="failed")
        raise CcpoError(f"run {launch.run}: could not start run.sh ({error})") from None


def _tell_finished(
    db: Any,
    launch: VerlLaunch,
    log: Callable[[str], None],
    observer: TrainingObserver,
    status: str,
) -> None:
    """The observer hears the end: the status, the last step and its checkpoint, if kept."""
    from ccpo_cli.store import get_run

    last = get_run(db, launch.run).get("last_step") or 0
    folder = launch.run_dir / "checkpoints" / f"global_step_{last}"
    notify(log, lambda: observer.finished(status, last, folder if folder.is_dir() else None))


def _ingest_progress(
    db: Any,
    launch: VerlLaunch,
    log: Callable[[str], None],
    observer: TrainingObserver | None = None,
) -> None:
    try:
        report = ingest_metrics(db, launch)
    except InvalidInput as error:  # reported, and read again at the next poll
        log(f"run {launch.run}: metrics not ingested yet ({error})")
        return
    if report is not None and report.new:
        log(f"run {launch.run}: step {report.last_step}, {report.new} new evaluation(s) recorded")
        if observer is not None:
            notify(log, lambda: observer.evaluated(report.last_step))
            pushed = notify(log, observer.progress)
            if pushed:
                log(f"run {launch.run}: {pushed}")
    _keep_newest_and_best(db, launch, log)


def _keep_newest_and_best(db: Any, launch: VerlLaunch, log: Callable[[str], None]) -> None:
    from ccpo_cli.store import best_evaluation, run_evaluations
    from ccpo_cli.store.outbox import entries

    best = best_evaluation(run_evaluations(db, launch.run))
    # A checkpoint waiting for its upload (--push-to-hub) stays until it is up.
    waiting = {
        entry.step
        for entry in entries(db, launch.run, state="pending")
        if entry.kind == "checkpoint"
    }
    removed = preflight.prune_checkpoints(
        launch.run_dir / "checkpoints",
        None if best is None else best["step"],
        keep=frozenset(waiting),
    )
    if removed:
        log(
            f"run {launch.run}: removed {len(removed)} checkpoint(s) that are neither the newest nor the best-evaluated"
        )
