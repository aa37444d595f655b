"""`ccpo train --backend local`: train the small CPU policy on the real ALFWorld engine.

One training step: sample `tasks` games from the training pool, play `group` episodes of each
with the current policy (temperature 1), build the `ccpo estimate` batch (with the frozen
reference's state vectors as `phi_feats`), compute advantages with the arm's estimator through
the same entry point as `ccpo estimate`, and take PPO-clip epochs with a k3 KL penalty to the
reference. Every `eval_every` steps from `eval_from` (by default from step 0, the untrained
policy) and at the last step, the held-out panel is played at temperature 0.4 and recorded in
runs.db at once. The run's provenance is recorded before step 1, the hash of step 1's rollouts
right after it.

Randomness is derived from (seed, step, ...) rather than carried along, so a resumed run
continues exactly as an uninterrupted one would, and every arm with the same seed plays the
same step-1 rollouts (the policy is uniform and identical until the first update).

A run owns its folder (ownership.py: `run.json` says whose it is, `trainer.lock` who trains it
now); a resume is a continuation and nothing else (config.py decides which settings it may
change); the trainer's process is recorded in runs.db with a heartbeat (store/liveness.py), so a
killed run shows as interrupted; and the first non-finite advantage, loss or gradient stops the
run before it is applied, recording the run as failed with the step and the quantity.

One concern, kept in one file past 400 lines: one run's training loop: `_Run` holds the policy,
the reference, the optimizer, the seed-derived randomness and the run's records across a step,
its evaluation and a resume, and the resume checks beside it read the same recorded config.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ccpo_cli.arms import Arm
from ccpo_cli.backends.local import games as game_sets
from ccpo_cli.backends.local.advantages import advantages_for
from ccpo_cli.backends.local.checkpoints import (
    checkpoint_path,
    checkpoints_to_remove,
    default_run_dir,
    latest_checkpoint,
    load_policy,
    read_checkpoint,
    save_checkpoint,
)
from ccpo_cli.backends.local.config import TrainConfig, resume_check
from ccpo_cli.backends.local.ownership import IDENTITY_FILE, RunLock, check_folder, write_identity
from ccpo_cli.backends.local.policy import build_model, frozen_copy, pack
from ccpo_cli.backends.local.ppo import NonFiniteTraining, make_optimizer, update
from ccpo_cli.backends.local.provenance import git_state, hardware, package_versions
from ccpo_cli.backends.local.rollouts import (
    estimate_batch,
    flat_decisions,
    rollout_digest,
)
from ccpo_cli.backends.local.workers import EpisodeJob, RolloutPool, RolloutWorkerDied
from ccpo_cli.backends.observer import StepProgress, TrainingObserver, notify
from ccpo_cli.batch_io import save_batch
from ccpo_cli.errors import CcpoError, InvalidInput, UsageError
from ccpo_cli.estimators.batch import RolloutBatch
from ccpo_cli.paths import file_sha256
from ccpo_cli.store import (
    best_evaluation,
    ensure_run,
    get_run,
    open_db,
    record_checkpoint,
    record_evaluation,
    run_evaluations,
    update_run_state,
)
from ccpo_cli.store.db import utc_now, write_transaction
from ccpo_cli.store.facts import record_run_facts
from ccpo_cli.store.liveness import (
    HEARTBEAT_EVERY_S,
    Heartbeat,
    ProcessOwner,
    end_session,
    owner_is_stale,
    record_failure,
    start_session,
)
from ccpo_cli.store.metrics import record_metrics, scalar_values
from ccpo_cli.vocabulary import LOCAL

BACKEND = LOCAL
BENCHMARK = "alfworld"  # the trainer plays the real ALFWorld engine's games
BASE_MODEL = "ccpo-local-hashed-ngram-policy"


@dataclass
class TrainResult:
    run: str
    run_dir: Path
    last_step: int
    train_wall_s: float
    evaluations: list[dict[str, Any]]
    step1_rollout_hash: str | None


class _Run:
    """One training run's state and the steps that change it."""

    def __init__(
        self,
        arm: Arm,
        run_name: str,
        db,
        config: TrainConfig,
        run_dir: Path,
        log: Callable[[str], None],
    ):
        self.arm = arm
        self.run_name = run_name
        self.db = db
        self.config = config
        self.run_dir = run_dir
        self.log = log
        torch.set_num_threads(config.torch_threads)  # before the first tensor of this process
        self.start_step = 0  # the step this session started from (a resume's checkpoint step)
        self.current_step = 0  # the step being trained or evaluated: the one a failure names
        self.pool_games = game_sets.training_games(config.train_games_dir, config.room)
        self.panel = game_sets.evaluation_games(
            config.eval_games, config.eval_games_dir, config.room
        )
        if config.tasks > len(self.pool_games):
            raise InvalidInput(
                f"--tasks {config.tasks} exceeds the {len(self.pool_games)} training games"
            )
        # The initial weights depend on the seed only; the reference is their frozen copy.
        self.model = build_model(config.seed, **config.model)
        self.reference = frozen_copy(self.model)
        self.optimizer = make_optimizer(self.model, config.update)
        self.step = 0
        self.train_wall_s = 0.0
        self.evaluations: list[dict[str, Any]] = []
        self.step1_hash: str | None = None
        self.metrics_lines: int | None = None  # lines of metrics.jsonl, counted at the first append
        # Each time this run record was continued: at which step, and which free settings changed.
        self.resumes: list[dict[str, Any]] = []
        self.start = (
            self._start_document(Path(config.start_from)) if config.start_from is not None else None
        )

    def _start_document(self, checkpoint: Path) -> dict[str, Any]:
        saved = read_checkpoint(checkpoint)
        self._check_seed(checkpoint, saved)
        if saved["model_config"] != self.model.config:
            raise InvalidInput(
                f"{checkpoint} holds a policy of shape {saved['model_config']}, not {self.model.config}"
            )
        if int(saved["step"]) >= self.config.steps:
            raise UsageError(
                f"{checkpoint} is at step {saved['step']}; --steps ({self.config.steps}) must go beyond it"
            )
        return saved

    # -- setup -----------------------------------------------------------------------------
    def provenance_config(self) -> dict[str, Any]:
        return {
            "backend": BACKEND,
            "resumes": list(self.resumes),
            "train": self.config.as_dict(),
            "arm": {
                "name": self.arm.name,
                "fingerprint": self.arm.fingerprint,
                "flags": self.arm.flags(),
            },
            "training_pool": {
                "games": len(self.pool_games),
                "source": game_sets.describe_training(
                    self.config.train_games_dir, self.config.room
                ),
            },
            "eval_panel": game_sets.describe_panel(
                self.panel, self.config.eval_games, self.config.eval_games_dir, self.config.room
            ),
            "run_dir": str(self.run_dir),
        } | (
            {"start": {"arm": self.start.get("arm"), "step": int(self.start["step"])}}
            if self.start is not None
            else {}
        )

    def record_provenance(self, db_path: str | Path) -> None:
        commit, dirty = git_state()
        ensure_run(
            self.db,
            self.run_name,
            arm=self.arm,
            benchmark=BENCHMARK,
            seed=self.config.seed,
            base_model=BASE_MODEL,
            backend=BACKEND,
            total_steps=self.config.steps,
            status="running",
            hardware=hardware(),
            data_order_seed=self.config.seed,
            git_commit=commit,
            git_dirty=dirty,
            package_versions=package_versions(),
            config=self.provenance_config(),
        )
        # The evaluation protocol is this trainer's own, so it is a recorded fact, not a guess.
        record_run_facts(
            self.db,
            self.run_name,
            {
                "split": "heldout",
                "temperature": self.config.eval_temperature,
                "seed": self.config.seed,
                "episodes": len(self.panel) * self.config.eval_episodes,
                "max_steps": self.config.eval_max_steps,
            },
            source="ccpo train --backend local",
        )
        write_identity(
            self.run_dir, self.run_name, get_run(self.db, self.run_name)["uid"], db_path, BACKEND
        )
        self.write_file(
            "config.json", json.dumps(self.provenance_config(), indent=2, sort_keys=True)
        )

    def check_folder(self, step: int) -> None:
        """Stop (exit 1) when the run folder went away while the run trained: writing on would
        make a new folder that no record names."""
        if not (self.run_dir / IDENTITY_FILE).is_file():
            raise CcpoError(
                f"{self.run_dir} was removed while run {self.run_name!r} trained (at step {step}); "
                "the run is recorded as failed, its evaluations in runs.db are kept"
            )

    def write_file(self, name: str, text: str) -> None:
        partial = self.run_dir / f".{name}.{os.getpid()}.partial"
        try:
            partial.write_text(text)
            partial.replace(self.run_dir / name)
        except OSError as error:
            raise CcpoError(
                f"could not write {self.run_dir / name} ({error.strerror or error})"
            ) from None

    def append_metrics(self, metrics: dict[str, Any]) -> None:
        """One step's line of metrics.jsonl, and its numbers in runs.db's metrics table (the
        file and line they were written to: store/metrics.py)."""
        self.check_folder(metrics["step"])
        path = self.run_dir / "metrics.jsonl"
        try:
            if self.metrics_lines is None:  # after _drop_metrics_after: the lines kept
                self.metrics_lines = sum(1 for _ in open(path, "rb")) if path.exists() else 0
            with open(path, "a") as handle:
                handle.write(json.dumps(metrics) + "\n")
        except OSError as error:
            raise CcpoError(
                f"could not append to {path} ({error.strerror or error}); "
                "the run is recorded as failed"
            ) from None
        self.metrics_lines += 1
        scalars = {key: value for key, value in metrics.items() if key not in ("step", "wall_time")}
        with write_transaction(self.db):
            record_metrics(
                self.db,
                self.run_name,
                metrics["step"],
                scalar_values(scalars),
                source_file=str(path.resolve()),
                source_line=self.metrics_lines,
            )

    def resume(self) -> bool:
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return False
        try:
            saved = read_checkpoint(path)
        except InvalidInput as error:
            raise InvalidInput(
                f"{error}; move it out of {path.parent} to resume from the checkpoint before it"
            ) from None
        if saved.get("arm_fingerprint") != self.arm.fingerprint:
            raise InvalidInput(
                f"{path} was trained with arm {saved.get('arm')} ({saved.get('arm_fingerprint')}), "
                f"not {self.arm.name} ({self.arm.fingerprint}); use a new --run name"
            )
        self._check_seed(path, saved)
        self._load(saved)
        self.log(f"resumed {self.run_name} from {path.name} (step {self.step})")
        return True

    def fork(self) -> None:
        """Continue the start checkpoint's history with this run's arm from its step on.

        The reference policy stays the seed's initial weights, as in the forked-from run, so a
        fork of a run with the same arm trains exactly as that run would have gone on."""
        self._load(self.start)
        if self.step1_hash is not None:
            update_run_state(self.db, self.run_name, step1_rollout_hash=self.step1_hash)
        self.log(
            f"{self.run_name} starts from {self.config.start_from} ({self.start.get('arm')}, step {self.step})"
        )

    def _check_seed(self, path: Path, saved: dict[str, Any]) -> None:
        if saved["config"]["seed"] != self.config.seed:
            raise InvalidInput(
                f"{path} was trained with seed {saved['config']['seed']}, not {self.config.seed}"
            )

    def _load(self, saved: dict[str, Any]) -> None:
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.step = int(saved["step"])
        self.train_wall_s = float(saved.get("train_wall_s", 0.0))
        self.step1_hash = saved.get("step1_rollout_hash")

    # -- one training step -----------------------------------------------------------------
    def stream_salt(self, step: int) -> tuple[int, ...]:
        """What `rollout_stream` adds to a training step's sampling seeds: nothing for stream 0,
        nor for the steps the run shares with its stream-0 twin (step 1, or up to its start)."""
        shared_until = max(1, int(self.start["step"]) if self.start is not None else 0)
        return (
            (self.config.rollout_stream,)
            if self.config.rollout_stream and step > shared_until
            else ()
        )

    def step_jobs(self, step: int) -> list[EpisodeJob]:
        config = self.config
        rng = np.random.default_rng([config.seed, step, 0])
        chosen = rng.choice(len(self.pool_games), size=config.tasks, replace=False)
        salt = self.stream_salt(step)
        jobs = []
        for task_index, game_index in enumerate(chosen):
            uid = f"step{step}/task{task_index}"
            jobs.append(
                EpisodeJob(
                    game_path=str(self.pool_games[int(game_index)]),
                    uid=uid,
                    traj_uids=tuple(f"{uid}/ep{episode}" for episode in range(config.group)),
                    seeds=tuple(
                        (config.seed, step, 1, task_index, episode, *salt)
                        for episode in range(config.group)
                    ),
                    temperature=config.temperature,
                    max_steps=config.max_steps,
                    plan_progress=self.arm.step_oracle,
                )
            )
        return jobs

    def advantages(self, trajectories: list, packed: Any, step: int) -> np.ndarray:
        """The step's advantages by the arm's estimator, from the `ccpo estimate` batch with the
        frozen reference's state vectors as `phi_feats`; a non-finite one stops the run before
        any update, and with `dump_batches` the batch is saved beside them."""
        with torch.no_grad():
            phi = self.reference.state_vector(packed).numpy()
        # Validated once: the estimator and the dump below take the same batch.
        batch = RolloutBatch.from_mapping(
            estimate_batch(trajectories, phi), source="local training batch"
        )
        advantages = advantages_for(batch, self.arm)
        bad = np.flatnonzero(~np.isfinite(advantages))
        if bad.size:
            raise NonFiniteTraining(
                "advantage", float(advantages[bad[0]]), f"row {int(bad[0])} of the batch"
            )
        if self.config.dump_batches:
            dump_dir = self.run_dir / "batches"
            dump_dir.mkdir(parents=True, exist_ok=True)
            save_batch(batch, dump_dir / f"step-{step:06d}.npz", advantages=advantages)
        return advantages

    def train_step(self, rollout_pool: RolloutPool, step: int) -> dict[str, Any]:
        """Play the step's episodes, estimate their advantages and take the PPO update; the
        step's metrics (the line of metrics.jsonl)."""
        started, cpu_started = time.perf_counter(), time.process_time()
        trajectories = [t for group in rollout_pool.play(self.step_jobs(step)) for t in group]
        rollout_s = time.perf_counter() - started
        worker_cpu_s = rollout_pool.worker_cpu_s
        digest = rollout_digest(trajectories)
        if step == 1:
            self.step1_hash = digest
            update_run_state(self.db, self.run_name, step1_rollout_hash=self.step1_hash)
        decisions = flat_decisions(trajectories)
        packed = pack([d.features for d in decisions])
        advantages = self.advantages(trajectories, packed, step)
        actions = torch.tensor([d.action_index for d in decisions], dtype=torch.long)
        stats = update(
            self.model,
            self.reference,
            self.optimizer,
            packed,
            actions,
            torch.from_numpy(advantages.astype(np.float32)),
            self.config.update,
        )
        elapsed = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started + worker_cpu_s
        self.train_wall_s += elapsed
        wins = sum(t.won for t in trajectories)
        return {
            "step": step,
            "train/success_rate": 100.0 * wins / len(trajectories),
            "train/episode_length": float(np.mean([len(t.decisions) for t in trajectories])),
            "train/decisions": len(decisions),
            "actor/entropy": stats["entropy"],
            "actor/kl": stats["kl"],
            "actor/clip_fraction": stats["clip_fraction"],
            "actor/grad_norm": stats["grad_norm"],
            "actor/pg_loss": stats["policy_loss"],
            "advantage/abs_mean": float(np.mean(np.abs(advantages))),
            "advantage/mean": float(np.mean(advantages)),
            "advantage/std": float(np.std(advantages)),
            "rollout_sha256": digest,
            "timing/rollout_s": rollout_s,
            "timing/step_s": elapsed,
            # CPU seconds of the trainer and its rollout workers: the step's cost under any load.
            "cpu/step_s": cpu_s,
            "train_wall_s": self.train_wall_s,
        }

    # -- evaluation --------------------------------------------------------------------------
    def evaluation_jobs(self, step: int) -> list[EpisodeJob]:
        """The held-out panel's episodes at `step`, at the evaluation temperature."""
        config = self.config
        return [
            EpisodeJob(
                game_path=str(path),
                uid=f"eval/{index}",
                traj_uids=tuple(f"eval/{index}/ep{e}" for e in range(config.eval_episodes)),
                # The same numbers in every arm at a given step (paired comparisons), fresh ones at
                # each step, so that a window's evaluations average out their sampling noise.
                seeds=tuple(
                    (config.eval_seed, 2, step, index, e) for e in range(config.eval_episodes)
                ),
                temperature=config.eval_temperature,
                max_steps=config.eval_max_steps,
                keep_features=False,
            )
            for index, path in enumerate(self.panel)
        ]

    def evaluate(
        self, rollout_pool: RolloutPool, step: int, train_success_rate: float | None = None
    ) -> dict[str, Any]:
        config = self.config
        started, cpu_started = time.perf_counter(), time.process_time()
        episodes = [t for group in rollout_pool.play(self.evaluation_jobs(step)) for t in group]
        rows = [
            {
                "game_id": t.game_id,
                "task_type": t.task_type,
                "won": t.won,
                "turns": len(t.decisions),
                "invalid_turns": 0,
                "reward": t.episode_reward,
            }
            for t in episodes
        ]
        wins = sum(t.won for t in episodes)
        result = {
            "step": step,
            "episodes": len(rows),
            "successes": wins,
            "success": 100.0 * wins / len(rows),
            "mean_turns": float(np.mean([r["turns"] for r in rows])),
            "train_wall_s": self.train_wall_s,
            "eval_s": time.perf_counter() - started,
            "cpu_s": time.process_time() - cpu_started + rollout_pool.worker_cpu_s,
            "task_types": _by_task_type(rows),
        }
        record_evaluation(
            self.db,
            self.run_name,
            step,
            split="heldout",
            episodes=len(rows),
            successes=wins,
            success_rate=result["success"],
            mean_turns=result["mean_turns"],
            temperature=config.eval_temperature,
            eval_seed=config.eval_seed,
            episode_rows=rows,
            train_success_rate=train_success_rate,
        )
        self.evaluations.append(result)
        return result

    def checkpoint(self, step: int) -> None:
        self.check_folder(step)
        path = checkpoint_path(self.run_dir, step)
        save_checkpoint(
            path,
            self.model,
            self.optimizer,
            step,
            self.arm,
            self.config,
            self.train_wall_s,
            self.step1_hash,
        )
        record_checkpoint(
            self.db,
            self.run_name,
            step,
            str(path),
            sha256=file_sha256(path),
            size_bytes=path.stat().st_size,
        )
        best = best_evaluation(run_evaluations(self.db, self.run_name))
        best_step = None if best is None else best["step"]
        for old in checkpoints_to_remove(
            list((self.run_dir / "checkpoints").glob("step-*.pt")), best_step
        ):
            old.unlink()


def _by_task_type(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Episodes and successes per task type, by name."""
    by_type: dict[str, list[int]] = {}
    for row in rows:
        counts = by_type.setdefault(row["task_type"], [0, 0])
        counts[0] += 1
        counts[1] += int(row["won"])
    return {name: {"episodes": n, "successes": won} for name, (n, won) in sorted(by_type.items())}


def _validate(arm: Arm, config: TrainConfig) -> None:
    if not isinstance(arm, Arm):
        raise UsageError(
            f"train_arm takes an Arm (ccpo_cli.arms.load_arm), not {type(arm).__name__} {arm!r}"
        )
    if not isinstance(config, TrainConfig):
        raise UsageError(f"train_arm takes a TrainConfig, not {type(config).__name__}")
    for name in ("steps", "tasks", "group", "max_steps", "eval_episodes", "eval_max_steps"):
        if getattr(config, name) < 1:
            raise UsageError(
                f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}"
            )
    if config.eval_every < 0:
        raise UsageError(f"--eval-every must be >= 0, got {config.eval_every}")
    if not 0 <= config.eval_from <= config.steps:
        raise UsageError(
            f"--eval-from must be between 0 and --steps ({config.steps}), got {config.eval_from}"
        )
    if config.eval_games is not None and config.eval_games < 1:
        raise UsageError(f"--eval-games must be at least 1, got {config.eval_games}")
    if config.workers < 0:
        raise UsageError(f"--workers must be >= 0, got {config.workers}")


def train_arm(
    arm: Arm,
    run_name: str,
    db_path: str | Path,
    config: TrainConfig,
    *,
    resume: bool = False,
    run_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    observer: TrainingObserver | None = None,
    progress: Callable[[StepProgress], None] | None = None,
) -> TrainResult:
    """Train `arm` with the local backend as `config` says; evaluations land in `db_path` as they happen.

    The run's folder is `run_dir`, by default `ccpo-runs/<run_name>` beside the database. With
    `resume=True` the run continues from its latest checkpoint: a `run_dir` named explicitly
    must exist, while the default folder may be absent (a matrix restarting starts the runs it
    has not begun). A folder of another run is refused (ownership.py), as is a second trainer of
    the same run, and a resume that would change what the run measures (config.py lists what
    may change). Without `resume`, an existing checkpoint folder for this run name is refused.
    A non-finite advantage, loss or gradient stops the run (CcpoError, exit 1) with the run
    recorded as failed, the step and the quantity in `run_failures`. An `observer` (the Hub
    publisher of --push-to-hub) hears of the start, every evaluation and the end; it never changes
    the run's numbers or status. With `progress` (a terminal's bar) each step goes there instead
    of being a log line; evaluations are logged either way.
    """
    _validate(arm, config)
    log = log or (lambda message: None)
    folder = _run_folder(db_path, run_name, run_dir, resume)
    db = open_db(db_path)
    # Refused before the lock too, touching nothing.
    _refuse_what_is_not_a_continuation(db, db_path, folder, run_name, arm, config, resume)
    owner = ProcessOwner.this_process()
    with RunLock(
        folder,
        run_name,
        owner,
        log=log,
        gone_elsewhere=lambda other: owner_is_stale(db, run_name, other),
    ):
        # Again, now that no other trainer can change the folder or the record.
        recorded, allowed = _refuse_what_is_not_a_continuation(
            db, db_path, folder, run_name, arm, config, resume
        )
        run = _Run(arm, run_name, db, config, folder, log)
        _begin_session(run, db_path, owner, resume, recorded, allowed, observer)
        try:
            return _train(run, db_path, owner, observer, progress)
        finally:
            end_session(db, run_name, owner.session)


def _run_folder(
    db_path: str | Path, run_name: str, run_dir: str | Path | None, resume: bool
) -> Path:
    """The run's folder, absolute from here on: the checkpoint paths and run folder runs.db
    records are read by a follower or a resume started from another folder (docs/publishing.md,
    "Run folders"). A resume of a folder named explicitly needs it to exist."""
    folder = (
        Path(run_dir) if run_dir is not None else default_run_dir(db_path, run_name)
    ).absolute()
    if resume and run_dir is not None and not folder.is_dir():
        raise InvalidInput(
            f"--resume {folder}: no such run folder (nothing was started; check the path)"
        )
    return folder


def _begin_session(
    run: _Run,
    db_path: str | Path,
    owner: ProcessOwner,
    resume: bool,
    recorded: dict[str, Any] | None,
    allowed: dict | None,
    observer: TrainingObserver | None,
) -> None:
    """Bring the run to where this session starts (its latest checkpoint, or the checkpoint it
    forks), record its provenance and its starts, forget the metric lines it redoes, and record
    this process as its trainer; then the observer hears of the start."""
    resumed = resume and run.resume()
    if recorded is not None:
        run.resumes = _resume_history(recorded, run.step, resumed, allowed)
    run.record_provenance(db_path)
    if not resumed and run.start is not None:
        run.fork()
    _drop_metrics_after(run.run_dir / "metrics.jsonl", run.step)
    start_session(run.db, run.run_name, owner, HEARTBEAT_EVERY_S)
    if observer is not None:
        notify(run.log, lambda: observer.started(run.run_name, run.run_dir))


def _refuse_what_is_not_a_continuation(
    db,
    db_path: str | Path,
    folder: Path,
    run_name: str,
    arm: Arm,
    config: TrainConfig,
    resume: bool,
) -> tuple[dict[str, Any] | None, dict | None]:
    """InvalidInput when this start would touch a folder of another run, restart a run that has
    checkpoints without `resume`, or change what a recorded run measures; else the recorded run
    and the settings it may change."""
    recorded = _recorded_run(db, run_name)
    check_folder(folder, run_name, db_path, recorded)
    if not resume and latest_checkpoint(folder) is not None:
        raise InvalidInput(
            f"run {run_name!r} already has checkpoints in {folder}; pass --resume or a new --run"
        )
    allowed = (
        _continuation_changes(recorded, run_name, arm, config) if recorded is not None else None
    )
    return recorded, allowed


def _recorded_run(db, run_name: str) -> dict[str, Any] | None:
    try:
        return get_run(db, run_name)
    except InvalidInput:
        return None


def _continuation_changes(
    recorded: dict[str, Any], run_name: str, arm: Arm, config: TrainConfig
) -> dict[str, Any]:
    """The settings this start of a recorded run changes that it may change (more steps, other
    workers...); InvalidInput listing every difference that would change what the run measures."""
    if recorded.get("backend") not in (None, BACKEND) or recorded.get("kind") not in (
        None,
        "training",
    ):
        raise InvalidInput(
            f"run {run_name!r} is recorded as a {recorded.get('kind') or 'training'} run of backend "
            f"{recorded.get('backend')}, not a local training run; use a new --run name"
        )
    differences = []
    if recorded.get("arm_fingerprint") not in (None, arm.fingerprint):
        differences.append(
            f"arm: {recorded.get('arm')} ({str(recorded['arm_fingerprint'])[:12]}) recorded, "
            f"{arm.name} ({arm.fingerprint[:12]}) now"
        )
    recorded_config = recorded.get("config") if isinstance(recorded.get("config"), dict) else {}
    train = recorded_config.get("train")
    check = (
        resume_check(train, config, recorded.get("total_steps"))
        if isinstance(train, dict)
        else None
    )
    if check is not None:
        differences.extend(check.refused)
    if differences:
        raise InvalidInput(
            f"run {run_name!r} is recorded with other settings, and continuing it may not change "
            f"what it measures: {'; '.join(differences)}; train a new --run to change them"
        )
    return {} if check is None else check.allowed


def _resume_history(
    recorded: dict[str, Any], step: int, resumed: bool, changed: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """The run's record of its starts, with this one added (the step it continues from, and what changed)."""
    recorded_config = recorded.get("config") if isinstance(recorded.get("config"), dict) else {}
    history = list(recorded_config.get("resumes") or [])
    # Only a continuation from a checkpoint, or a change of free settings, is a resume: a run
    # recorded ahead of its training (a matrix's plan) that starts fresh is not.
    if resumed or changed:
        history.append(
            {
                "at_step": step,
                "from_checkpoint": bool(resumed),
                "at": utc_now(),
                "changed": changed or {},
            }
        )
    return history


def _train(
    run: _Run,
    db_path: str | Path,
    owner: ProcessOwner,
    observer: TrainingObserver | None,
    progress: Callable[[StepProgress], None] | None = None,
) -> TrainResult:
    """The run's loop, as it reads: the untrained policy's evaluation, then per step the
    rollouts and update, the step's report, and its evaluation and checkpoint when due; the
    run's end is recorded whatever ends it (`_recorded_end`)."""
    config, run_name = run.config, run.run_name
    with (
        RolloutPool(run.model, config.workers) as rollout_pool,
        Heartbeat(db_path, run_name, owner.session),
        _recorded_end(run, owner, observer),
    ):
        # This session's steps and seconds give s/step and the ETA.
        run.start_step = run.current_step = run.step
        session_s = 0.0
        _evaluate_untrained(run, rollout_pool, observer)
        while run.step < config.steps:
            run.current_step = step = run.step + 1
            run.check_folder(step)
            metrics = run.train_step(rollout_pool, step)
            run.step = step
            metrics["wall_time"] = time.time()
            update_run_state(run.db, run_name, last_step=step)
            session_s += metrics["timing/step_s"]
            _report_step(run, metrics, session_s / (step - run.start_step), observer, progress)
            if _close_step(run, rollout_pool, metrics, observer):
                break
        if run.step < config.steps:
            # The time budget ended the run as planned: its length is what it reached.
            ensure_run(run.db, run_name, total_steps=run.step)
    return TrainResult(
        run_name, run.run_dir, run.step, run.train_wall_s, run.evaluations, run.step1_hash
    )


def _evaluate_untrained(
    run: _Run, rollout_pool: RolloutPool, observer: TrainingObserver | None
) -> None:
    """Step 0's evaluation, when the schedule starts there and the run starts fresh."""
    config = run.config
    if not (run.step == 0 and config.eval_every and config.eval_from == 0):
        return
    evaluation = run.evaluate(rollout_pool, 0)
    _report_eval(run.log, evaluation)
    # The untrained evaluation is a point of every curve: metrics.jsonl, and so every live
    # tracker, starts at step 0 as runs.db and `ccpo export` do.
    run.append_metrics({"step": 0, "wall_time": time.time(), **_evaluation_metrics(evaluation)})
    if observer is not None:
        notify(run.log, lambda: observer.evaluated(0))


def _report_step(
    run: _Run,
    metrics: dict[str, Any],
    pace: float,
    observer: TrainingObserver | None,
    progress: Callable[[StepProgress], None] | None,
) -> None:
    """The step's line (with the observer's few words), to the log or to the progress bar."""
    step, total = run.step, run.config.steps
    last_eval = run.evaluations[-1] if run.evaluations else None
    line = step_line(run.run_name, step, total, metrics, pace, last_eval, run.train_wall_s) + (
        f"  {pushed}"
        if observer is not None and (pushed := notify(run.log, observer.progress))
        else ""
    )
    if progress is None:
        run.log(line)
        return
    progress(
        StepProgress(
            run=run.run_name,
            step=step,
            total=total,
            seconds_per_step=pace,
            eta=_duration(pace * max(0, total - step)),
            held_out=None if last_eval is None else last_eval["success"],
            held_out_step=None if last_eval is None else last_eval["step"],
            line=line,
        )
    )


def _close_step(
    run: _Run,
    rollout_pool: RolloutPool,
    metrics: dict[str, Any],
    observer: TrainingObserver | None,
) -> bool:
    """The step's evaluation when the schedule (or the run's last step) calls for one, its
    metrics line, and a checkpoint at an evaluation and at the end; True when the time budget
    ends the run at this step."""
    config, step = run.config, run.step
    out_of_time = config.time_budget_s is not None and run.train_wall_s >= config.time_budget_s
    last = step == config.steps or out_of_time
    evaluated = config.evaluates_after(step, last=last)
    if evaluated:
        evaluation = run.evaluate(rollout_pool, step, metrics["train/success_rate"])
        _report_eval(run.log, evaluation)
        metrics.update(_evaluation_metrics(evaluation))
    run.append_metrics(metrics)
    if evaluated or last:
        run.checkpoint(step)
    if evaluated and observer is not None:
        notify(run.log, functools.partial(observer.evaluated, step))
    if out_of_time:
        run.log(f"time budget of {config.time_budget_s / 60:.1f} min reached at step {step}")
    return out_of_time


@contextlib.contextmanager
def _recorded_end(
    run: _Run, owner: ProcessOwner, observer: TrainingObserver | None
) -> Iterator[None]:
    """Record how the run ends, whatever ends it: finished; failed, with the step and the
    quantity of a non-finite number or the error; stopped by a dead rollout worker or ^C (its
    last checkpoint stands for --resume). The observer hears the end last."""
    db, run_name, log = run.db, run.run_name, run.log
    status = "failed"
    try:
        yield
        status = "finished"
    except NonFiniteTraining as error:
        step = run.current_step
        message = (
            f"run {run_name!r} stopped at step {step}: {error}; recorded as failed, with its "
            f"evaluations (ccpo runs show {run_name})"
        )
        record_failure(
            db,
            run_name,
            message,
            step=step,
            quantity=error.quantity,
            value=error.value,
            session=owner.session,
        )
        raise CcpoError(message) from None
    except RolloutWorkerDied as error:
        # Not the run's failure: its last checkpoint stands and `--resume` goes on from there.
        status = "stopped"
        raise CcpoError(
            f"run {run_name!r} stopped at step {run.current_step}: {error}; the run is kept at its "
            f"last checkpoint, resume it with: ccpo train --resume {run.run_dir}"
        ) from None
    except CcpoError as error:
        record_failure(db, run_name, str(error), step=run.current_step, session=owner.session)
        raise
    except KeyboardInterrupt:
        status = "stopped"
        raise
    finally:
        update_run_state(db, run_name, status=status)
        if observer is not None:
            notify(
                log,
                lambda: observer.finished(status, run.step, checkpoint_path(run.run_dir, run.step)),
            )


def _drop_metrics_after(path: Path, step: int) -> None:
    """Forget metric lines of steps after the checkpoint a run restarts from (they are redone),
    and a line cut short by a kill; line by line into a new file that replaces the old one."""
    if not path.exists():
        return
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with (
        open(path, encoding="utf-8", errors="replace") as source,
        open(partial, "w", encoding="utf-8") as kept,
    ):
        for line in source:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if (
                isinstance(record, dict)
                and isinstance(record.get("step"), int)
                and record["step"] <= step
            ):
                kept.write(line if line.endswith("\n") else line + "\n")
    partial.replace(path)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.1f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def step_line(
    run_name: str,
    step: int,
    total: int,
    metrics: dict[str, Any],
    seconds_per_step: float,
    last_eval: dict[str, Any] | None,
    train_wall_s: float,
) -> str:
    """One training step as a log line: where it is (N/total, s/step, the ETA of the training
    left, not counting evaluations), the trainer's own numbers, the last held-out value, and
    the run and an ISO time, so that a line read from a log file says which run and when."""
    held_out = (
        f"held-out {last_eval['success']:.1f}%@{last_eval['step']}" if last_eval else "held-out -"
    )
    return (
        f"step {step:4d}/{total}  train {metrics['train/success_rate']:5.1f}%  len {metrics['train/episode_length']:4.1f}  "
        f"loss {metrics['actor/pg_loss']:+.3f}  kl {metrics['actor/kl']:.4f}  grad {metrics['actor/grad_norm']:.2f}  "
        f"adv {metrics['advantage/mean']:+.2f}±{metrics['advantage/std']:.2f}  entropy {metrics['actor/entropy']:.2f}  "
        f"clip {metrics['actor/clip_fraction']:.2f}  {seconds_per_step:.1f} s/step  "
        f"ETA {_duration(seconds_per_step * max(0, total - step))}  {held_out}  "
        f"(train clock {train_wall_s / 60:.1f} min)  [{run_name} {utc_now()[:19]}Z]"
    )


def held_out_metrics(result: dict[str, Any]) -> dict[str, float | int]:
    """A held-out evaluation as metrics.jsonl keys, named as verl-agent logs them and as `ccpo
    ingest` reads them (rates as fractions): the curve a tracker or `tail -f` shows."""
    # Imported here: the metric names are the store readers' (one place), needed only on evaluation.
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.store.readers.metric_names import (
        EPISODES_KEY,
        MEAN_TURNS_KEY,
        OVERALL_KEY,
        SUCCESSES_KEY,
    )
    from ccpo_cli.task_types import short_key

    task_metrics = {task.key: task.metric for task in load_benchmark("alfworld").task_types}

    metrics: dict[str, float | int] = {
        OVERALL_KEY: result["successes"] / result["episodes"],
        EPISODES_KEY: result["episodes"],
        SUCCESSES_KEY: result["successes"],
        MEAN_TURNS_KEY: result["mean_turns"],
    }
    for name, counts in (result.get("task_types") or {}).items():
        try:
            metric = task_metrics[short_key(name)]
        except KeyError:
            continue  # a game outside ALFWorld's six types has no verl-agent metric name
        metrics[metric] = counts["successes"] / counts["episodes"]
    return metrics


def _evaluation_metrics(evaluation: dict[str, Any]) -> dict[str, float | int]:
    """An evaluation's keys of its step's metrics.jsonl line: its cost (so that a run's CPU is
    its metrics' sum) and its held-out results."""
    return {
        "eval/wall_s": evaluation["eval_s"],
        "eval/cpu_s": evaluation["cpu_s"],
        **held_out_metrics(evaluation),
    }


def _report_eval(log: Callable[[str], None], result: dict[str, Any]) -> None:
    log(
        f"eval step {result['step']:4d}: held-out {result['success']:5.1f}% "
        f"({result['successes']}/{result['episodes']}), mean turns {result['mean_turns']:.1f}, "
        f"{result['eval_s']:.0f}s"
    )


__all__ = [
    "TrainConfig",
    "TrainResult",
    "checkpoints_to_remove",
    "latest_checkpoint",
    "load_policy",
    "save_checkpoint",
    "train_arm",
]
