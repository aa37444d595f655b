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
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ccpo_cli.arms import Arm, load_arm
from ccpo_cli.backends.local import games as game_sets
from ccpo_cli.backends.local.advantages import advantages_for
from ccpo_cli.backends.local.checkpoints import (
    checkpoint_path,
    checkpoints_to_remove,
    default_run_dir,
    file_sha256,
    latest_checkpoint,
    load_policy,
    read_checkpoint,
    save_checkpoint,
)
from ccpo_cli.backends.local.config import TrainConfig
from ccpo_cli.backends.local.policy import build_model, frozen_copy, pack
from ccpo_cli.backends.local.ppo import UpdateConfig, make_optimizer, update
from ccpo_cli.backends.local.provenance import git_state, hardware, package_versions
from ccpo_cli.backends.local.rollouts import (
    estimate_batch,
    flat_decisions,
    rollout_digest,
    save_npz,
)
from ccpo_cli.backends.local.workers import EpisodeJob, RolloutPool
from ccpo_cli.backends.observer import TrainingObserver, notify
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.store import (
    best_evaluation,
    ensure_run,
    open_db,
    record_checkpoint,
    record_evaluation,
    run_evaluations,
    update_run_state,
)
from ccpo_cli.store.facts import record_run_facts

BACKEND = "local"
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

    def __init__(self, arm: Arm, run_name: str, db, config: TrainConfig, run_dir: Path, log: Callable[[str], None]):
        self.arm = arm
        self.run_name = run_name
        self.db = db
        self.config = config
        self.run_dir = run_dir
        self.log = log
        self.pool_games = game_sets.training_games(config.train_games_dir)
        self.panel = game_sets.evaluation_games(config.eval_games, config.eval_games_dir)
        if config.tasks > len(self.pool_games):
            raise InvalidInput(f"--tasks {config.tasks} exceeds the {len(self.pool_games)} training games")
        # The initial weights depend on the seed only; the reference is their frozen copy.
        self.model = build_model(config.seed, **config.model)
        self.reference = frozen_copy(self.model)
        self.optimizer = make_optimizer(self.model, config.update)
        self.step = 0
        self.train_wall_s = 0.0
        self.evaluations: list[dict[str, Any]] = []
        self.step1_hash: str | None = None
        self.start = self._start_document(Path(config.start_from)) if config.start_from is not None else None

    def _start_document(self, checkpoint: Path) -> dict[str, Any]:
        saved = read_checkpoint(checkpoint)
        self._check_seed(checkpoint, saved)
        if saved["model_config"] != self.model.config:
            raise InvalidInput(f"{checkpoint} holds a policy of shape {saved['model_config']}, not {self.model.config}")
        if int(saved["step"]) >= self.config.steps:
            raise UsageError(f"{checkpoint} is at step {saved['step']}; --steps ({self.config.steps}) must go beyond it")
        return saved

    # -- setup -----------------------------------------------------------------------------
    def provenance_config(self) -> dict[str, Any]:
        return {
            "backend": BACKEND,
            "train": self.config.as_dict(),
            "arm": {"name": self.arm.name, "fingerprint": self.arm.fingerprint, "flags": self.arm.flags()},
            "training_pool": {"games": len(self.pool_games), "source": game_sets.describe_training(self.config.train_games_dir)},
            "eval_panel": game_sets.describe_panel(self.panel, self.config.eval_games, self.config.eval_games_dir),
            "run_dir": str(self.run_dir),
        } | ({"start": {"arm": self.start.get("arm"), "step": int(self.start["step"])}}
             if self.start is not None else {})

    def record_provenance(self) -> None:
        commit, dirty = git_state()
        ensure_run(
            self.db,
            self.run_name,
            arm=self.arm.name,
            arm_fingerprint=self.arm.fingerprint,
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
        record_run_facts(self.db, self.run_name, {"split": "heldout", "temperature": self.config.eval_temperature,
                                                  "seed": self.config.seed}, source="ccpo train --backend local")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "config.json").write_text(json.dumps(self.provenance_config(), indent=2, sort_keys=True))

    def resume(self) -> bool:
        path = latest_checkpoint(self.run_dir)
        if path is None:
            return False
        saved = torch.load(path, map_location="cpu", weights_only=False)
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
        self.log(f"{self.run_name} starts from {self.config.start_from} ({self.start.get('arm')}, step {self.step})")

    def _check_seed(self, path: Path, saved: dict[str, Any]) -> None:
        if saved["config"]["seed"] != self.config.seed:
            raise InvalidInput(f"{path} was trained with seed {saved['config']['seed']}, not {self.config.seed}")

    def _load(self, saved: dict[str, Any]) -> None:
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        self.step = int(saved["step"])
        self.train_wall_s = float(saved.get("train_wall_s", 0.0))
        self.step1_hash = saved.get("step1_rollout_hash")

    # -- one training step -----------------------------------------------------------------
    def step_jobs(self, step: int) -> list[EpisodeJob]:
        config = self.config
        rng = np.random.default_rng([config.seed, step, 0])
        chosen = rng.choice(len(self.pool_games), size=config.tasks, replace=False)
        jobs = []
        for task_index, game_index in enumerate(chosen):
            uid = f"step{step}/task{task_index}"
            jobs.append(
                EpisodeJob(
                    game_path=str(self.pool_games[int(game_index)]),
                    uid=uid,
                    traj_uids=tuple(f"{uid}/ep{episode}" for episode in range(config.group)),
                    seeds=tuple((config.seed, step, 1, task_index, episode) for episode in range(config.group)),
                    temperature=config.temperature,
                    max_steps=config.max_steps,
                )
            )
        return jobs

    def train_step(self, rollout_pool: RolloutPool, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        trajectories = [t for group in rollout_pool.play(self.step_jobs(step)) for t in group]
        rollout_s = time.perf_counter() - started
        digest = rollout_digest(trajectories)
        if step == 1:
            self.step1_hash = digest
            update_run_state(self.db, self.run_name, step1_rollout_hash=self.step1_hash)
        decisions = flat_decisions(trajectories)
        packed = pack([d.features for d in decisions])
        with torch.no_grad():
            phi = self.reference.state_vector(packed).numpy()
        batch = estimate_batch(trajectories, phi)
        advantages = advantages_for(batch, self.arm)
        if self.config.dump_batches:
            dump_dir = self.run_dir / "batches"
            dump_dir.mkdir(parents=True, exist_ok=True)
            save_npz(dump_dir / f"step-{step:06d}.npz", dict(batch, advantages=advantages))
        actions = torch.tensor([d.action_index for d in decisions], dtype=torch.long)
        stats = update(
            self.model, self.reference, self.optimizer, packed, actions,
            torch.from_numpy(advantages.astype(np.float32)), self.config.update,
        )
        elapsed = time.perf_counter() - started
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
            "advantage/abs_mean": float(np.mean(np.abs(advantages))),
            "rollout_sha256": digest,
            "timing/rollout_s": rollout_s,
            "timing/step_s": elapsed,
            "train_wall_s": self.train_wall_s,
        }

    # -- evaluation --------------------------------------------------------------------------
    def evaluate(self, rollout_pool: RolloutPool, step: int, train_success_rate: float | None = None) -> dict[str, Any]:
        config = self.config
        started = time.perf_counter()
        jobs = [
            EpisodeJob(
                game_path=str(path),
                uid=f"eval/{index}",
                traj_uids=tuple(f"eval/{index}/ep{e}" for e in range(config.eval_episodes)),
                # The same numbers in every arm at a given step (paired comparisons), fresh ones at
                # each step, so that a window's evaluations average out their sampling noise.
                seeds=tuple((config.eval_seed, 2, step, index, e) for e in range(config.eval_episodes)),
                temperature=config.eval_temperature,
                max_steps=config.eval_max_steps,
                keep_features=False,
            )
            for index, path in enumerate(self.panel)
        ]
        episodes = [t for group in rollout_pool.play(jobs) for t in group]
        rows = [
            {"game_id": t.game_id, "task_type": t.task_type, "won": t.won, "turns": len(t.decisions),
             "invalid_turns": 0, "reward": t.episode_reward}
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
        }
        record_evaluation(
            self.db, self.run_name, step, split="heldout", episodes=len(rows), successes=wins,
            success_rate=result["success"], mean_turns=result["mean_turns"],
            temperature=config.eval_temperature, eval_seed=config.eval_seed, episode_rows=rows,
            train_success_rate=train_success_rate,
        )
        self.evaluations.append(result)
        return result

    def checkpoint(self, step: int) -> None:
        path = checkpoint_path(self.run_dir, step)
        save_checkpoint(path, self.model, self.optimizer, step, self.arm, self.config, self.train_wall_s,
                        self.step1_hash)
        record_checkpoint(self.db, self.run_name, step, str(path), sha256=file_sha256(path),
                          size_bytes=path.stat().st_size)
        best = best_evaluation(run_evaluations(self.db, self.run_name))
        best_step = None if best is None else best["step"]
        for old in checkpoints_to_remove(list((self.run_dir / "checkpoints").glob("step-*.pt")), best_step):
            old.unlink()


def _validate(config: TrainConfig) -> None:
    for name in ("steps", "tasks", "group", "max_steps", "eval_episodes", "eval_max_steps"):
        if getattr(config, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(config, name)}")
    if config.eval_every < 0:
        raise UsageError(f"--eval-every must be >= 0, got {config.eval_every}")
    if not 0 <= config.eval_from <= config.steps:
        raise UsageError(f"--eval-from must be between 0 and --steps ({config.steps}), got {config.eval_from}")
    if config.eval_games is not None and config.eval_games < 1:
        raise UsageError(f"--eval-games must be at least 1, got {config.eval_games}")
    if config.workers < 0:
        raise UsageError(f"--workers must be >= 0, got {config.workers}")


def train_arm(
    arm: Arm | str,
    run_name: str,
    db_path: str | Path,
    seed: int = 0,
    steps: int = 200,
    tasks: int = 8,
    group: int = 8,
    eval_every: int = 10,
    *,
    resume: bool = False,
    run_dir: str | Path | None = None,
    log: Callable[[str], None] | None = None,
    observer: TrainingObserver | None = None,
    **options: Any,
) -> TrainResult:
    """Train one arm with the local backend; evaluations land in `db_path` as they happen.

    `arm` is an `Arm` or an arm name. Other options are `TrainConfig` fields (`max_steps`,
    `eval_games`, `eval_episodes`, `workers`, `dump_batches`, `time_budget_s`, ...) plus the
    `UpdateConfig` fields (`learning_rate`, `kl_coef`, ...). With `resume=True` the run continues
    from its latest checkpoint (the arm and seed must match); otherwise an existing checkpoint
    folder for this run name is refused. An `observer` (e.g. the Hub publisher of --push-to-hub)
    hears of the start, every evaluation and the end; it never changes the run's numbers or status.
    """
    if isinstance(arm, str):
        arm = load_arm(arm)
    update_fields = {k: options.pop(k) for k in list(options) if k in UpdateConfig.__dataclass_fields__}
    unknown = set(options) - set(TrainConfig.__dataclass_fields__)
    if unknown:
        raise UsageError(f"unknown local training option(s): {', '.join(sorted(unknown))}")
    options = {k: v for k, v in options.items() if v is not None or k in ("eval_games", "time_budget_s")}
    config = TrainConfig(seed=seed, steps=steps, tasks=tasks, group=group, eval_every=eval_every, **options)
    if update_fields:
        config = replace(config, update=replace(config.update, **update_fields))
    _validate(config)
    log = log or (lambda message: None)
    torch.set_num_threads(config.torch_threads)
    folder = Path(run_dir) if run_dir else default_run_dir(db_path, run_name)
    if not resume and latest_checkpoint(folder) is not None:
        raise InvalidInput(f"run {run_name!r} already has checkpoints in {folder}; pass --resume or a new --run")

    db = open_db(db_path)
    run = _Run(arm, run_name, db, config, folder, log)
    resumed = resume and run.resume()
    run.record_provenance()
    if not resumed and run.start is not None:
        run.fork()
    metrics_path = folder / "metrics.jsonl"
    _drop_metrics_after(metrics_path, run.step)
    if observer is not None:
        notify(log, lambda: observer.started(run_name, folder))
    status = "failed"
    with RolloutPool(run.model, config.workers) as rollout_pool:
        try:
            if run.step == 0 and config.eval_every and config.eval_from == 0:
                _report_eval(log, run.evaluate(rollout_pool, 0))
                if observer is not None:
                    notify(log, lambda: observer.evaluated(0))
            step = run.step
            while step < config.steps:
                step += 1
                metrics = run.train_step(rollout_pool, step)
                run.step = step
                metrics["wall_time"] = time.time()
                with open(metrics_path, "a") as handle:
                    handle.write(json.dumps(metrics) + "\n")
                update_run_state(db, run_name, last_step=step)
                log(
                    f"step {step:4d}  train {metrics['train/success_rate']:5.1f}%  len {metrics['train/episode_length']:4.1f}  "
                    f"entropy {metrics['actor/entropy']:.2f}  clip {metrics['actor/clip_fraction']:.2f}  "
                    f"{metrics['timing/step_s']:.1f}s  (train clock {run.train_wall_s / 60:.1f} min)"
                    + (f"  {pushed}" if observer is not None and (pushed := notify(log, observer.progress)) else "")
                )
                out_of_time = config.time_budget_s is not None and run.train_wall_s >= config.time_budget_s
                last = step == config.steps or out_of_time
                if config.eval_every and (last or (step >= config.eval_from
                                                   and (step - config.eval_from) % config.eval_every == 0)):
                    _report_eval(log, run.evaluate(rollout_pool, step, metrics["train/success_rate"]))
                    run.checkpoint(step)
                    if observer is not None:
                        notify(log, functools.partial(observer.evaluated, step))
                elif last:
                    run.checkpoint(step)
                if out_of_time:
                    log(f"time budget of {config.time_budget_s / 60:.1f} min reached at step {step}")
                    break
            status = "finished"
            if run.step < config.steps:
                # The time budget ended the run as planned: its length is what it reached.
                ensure_run(db, run_name, total_steps=run.step)
        except KeyboardInterrupt:
            status = "stopped"
            raise
        finally:
            update_run_state(db, run_name, status=status)
            if observer is not None:
                notify(log, lambda: observer.finished(status, run.step, checkpoint_path(folder, run.step)))
    return TrainResult(run_name, folder, run.step, run.train_wall_s, run.evaluations, run.step1_hash)


def _drop_metrics_after(path: Path, step: int) -> None:
    """Forget metric lines of steps after the checkpoint a run restarts from (they are redone)."""
    if not path.exists():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


def _report_eval(log: Callable[[str], None], result: dict[str, Any]) -> None:
    log(
        f"eval step {result['step']:4d}: held-out {result['success']:5.1f}% "
        f"({result['successes']}/{result['episodes']}), mean turns {result['mean_turns']:.1f}, "
        f"{result['eval_s']:.0f}s"
    )


__all__ = [
    "TrainConfig", "TrainResult", "checkpoints_to_remove", "latest_checkpoint", "load_policy", "save_checkpoint", "train_arm",
]
