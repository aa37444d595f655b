"""`ccpo matrix`: arms × seeds on the local backend within a time budget, then the comparison.

The design is paired: every arm runs every seed, and runs of one seed share their step-1
rollouts (the trainer derives them from the seed alone), so `ccpo compare` can use the paired
test. Runs go seed-major (all arms of seed 0, then all arms of seed 1, ...): a *block* is one
seed's runs. A block that has started always finishes; before starting the next block the
matrix predicts its duration from the longest block so far and stops if it would end past the
budget (the first block always starts). So a cut-off leaves every arm with the same seeds, and
the comparison covers complete blocks only (a block left incomplete by an interruption or an
error is named and left out). Runs already finished in the database (a restarted matrix) are
reused, not retrained.

With a warm start of K steps, each block first trains the first arm alone for K steps (the run
PREFIX-warmup-ARM-seedN, no evaluations) and every arm's run of that seed forks from its step-K
checkpoint: the arms then differ only in what their estimators do after step K, and the seed's
take-off, which the arms otherwise go through independently, is shared by the pair
(docs/local-backend.md, "Shared warm start").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput, UsageError

# Matrix defaults: short runs and more seeds, each window evaluated on the whole 128-game panel
# (None), evaluations only from the window on (docs/local-backend.md, "Telling estimators apart").
DEFAULT_STEPS = 16
DEFAULT_EVAL_EVERY = 2
DEFAULT_EVAL_GAMES: int | None = None
# Steps of the first arm every arm of a seed forks from; the window starts where they end.
DEFAULT_WARM_START = 10


def parse_seed_list(text: str) -> list[int]:
    """`0-9`, `0,1,2` or a mix (`0-3,7`) as a list of distinct seeds in the order given."""
    seeds: list[int] = []
    try:
        for part in (piece.strip() for piece in text.split(",")):
            if not part:
                continue
            if "-" in part[1:]:
                first, last = part.split("-", 1) if not part.startswith("-") else (part, "")
                low, high = int(first), int(last)
                if high < low:
                    raise ValueError
                seeds.extend(range(low, high + 1))
            else:
                seeds.append(int(part))
    except ValueError:
        raise UsageError(f"--seeds {text!r}: expected a range such as 0-9 or a list such as 0,1,2") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError(f"--seeds {text!r}: expected distinct seeds, e.g. 0-9")
    return seeds


def parse_arm_list(text: str) -> list[str]:
    arms = [part.strip() for part in text.split(",") if part.strip()]
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise UsageError(f"--arms {text!r}: expected at least two distinct arms, e.g. grpo,gigpo")
    return arms


def run_name(prefix: str, arm: str, seed: int) -> str:
    return f"{prefix}-{arm}-seed{seed}"


def warmup_run_name(prefix: str, arm: str, seed: int) -> str:
    return f"{prefix}-warmup-{arm}-seed{seed}"


@dataclass
class MatrixResult:
    run_names: list[str]  # the runs of complete blocks, compared
    seeds_compared: list[int]
    incomplete_block: dict[str, Any] | None  # {"seed", "runs"}: started and not finished
    seeds_not_started: list[int]
    elapsed_s: float
    stopped_reason: str
    comparison: dict[str, Any]
    block_seconds: list[float] = field(default_factory=list)


def _shared_start(db, db_path, arm, prefix: str, seed: int, warm_start: int, log, train_options: dict) -> str | None:
    """The checkpoint every arm of `seed` forks from (trained here unless already finished)."""
    from ccpo_cli.backends.local.checkpoints import checkpoint_path, default_run_dir
    from ccpo_cli.backends.local.trainer import train_arm

    if warm_start == 0:
        return None
    name = warmup_run_name(prefix, arm.name, seed)
    if not _finished(db, name):
        train_arm(arm, name, db_path, seed=seed, steps=warm_start, eval_every=0, resume=True, log=log, **train_options)
    return str(checkpoint_path(default_run_dir(db_path, name), warm_start))


def _finished(db, name: str) -> bool:
    from ccpo_cli.store import get_run

    try:
        return get_run(db, name).get("status") == "finished"
    except InvalidInput:
        return False


def progress_line(done: int, total: int, elapsed_s: float, budget_s: float, power: dict | None) -> str:
    """`runs 4/20 · 7.9 min elapsed · 22.1 min left · MDD a vs b 12.3 (paired t, 2 seeds)`."""
    parts = [f"runs {done}/{total}", f"{elapsed_s / 60:.1f} min elapsed", f"{max(0.0, budget_s - elapsed_s) / 60:.1f} min left"]
    for pair in (power or {}).get("pairs", []):
        if pair["mdd"] is not None:
            seeds = pair["n_pairs"] if pair["test"] == "paired t" else min(pair["n_a"], pair["n_b"])
            parts.append(f"MDD {pair['arm_a']} vs {pair['arm_b']} {pair['mdd']:.1f} ({pair['test']}, {seeds} seeds)")
        else:
            parts.append(f"MDD {pair['arm_a']} vs {pair['arm_b']}: {pair['note']}")
    return " · ".join(parts)


def run_matrix(
    db_path: str | Path,
    arms: list[str],
    seeds: list[int],
    minutes: float,
    *,
    prefix: str = "matrix",
    steps: int = DEFAULT_STEPS,
    eval_every: int = DEFAULT_EVAL_EVERY,
    eval_games: int | None = DEFAULT_EVAL_GAMES,
    eval_from: int | None = None,
    window_start: int | None = None,
    detect: float | None = None,
    warm_start: int = DEFAULT_WARM_START,
    progress: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    **train_options: Any,
) -> MatrixResult:
    """Train `arms` × `seeds` seed-major within `minutes` and compare the complete blocks.

    `train_options` go to `train_arm` (tasks, group, workers, eval_temperature, ...). The
    window of the comparison starts at `window_start` (default: the end of the warm start, or
    half of `steps` without one), and so do the evaluations unless `eval_from` says otherwise:
    earlier ones are never compared. With `warm_start` K > 0 every run of a seed forks from
    that seed's K-step run of the first arm; K may not pass the window start, so the window is
    trained by the arms themselves.
    """
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local.trainer import train_arm
    from ccpo_cli.report.compare import compare_runs
    from ccpo_cli.store import open_db

    if not minutes > 0:
        raise UsageError(f"--minutes must be positive, got {minutes}")
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise UsageError("a matrix needs at least two distinct arms")
    if not seeds or len(set(seeds)) != len(seeds):
        raise UsageError("a matrix needs distinct seeds")
    loaded = [load_arm(arm) for arm in arms]  # every arm checked before anything trains
    window = (warm_start or steps // 2) if window_start is None else window_start
    if warm_start >= steps:
        raise UsageError(f"--warm-start ({warm_start}) must be below --steps ({steps}); 0 turns it off")
    if not 0 <= warm_start <= window:
        raise UsageError(f"--warm-start must be between 0 and the window start ({window}), got {warm_start}")
    first_evaluation = window if eval_from is None else eval_from
    budget_s = minutes * 60.0
    progress = progress or (lambda message: None)
    db = open_db(db_path)
    started = clock()
    total = len(arms) * len(seeds)
    done = 0
    complete: list[int] = []
    block_seconds: list[float] = []
    incomplete: dict[str, Any] | None = None
    stopped_reason = "all seeds done"
    power: dict | None = None
    for seed in seeds:
        elapsed = clock() - started
        predicted = max(block_seconds, default=0.0)
        if block_seconds and elapsed + predicted > budget_s:
            stopped_reason = (f"stopped before seed {seed}: its block (about {predicted / 60:.1f} min, the longest "
                              f"so far) would end past the {minutes:g}-min budget")
            break
        block_started = clock()
        names = [run_name(prefix, arm.name, seed) for arm in loaded]
        try:
            start_from = _shared_start(db, db_path, loaded[0], prefix, seed, warm_start, log, train_options)
            for arm, name in zip(loaded, names):
                if not _finished(db, name):
                    train_arm(arm, name, db_path, seed=seed, steps=steps, eval_every=eval_every,
                              eval_from=first_evaluation, eval_games=eval_games, resume=True, log=log,
                              start_from=start_from, **train_options)
                done += 1
                if name != names[-1]:  # a block's last run is reported with the new power below
                    progress(progress_line(done, total, clock() - started, budget_s, power))
        except KeyboardInterrupt:
            incomplete = {"seed": seed, "runs": names}
            stopped_reason = f"interrupted during seed {seed}; its block is left out"
            break
        block_seconds.append(clock() - block_started)
        complete.append(seed)
        compared = [run_name(prefix, arm.name, s) for s in complete for arm in loaded]
        power = compare_runs(db, compared, window, detect=detect)["power"]
        progress(progress_line(done, total, clock() - started, budget_s, power))
    compared = [run_name(prefix, arm.name, s) for s in complete for arm in loaded]
    comparison = compare_runs(db, compared, window, detect=detect) if compared else {}
    not_started = seeds[len(complete) + (incomplete is not None):]
    return MatrixResult(compared, complete, incomplete, not_started, clock() - started, stopped_reason,
                        comparison, block_seconds)
