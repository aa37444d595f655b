"""Train several arms x several seeds with the local CPU backend, then run `ccpo compare`.

Every run gets the same schedule; runs sharing a seed start from identical step-1 rollouts
(checked by `ccpo compare`'s isolation check through the recorded rollout hashes). Runs are
trained one after another, each with all the machine's rollout workers.

    python scripts/run_arm_matrix.py --db matrix.db                       # 4 arms x 3 seeds, 15 min each
    python scripts/run_arm_matrix.py --db quick.db --minutes 3 --seeds 0  # a quick look

Finished runs (status `finished` or `stopped` in the database) are skipped, so an interrupted
matrix can be restarted with the same command.

This script gives each run its own time budget (the README matrix). `ccpo matrix` runs the same
seed-major design within one budget for the whole matrix, keeps every arm on the same seeds,
shows the current minimum detectable difference and ends with the paired comparison.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_ARMS = ("grpo", "gigpo", "return-hard", "return-hard-fbjw")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", type=Path, default=Path("arm-matrix.db"))
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument(
        "--minutes",
        type=float,
        default=15.0,
        help="training wall time per run (evaluation excluded)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=1000,
        help="step cap per run (the time budget usually ends it first)",
    )
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--eval-every", type=int, default=15)
    parser.add_argument(
        "--eval-games", type=int, default=None, help="a fixed subset of the panel (default: all)"
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--prefix", default="matrix")
    parser.add_argument("--window-start", type=int, default=None, help="passed to ccpo compare")
    parser.add_argument(
        "--plot", type=Path, default=None, help="learning-curve PNG from ccpo compare"
    )
    return parser.parse_args(argv)


def run_name(prefix: str, arm: str, seed: int) -> str:
    return f"{prefix}-{arm}-seed{seed}"


def already_done(db_path: Path, name: str) -> bool:
    if not db_path.exists():
        return False
    from ccpo_cli.store import get_run, open_db

    try:
        run = get_run(open_db(db_path), name)
    except Exception:  # no such run yet
        return False
    return run.get("status") in ("finished", "stopped")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local import TrainConfig, train_arm

    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    names = []
    for seed in seeds:  # seed-major: a partial matrix still has every arm on the first seeds
        for arm in arms:
            name = run_name(args.prefix, arm, seed)
            names.append(name)
            if already_done(args.db, name):
                print(f"{name}: already recorded, skipped", file=sys.stderr)
                continue
            started = time.time()
            config = TrainConfig(
                seed=seed,
                steps=args.steps,
                tasks=args.tasks,
                group=args.group,
                eval_every=args.eval_every,
                eval_games=args.eval_games,
                workers=args.workers,
                time_budget_s=args.minutes * 60.0,
            )
            result = train_arm(
                load_arm(arm),
                name,
                args.db,
                config,
                resume=True,
                log=lambda message, name=name: print(
                    f"[{name}] {message}", file=sys.stderr, flush=True
                ),
            )
            evaluations = result.evaluations
            first = evaluations[0]["success"] if evaluations else float("nan")
            last = evaluations[-1]["success"] if evaluations else float("nan")
            print(
                f"{name}: steps {result.last_step}, train {result.train_wall_s / 60:.1f} min, "
                f"held-out {first:.1f}% -> {last:.1f}% ({(time.time() - started) / 60:.1f} min total)",
                file=sys.stderr,
            )
    command = [sys.executable, "-m", "ccpo_cli", "--db", str(args.db), "compare", *names]
    if args.window_start is not None:
        command += ["--window-start", str(args.window_start)]
    if args.plot is not None:
        command += ["--plot", str(args.plot)]
    return subprocess.call(command)


if __name__ == "__main__":
    sys.exit(main())
