"""Runs per hour and seconds per environment step of a matrix run: 10b371c's defaults against
today's levers, side by side in one process.

The variants:
- "10b371c defaults": transition cache on (60 000 edges), 48 loaded games per worker,
  evaluations every 5 steps from step 0;
- "engine levers": transition cache off, 320 loaded games per worker (the whole panel stays
  loaded between evaluations), TextWorld's derivation symbols copied directly instead of by
  `copy.deepcopy` (`ccpo_cli.envs.memo`), the same evaluation schedule, so its seconds per env
  step compare like for like;
- "windowed evaluations": the engine levers, and evaluations every 2 steps only from the compared
  window on (`--eval-from`): the untrained policy and the early steps fail most games, so their
  evaluations are the longest and are never compared.

Each variant trains the same short runs (same arm, same seeds) with the local backend; the
variants alternate run by run so that a change in machine load hits all alike. Training is the
same in every variant, so each run's rollouts and its evaluations at the steps the variants share
must be identical; the script checks that and says so.

    python scripts/bench_matrix.py                      # 2 runs x 20 steps per variant, whole panel
    python scripts/bench_matrix.py --runs 3 --steps 10 --eval-games 32   # a quicker look

Runs per hour counts a run's whole wall time (worker start-up, training, evaluations,
checkpoints); seconds per env step divide rollout and evaluation time by the engine steps taken.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variant:
    label: str
    transition_entries: int
    loaded_games: int
    fast_symbol_copies: bool
    # None: the bench's --eval-every from step 0; a number: every that many steps from the window.
    window_eval_every: int | None


VARIANTS = (
    Variant("10b371c defaults", 60_000, 48, False, None),
    Variant("engine levers", 0, 320, True, None),
    Variant("windowed evaluations", 0, 320, True, 2),
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--arm", default="return-hard")
    parser.add_argument("--runs", type=int, default=2, help="runs per variant (seeds 0..runs-1)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--eval-games", type=int, default=None, help="default: the whole 128-game panel")
    parser.add_argument("--workers", type=int, default=2)
    return parser.parse_args(argv)


def one_run(args: argparse.Namespace, folder: Path, name: str, seed: int, variant: Variant) -> dict:
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local import TrainConfig, train_arm
    from ccpo_cli.backends.local import workers as rollout_workers
    from ccpo_cli.envs import memo

    saved = rollout_workers.TRANSITION_CACHE_ENTRIES, rollout_workers.SESSION_CACHE_SIZE, memo.FAST_SYMBOL_COPIES
    rollout_workers.TRANSITION_CACHE_ENTRIES = variant.transition_entries
    rollout_workers.SESSION_CACHE_SIZE = variant.loaded_games
    # Workers install the memo when they start; this process must not have it installed.
    memo.uninstall()
    memo.FAST_SYMBOL_COPIES = variant.fast_symbol_copies
    windowed = variant.window_eval_every is not None
    before = dict(rollout_workers.TRANSITION_TOTALS)
    started = time.perf_counter()
    try:
        config = TrainConfig(seed=seed, steps=args.steps, tasks=args.tasks, group=args.group,
                             eval_every=variant.window_eval_every if windowed else args.eval_every,
                             eval_games=args.eval_games, eval_from=args.steps // 2 if windowed else 0,
                             workers=args.workers)
        result = train_arm(load_arm(args.arm), name, folder / "runs.db", config, run_dir=folder / name)
    finally:
        rollout_workers.TRANSITION_CACHE_ENTRIES, rollout_workers.SESSION_CACHE_SIZE, memo.FAST_SYMBOL_COPIES = saved
    wall = time.perf_counter() - started
    metrics = [json.loads(line) for line in (folder / name / "metrics.jsonl").read_text().splitlines()]
    counts = {key: rollout_workers.TRANSITION_TOTALS[key] - before[key] for key in before}
    return {
        "wall_s": wall,
        "train_env_steps": sum(m["train/decisions"] for m in metrics),
        "train_rollout_s": sum(m["timing/rollout_s"] for m in metrics),
        "eval_env_steps": sum(e["episodes"] * e["mean_turns"] for e in result.evaluations),
        "eval_s": sum(e["eval_s"] for e in result.evaluations),
        "rollouts": [m["rollout_sha256"] for m in metrics],
        "evaluations": [(e["step"], e["successes"]) for e in result.evaluations],
        **counts,
    }


def same_shared_evaluations(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    """Equal (step, successes) at every step both evaluated, and at least one such step."""
    steps = {step for step, _ in a} & {step for step, _ in b}
    return bool(steps) and [e for e in a if e[0] in steps] == [e for e in b if e[0] in steps]


def summarize(runs: list[dict]) -> dict:
    wall = sum(run["wall_s"] for run in runs)
    hits, misses = sum(run["hits"] for run in runs), sum(run["misses"] for run in runs)
    train_steps = sum(run["train_env_steps"] for run in runs)
    eval_steps = sum(run["eval_env_steps"] for run in runs)
    return {
        "runs_per_hour": 3600.0 * len(runs) / wall,
        "s_per_step_train": sum(run["train_rollout_s"] for run in runs) / train_steps,
        "s_per_step_eval": sum(run["eval_s"] for run in runs) / eval_steps,
        "s_per_step_all": (sum(run["train_rollout_s"] + run["eval_s"] for run in runs)) / (train_steps + eval_steps),
        "hit_rate": hits / (hits + misses) if hits + misses else None,
        "replayed": sum(run["replayed"] for run in runs),
        "env_steps": train_steps + eval_steps,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, list[dict]] = {variant.label: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="ccpo-bench-matrix-") as tmp:
        folder = Path(tmp)
        for seed in range(args.runs):
            for index, variant in enumerate(VARIANTS):
                name = f"bench-v{index}-seed{seed}"
                run = one_run(args, folder, name, seed, variant)
                results[variant.label].append(run)
                print(f"{name}: {run['wall_s']:.1f} s, {run['train_env_steps'] + run['eval_env_steps']:.0f} env steps",
                      file=sys.stderr, flush=True)
    summaries = [summarize(results[variant.label]) for variant in VARIANTS]
    base = summaries[0]
    identical = all(
        run["rollouts"] == reference["rollouts"] and same_shared_evaluations(run["evaluations"], reference["evaluations"])
        for variant in VARIANTS[1:] for run, reference in zip(results[variant.label], results[VARIANTS[0].label])
    )
    print(f"{args.runs} runs per variant x {args.steps} steps ({args.tasks} tasks x {args.group} rollouts), "
          f"{args.eval_games or 'whole-panel'} evaluations (every {args.eval_every} steps from 0 unless the variant "
          f"says otherwise), {args.workers} workers, arm {args.arm}")
    print(f"{'':28}{'runs/hour':>11}{'s/env step':>12}{'train':>9}{'eval':>9}{'hit rate':>10}")
    for variant, summary in zip(VARIANTS, summaries):
        label = variant.label
        hit = "-" if summary["hit_rate"] is None else f"{summary['hit_rate']:.1%}"
        print(f"{label:28}{summary['runs_per_hour']:11.1f}{summary['s_per_step_all'] * 1000:10.2f}ms"
              f"{summary['s_per_step_train'] * 1000:7.2f}ms{summary['s_per_step_eval'] * 1000:7.2f}ms{hit:>10}")
    for variant, new in zip(VARIANTS[1:], summaries[1:]):
        label = variant.label
        print(f"{'ratio: ' + label[:21]:28}{new['runs_per_hour'] / base['runs_per_hour']:10.2f}x"
              f"{new['s_per_step_all'] / base['s_per_step_all']:11.2f}x"
              f"{new['s_per_step_train'] / base['s_per_step_train']:8.2f}x"
              f"{new['s_per_step_eval'] / base['s_per_step_eval']:8.2f}x")
    print(f"identical rollouts and shared evaluations in every variant: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
