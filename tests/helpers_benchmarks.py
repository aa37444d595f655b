"""Logs of benchmarks other than ALFWorld, and CSV exports, as verl-agent and its users write them.

The WebShop console log follows verl-agent's own code: its WebShop environment manager logs
`success_rate` and `webshop_task_score (not success_rate)` per episode, the trainer's validation
prefixes `val/`, verl's console logger prints `step:N - key:value` with 3 decimals, `main_ppo`
pretty-prints the resolved config, and the launch script runs under `set -x` (its data
preparation and launch commands are traced). `tests/verl_integration/` builds the same log with
verl-agent's real modules in place of the imitations here (`format_line`, `config`).
"""

from __future__ import annotations

import csv
import pprint
import random
from collections.abc import Callable, Mapping
from pathlib import Path

from helpers_store import ANSI_BLUE, ANSI_RESET

REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs"
WEBSHOP_SCORE = "val/webshop_task_score (not success_rate)"
WEBSHOP_TRAIN_SCORE = "episode/webshop_task_score (not success_rate)"
WEBSHOP_EPISODES = 64


def verl_console_line(metrics: Mapping[str, float], step: int) -> str:
    """What verl's console logger prints for one step (its concat_dict_to_str)."""
    return " - ".join([f"step:{step}", *(f"{key}:{value:.3f}" for key, value in metrics.items())])


def webshop_overrides(val_rows: int = WEBSHOP_EPISODES) -> dict[str, object]:
    """verl-agent's examples/gigpo_trainer/run_webshop.sh overrides, with a smaller validation."""
    return {
        "algorithm.adv_estimator": "gigpo",
        "data.train_batch_size": 16,
        "data.val_batch_size": val_rows,
        "data.max_prompt_length": 4096,
        "data.max_response_length": 512,
        "actor_rollout_ref.model.path": "Qwen/Qwen2.5-1.5B-Instruct",
        "actor_rollout_ref.actor.optim.lr": 1e-6,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_coef": 0.01,
        "actor_rollout_ref.rollout.val_kwargs.temperature": 0.4,
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "actor_rollout_ref.actor.use_invalid_action_penalty": True,
        "actor_rollout_ref.actor.invalid_action_penalty_coef": 0.1,
        "algorithm.gamma": 0.95,
        "algorithm.gigpo.step_advantage_w": 1.0,
        "algorithm.gigpo.mode": "mean_norm",
        "env.env_name": "Webshop",
        "env.seed": 0,
        "env.max_steps": 15,
        "env.rollout.n": 8,
        "trainer.n_gpus_per_node": 2,
        "trainer.nnodes": 1,
        "trainer.test_freq": 5,
        "trainer.total_epochs": 150,
        "trainer.val_before_train": True,
    }


def nest(flat: Mapping[str, object]) -> dict:
    """{"a.b": 1} as {"a": {"b": 1}}."""
    nested: dict = {}
    for key, value in flat.items():
        node = nested
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def webshop_config(val_rows: int = WEBSHOP_EPISODES) -> dict:
    """The resolved config of that run, as main_ppo prints it: verl's defaults under the
    overrides (a subset of ppo_trainer.yaml's keys, with its defaults where not overridden)."""
    defaults = {
        "actor_rollout_ref.rollout.val_kwargs.n": 1,
        "actor_rollout_ref.rollout.val_kwargs.top_k": -1,
        "actor_rollout_ref.rollout.val_kwargs.top_p": 1.0,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.rollout.temperature": 1.0,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.ppo_mini_batch_size": 64,
        "algorithm.norm_adv_by_std_in_grpo": True,
        "algorithm.use_kl_in_reward": False,
        "algorithm.lam": 1.0,
        "algorithm.gigpo.enable_similarity": False,
        "env.history_length": 2,
        "env.alfworld.eval_dataset": "eval_in_distribution",
        "env.webshop.use_small": True,
        "env.webshop.human_goals": False,
        "env.sokoban.dim_room": [6, 6],
        "env.resources_per_worker.num_cpus": 0.1,
        "trainer.total_training_steps": None,
        "trainer.logger": ["console", "wandb"],
        "trainer.project_name": "verl_agent_webshop",
        "trainer.experiment_name": "gigpo_qwen2.5_1.5b",
        "trainer.save_freq": -1,
        "data.val_files": "~/data/test.parquet",
    }
    return nest({**defaults, **webshop_overrides(val_rows)})


def webshop_validations(
    steps: list[int], episodes: int = WEBSHOP_EPISODES, seed: int = 0
) -> dict[int, tuple[int, float]]:
    """{step: (episodes won, mean task score)} for validations of `episodes` episodes: a won
    episode scores 1, the others a partial score, as WebShop grades purchases."""
    rng = random.Random(seed)
    results = {}
    for index, step in enumerate(steps):
        won = min(
            episodes,
            max(
                0,
                round(episodes * (0.05 + 0.6 * index / max(1, len(steps) - 1)))
                + rng.randint(-2, 2),
            ),
        )
        partial = [rng.uniform(0.2, 0.9) for _ in range(episodes - won)]
        results[step] = (won, (won + sum(partial)) / episodes)
    return results


def _training_metrics(step: int, rng: random.Random) -> dict[str, float]:
    success = min(1.0, 0.1 + step / 40)
    return {
        "actor/entropy_loss": 0.6 - step / 1000,
        "actor/pg_loss": -rng.random() / 100,
        "episode/reward/mean": 10 * success,
        "episode/length/mean": 14 - step / 10,
        "episode/success_rate": success,
        WEBSHOP_TRAIN_SCORE: min(1.0, success + 0.2),
        "timing_s/step": 90 + rng.random(),
        "training/global_step": float(step),
        "training/epoch": float(step - 1),
    }


def write_webshop_console(
    path: Path,
    *,
    total_steps: int = 20,
    test_freq: int = 5,
    state_episodes: bool = True,
    episodes: int = WEBSHOP_EPISODES,
    config: Mapping | None = None,
    format_line: Callable[[Mapping[str, float], int], str] = verl_console_line,
    score_key: str = WEBSHOP_SCORE,
    wrap: int | None = None,
    pid: int = 31337,
) -> tuple[Path, dict[int, tuple[int, float]]]:
    """A verl-agent WebShop run's stdout, validating `episodes` episodes every `test_freq` steps
    (and before training); with `state_episodes` the traced data preparation says how many.
    Returns the path and the validations written ({step: (won, mean score)})."""
    rng = random.Random(1)
    prefix = f"{ANSI_BLUE}(TaskRunner pid={pid}){ANSI_RESET} "
    overrides = webshop_overrides(episodes)
    lines = ["+ train_data_size=16", f"+ val_data_size={episodes}", "+ group_size=8"]
    if state_episodes:
        lines.append(
            f"+ python3 -m examples.data_preprocess.prepare --mode text --train_data_size 16 "
            f"--val_data_size {episodes}"
        )
    lines.append(
        "+ python3 -m verl.trainer.main_ppo "
        + " ".join(f"{key}={value}" for key, value in overrides.items())
    )
    lines.append("2025-12-07 11:59:24,016\tINFO worker.py:1942 -- Started a local Ray instance.")
    printed = config if config is not None else webshop_config(episodes)
    lines.extend(prefix + text for text in pprint.pformat(printed).splitlines())
    steps = list(range(0, total_steps + 1, test_freq))
    validations = webshop_validations(steps, episodes)
    for step in range(total_steps + 1):
        metrics: dict[str, float] = {} if step == 0 else _training_metrics(step, rng)
        if step in validations:
            won, score = validations[step]
            metrics.update(
                {
                    "val/text/test_score": 10 * won / episodes,
                    "val/text/tool_call_count/mean": 0.0,
                    "val/success_rate": won / episodes,
                    score_key: score,
                }
            )
            if step == 0:
                lines.append(prefix + pprint.pformat(f"Initial validation metrics: {metrics}"))
        text = format_line(metrics, step)
        pieces = [text[i : i + wrap] for i in range(0, len(text), wrap)] if wrap else [text]
        lines.extend(prefix + piece for piece in pieces)
        if step:
            lines.append(
                f"{prefix}Training Progress:  {100 * step // total_steps}%|#   | {step}/{total_steps} [00:10<01:00]"
            )
    path.write_text("\n".join(lines) + "\n")
    return path, validations


def csv_with_text_column(path: Path, column: str = "source_log") -> Path:
    """The real TensorBoard CSV export (docs/runs-db.md) with one text column added, as a user's
    pandas export carries the log each row came from."""
    with (REAL_LOGS / "boerz_run_a_telemetry.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow([*rows[0], column])
        for row in rows[1:]:
            writer.writerow([*row, f"logs/run_a/worker-{row[0]}.log"])
    return path


def wide_csv(path: Path, columns: int) -> Path:
    """A CSV export of `columns` columns (a step column and metrics m1...), header and one row."""
    with path.open("w") as handle:
        handle.write("step," + ",".join(f"m{i}" for i in range(1, columns)) + "\n")
        handle.write("0," + ",".join("1" for _ in range(1, columns)) + "\n")
    return path
