"""What a matrix run costs on this machine, measured side by side in one process.

Two comparisons (`--compare`):

* `executors` (the default): the same matrix (same arms, seeds and recipe, by default the
  `ccpo matrix` defaults) run twice, once as the matrix runs without Ray (one block at a time,
  its rollouts on a process pool of `--pool-workers` forked workers) and once with
  `--ray-address local` (each block a Ray task with `--ray-workers` rollout workers, as many
  blocks at once as the machine's cores allow). It prints runs per hour of each (wall time
  including Ray's start-up), checks that both recorded the same evaluations, and projects
  runs per hour and the minimum detectable difference (MDD, `ccpo_cli.report.power.paired_mdd`)
  of a 30-minute matrix on `--cores` cores from the measured cost of a block.
* `engine`: 10b371c's engine defaults against today's levers (below).

The engine variants:
- "10b371c defaults": transition cache on (60 000 edges), 48 loaded games per worker,
  evaluations every 5 steps from step 0;
- "engine levers": transition cache off, 320 loaded games per worker (the whole panel stays
  loaded between evaluations), TextWorld's derivation symbols copied directly instead of by
  `copy.deepcopy` (`ccpo_cli.envs.memo`), the same evaluation schedule, so its seconds per env
  step compare like for like;
- "windowed evaluations": the engine levers, and evaluations every 2 steps only from the compared
  window on (`--eval-from`): the untrained policy and the early steps fail most games, so their
  evaluations are the longest and are never compared.

Each engine variant trains the same short runs (same arm, same seeds) with the local backend; the
variants alternate run by run so that a change in machine load hits all alike. Training is the
same in every variant, so each run's rollouts and its evaluations at the steps the variants share
must be identical; the script checks that and says so.

    python scripts/bench_matrix.py                                   # pool vs local Ray, 2 seeds, matrix defaults
    python scripts/bench_matrix.py --seeds 2 --steps 6 --warm-start 2 --eval-games 32   # a quicker look
    python scripts/bench_matrix.py --compare engine                  # 2 runs x 20 steps per variant, whole panel
    python scripts/bench_matrix.py --compare engine --runs 3 --steps 10 --eval-games 32

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
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--compare", choices=("executors", "engine"), default="executors")
    parser.add_argument("--arm", default="return-hard", help="engine: the arm trained")
    parser.add_argument("--arms", default="grpo,return-hard", help="executors: the matrix's arms")
    parser.add_argument(
        "--runs", type=int, default=2, help="engine: runs per variant (seeds 0..runs-1)"
    )
    parser.add_argument(
        "--seeds", type=int, default=2, help="executors: seeds of the matrix (0..seeds-1)"
    )
    parser.add_argument(
        "--steps", type=int, default=None, help="default: 20 (engine), the matrix's 16 (executors)"
    )
    parser.add_argument(
        "--warm-start", type=int, default=None, help="executors: default the matrix's 10"
    )
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument(
        "--eval-every",
        type=int,
        default=None,
        help="default: 5 (engine), the matrix's 2 (executors)",
    )
    parser.add_argument(
        "--eval-games", type=int, default=None, help="default: the whole 128-game panel"
    )
    parser.add_argument("--workers", type=int, default=2, help="engine: rollout workers")
    parser.add_argument(
        "--pool-workers",
        type=int,
        default=2,
        help="executors: rollout workers of the matrix without Ray",
    )
    parser.add_argument(
        "--ray-workers",
        type=int,
        default=1,
        help="executors: rollout workers (= CPUs) of each Ray task",
    )
    parser.add_argument(
        "--cores", type=int, default=64, help="executors: cores of the projected machine"
    )
    parser.add_argument(
        "--minutes", type=float, default=30.0, help="executors: budget of the projected matrix"
    )
    parser.add_argument(
        "--paired-sd",
        type=float,
        default=5.20,
        help="executors: sd of the paired per-seed differences used for the projected MDD "
        "(default: the m30x matrix, docs/local-backend.md)",
    )
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 20 if args.compare == "engine" else None
    if args.eval_every is None:
        args.eval_every = 5 if args.compare == "engine" else None
    return args


def one_run(args: argparse.Namespace, folder: Path, name: str, seed: int, variant: Variant) -> dict:
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local import TrainConfig, train_arm
    from ccpo_cli.backends.local import workers as rollout_workers
    from ccpo_cli.envs import memo

    saved = (
        rollout_workers.TRANSITION_CACHE_ENTRIES,
        rollout_workers.SESSION_CACHE_SIZE,
        memo.FAST_SYMBOL_COPIES,
    )
    rollout_workers.TRANSITION_CACHE_ENTRIES = variant.transition_entries
    rollout_workers.SESSION_CACHE_SIZE = variant.loaded_games
    # Workers install the memo when they start; this process must not have it installed.
    memo.uninstall()
    memo.FAST_SYMBOL_COPIES = variant.fast_symbol_copies
    windowed = variant.window_eval_every is not None
    before = dict(rollout_workers.TRANSITION_TOTALS)
    started = time.perf_counter()
    try:
        config = TrainConfig(
            seed=seed,
            steps=args.steps,
            tasks=args.tasks,
            group=args.group,
            eval_every=variant.window_eval_every if windowed else args.eval_every,
            eval_games=args.eval_games,
            eval_from=args.steps // 2 if windowed else 0,
            workers=args.workers,
        )
        result = train_arm(
            load_arm(args.arm), name, folder / "runs.db", config, run_dir=folder / name
        )
    finally:
        (
            rollout_workers.TRANSITION_CACHE_ENTRIES,
            rollout_workers.SESSION_CACHE_SIZE,
            memo.FAST_SYMBOL_COPIES,
        ) = saved
    wall = time.perf_counter() - started
    lines = (folder / name / "metrics.jsonl").read_text().splitlines()
    # The training steps: the line of step 0 is the untrained evaluation's.
    metrics = [row for row in map(json.loads, lines) if "rollout_sha256" in row]
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
        "s_per_step_all": (sum(run["train_rollout_s"] + run["eval_s"] for run in runs))
        / (train_steps + eval_steps),
        "hit_rate": hits / (hits + misses) if hits + misses else None,
        "replayed": sum(run["replayed"] for run in runs),
        "env_steps": train_steps + eval_steps,
    }


def executor_matrix(
    args: argparse.Namespace, folder: Path, label: str, workers: int, ray_address: str | None
) -> dict:
    from ccpo_cli.experiments.matrix import MatrixDesign, default_recipe, run_matrix
    from ccpo_cli.store import open_db, run_evaluations

    given = {
        "steps": args.steps,
        "eval_every": args.eval_every,
        "eval_games": args.eval_games,
        "tasks": args.tasks,
        "group": args.group,
        "workers": workers,
    }
    recipe = default_recipe(**{key: value for key, value in given.items() if value is not None})
    extra = {} if args.warm_start is None else {"warm_start": args.warm_start}
    design = MatrixDesign(
        tuple(args.arms.split(",")),
        tuple(range(args.seeds)),
        10_000.0,
        recipe=recipe,
        prefix="bench",
        **extra,
    )
    db_path = folder / label.replace(" ", "-") / "runs.db"
    db_path.parent.mkdir(parents=True)
    started = time.perf_counter()
    result = run_matrix(
        db_path,
        design,
        ray_address=ray_address,
        progress=lambda line: print(f"[{label}] {line}", file=sys.stderr, flush=True),
    )
    wall = time.perf_counter() - started
    db = open_db(db_path)
    evaluations = {
        name: [(row["step"], row["content_hash"]) for row in run_evaluations(db, name)]
        for name in result.run_names
    }
    return {
        "label": label,
        "wall_s": wall,
        "matrix_s": result.elapsed_s,
        "runs": len(result.run_names),
        "blocks": len(result.seeds_compared),
        "block_s": result.block_seconds,
        "evaluations": evaluations,
        "window_means": {
            entry["run"]: entry["window"]["mean"] for entry in result.comparison.as_json()["runs"]
        },
        "nodes": result.nodes,
        "arms": len(design.arms),
    }


def compare_executors(args: argparse.Namespace) -> int:
    import os

    from ccpo_cli.report.power import paired_mdd

    cores_here = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="ccpo-bench-executors-") as tmp:
        pool = executor_matrix(args, Path(tmp), "process pool", args.pool_workers, None)
        ray = executor_matrix(args, Path(tmp), "local Ray", args.ray_workers, "local")
    identical = (
        pool["evaluations"] == ray["evaluations"] and pool["window_means"] == ray["window_means"]
    )
    slots_here = max(1, cores_here // max(1, args.ray_workers))
    print(
        f"{args.seeds} seeds x arms {args.arms}; recipe: steps {args.steps or 'matrix default'}, warm start "
        f"{'matrix default' if args.warm_start is None else args.warm_start}, {args.tasks} tasks x {args.group} "
        f"rollouts, {args.eval_games or 'whole-panel'} evaluations; this machine: {cores_here} cores"
    )
    print(f"{'':44}{'runs/hour':>10}{'wall':>9}{'per block':>11}")
    for row, how in (
        (pool, f"1 block at a time, {args.pool_workers} workers"),
        (ray, f"{slots_here} blocks at a time, {args.ray_workers} worker(s)"),
    ):
        per_block = sum(row["block_s"]) / len(row["block_s"])
        print(
            f"{row['label'] + ' (' + how + ')':44}{3600 * row['runs'] / row['wall_s']:10.1f}{row['wall_s']:8.0f}s"
            f"{per_block:10.0f}s"
        )
    print(f"{'ratio: local Ray / process pool':44}{pool['wall_s'] / ray['wall_s']:9.2f}x")
    print(f"identical evaluations and window means in both: {'yes' if identical else 'NO'}")
    # Projection: a block is one core's work with one rollout worker; on `cores` cores, that many
    # blocks run at once. The matrix starts a block only if it can end within the budget.
    block_s = sum(ray["block_s"]) / len(ray["block_s"])
    block_core_s = block_s * max(1, args.ray_workers)
    slots = max(1, args.cores // max(1, args.ray_workers))
    waves = max(1, int(args.minutes * 60 // block_s))
    pairs = slots * waves
    runs_per_hour = 3600 * slots * ray["arms"] / block_s
    print(
        f"projection for {args.cores} cores, from the local Ray blocks here ({block_s:.0f} s each, "
        f"{block_core_s:.0f} core-s; assumes blocks scale with cores and memory for {slots} blocks): "
        f"{runs_per_hour:.0f} runs/hour; a {args.minutes:g}-minute matrix of {ray['arms']} arms completes "
        f"{waves} wave(s) of {slots} blocks = {pairs} pairs, MDD {paired_mdd(args.paired_sd, pairs):.2f} points at a "
        f"paired sd of {args.paired_sd:g} (this machine's {args.minutes:g} minutes: "
        f"{max(1, int(args.minutes * 60 // (sum(pool['block_s']) / len(pool['block_s']))))} pairs)"
    )
    return 0 if identical else 1


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.compare == "executors":
        return compare_executors(args)
    results: dict[str, list[dict]] = {variant.label: [] for variant in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="ccpo-bench-matrix-") as tmp:
        folder = Path(tmp)
        for seed in range(args.runs):
            for index, variant in enumerate(VARIANTS):
                name = f"bench-v{index}-seed{seed}"
                run = one_run(args, folder, name, seed, variant)
                results[variant.label].append(run)
                print(
                    f"{name}: {run['wall_s']:.1f} s, {run['train_env_steps'] + run['eval_env_steps']:.0f} env steps",
                    file=sys.stderr,
                    flush=True,
                )
    summaries = [summarize(results[variant.label]) for variant in VARIANTS]
    base = summaries[0]
    identical = all(
        run["rollouts"] == reference["rollouts"]
        and same_shared_evaluations(run["evaluations"], reference["evaluations"])
        for variant in VARIANTS[1:]
        for run, reference in zip(results[variant.label], results[VARIANTS[0].label])
    )
    print(
        f"{args.runs} runs per variant x {args.steps} steps ({args.tasks} tasks x {args.group} rollouts), "
        f"{args.eval_games or 'whole-panel'} evaluations (every {args.eval_every} steps from 0 unless the variant "
        f"says otherwise), {args.workers} workers, arm {args.arm}"
    )
    print(f"{'':28}{'runs/hour':>11}{'s/env step':>12}{'train':>9}{'eval':>9}{'hit rate':>10}")
    for variant, summary in zip(VARIANTS, summaries):
        label = variant.label
        hit = "-" if summary["hit_rate"] is None else f"{summary['hit_rate']:.1%}"
        print(
            f"{label:28}{summary['runs_per_hour']:11.1f}{summary['s_per_step_all'] * 1000:10.2f}ms"
            f"{summary['s_per_step_train'] * 1000:7.2f}ms{summary['s_per_step_eval'] * 1000:7.2f}ms{hit:>10}"
        )
    for variant, new in zip(VARIANTS[1:], summaries[1:]):
        label = variant.label
        print(
            f"{'ratio: ' + label[:21]:28}{new['runs_per_hour'] / base['runs_per_hour']:10.2f}x"
            f"{new['s_per_step_all'] / base['s_per_step_all']:11.2f}x"
            f"{new['s_per_step_train'] / base['s_per_step_train']:8.2f}x"
            f"{new['s_per_step_eval'] / base['s_per_step_eval']:8.2f}x"
        )
    print(
        f"identical rollouts and shared evaluations in every variant: {'yes' if identical else 'NO'}"
    )
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
