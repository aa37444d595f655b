"""`ccpo matrix`: arms × seeds on the local backend within a time budget, then the comparison.

The design is paired: every arm runs every seed, and runs of one seed share their step-1
rollouts (the trainer derives them from the seed alone), so `ccpo compare` can use the paired
test. A *block* is one seed's runs (blocks.py); blocks start in seed order. A block that has
started always finishes; before starting a further block the matrix predicts its duration from
the longest block so far and stops if it would end past the budget (the first block on each
slot always starts). So a cut-off leaves every arm with the same seeds, and the comparison
covers complete blocks only (a block left incomplete by an interruption is named and left out).
Runs already finished in the database (a restarted matrix) are reused, not retrained, and only
if they were trained with this matrix's settings: a rerun of a prefix with other settings is
refused (exit 3) with the differences listed, since reusing those runs would compare runs of
two protocols under one name.

Blocks run here one after the other, or, with a Ray address, as Ray tasks on a cluster, one per
free slot (ray_blocks.py): each task trains its block into a database of its own on its node
and returns the rows, and only this process writes the matrix's runs.db.

With a warm start of K steps, each block first trains the first arm alone for K steps (the run
PREFIX-warmup-ARM-seedN, no evaluations) and every arm's run of that seed forks from its step-K
checkpoint: the arms then differ only in what their estimators do after step K, and the seed's
take-off, which the arms otherwise go through independently, is shared by the pair
(docs/local-backend.md, "Shared warm start").
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.experiments.blocks import Block, BlockDone, run_name, train_block, warmup_run_name
from ccpo_cli.names import check_run_name

if TYPE_CHECKING:
    from ccpo_cli.backends.local.config import TrainConfig

# Matrix defaults: short runs and more seeds, each window evaluated on the whole 128-game panel
# (None), evaluations only from the window on (docs/local-backend.md, "Telling estimators apart").
DEFAULT_STEPS = 16
DEFAULT_EVAL_EVERY = 2
DEFAULT_EVAL_GAMES: int | None = None
# Steps of the first arm every arm of a seed forks from; the window starts where they end.
DEFAULT_WARM_START = 10
# Settings a rerun may change: how fast the runs go, not what they measure.
NOT_PROTOCOL = frozenset({"workers", "torch_threads", "dump_batches"})

__all__ = ["DEFAULT_EVAL_EVERY", "DEFAULT_EVAL_GAMES", "DEFAULT_STEPS", "DEFAULT_WARM_START", "MatrixDesign",
           "MatrixResult", "default_recipe", "parse_arm_list", "parse_seed_list", "progress_line", "run_matrix",
           "run_name", "warmup_run_name"]


def parse_seed_list(text: str) -> list[int]:
    """`0-9`, `0,1,2` or a mix (`0-3,7`): the one seed syntax of every command (ccpo_cli/seeds.py)."""
    from ccpo_cli.seeds import parse_seeds

    return parse_seeds(text)


def parse_arm_list(text: str) -> list[str]:
    arms = [part.strip() for part in text.split(",") if part.strip()]
    if len(arms) < 2 or len(set(arms)) != len(arms):
        raise UsageError(f"--arms {text!r}: expected at least two distinct arms, e.g. grpo,gigpo")
    return arms


def default_recipe(**fields: Any) -> TrainConfig:
    """The matrix's training configuration: the trainer's, with the matrix defaults above."""
    from ccpo_cli.backends.local.config import TrainConfig

    defaults = {"steps": DEFAULT_STEPS, "eval_every": DEFAULT_EVAL_EVERY, "eval_games": DEFAULT_EVAL_GAMES}
    return TrainConfig(**{**defaults, **fields})


@dataclass(frozen=True)
class MatrixDesign:
    """What a matrix trains. `recipe` is every run's configuration (each run gets its seed, its
    first evaluated step and, for a fork, its start checkpoint); `eval_from` None evaluates from
    the window start; `window_start` None starts the window where the warm start ends (half of
    the steps without one)."""

    arms: tuple[str, ...]
    seeds: tuple[int, ...]
    minutes: float
    recipe: TrainConfig = field(default_factory=default_recipe)
    prefix: str = "matrix"
    eval_from: int | None = None
    window_start: int | None = None
    warm_start: int = DEFAULT_WARM_START
    detect: float | None = None


@dataclass
class MatrixResult:
    run_names: list[str]  # the runs of complete blocks, compared
    seeds_compared: list[int]
    incomplete_block: dict[str, Any] | None  # the first of incomplete_blocks ({"seed", "runs"}), if any
    seeds_not_started: list[int]
    elapsed_s: float
    stopped_reason: str
    comparison: dict[str, Any]
    block_seconds: list[float] = field(default_factory=list)
    incomplete_blocks: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)  # node -> blocks it ran (Ray only)


@dataclass(frozen=True)
class _Plan:
    window: int
    blocks: list[Block]
    arm_names: list[str]


def _plan(design: MatrixDesign, db_path: str | Path) -> _Plan:
    """Check the design (UsageError before anything trains) and lay out its blocks."""
    from ccpo_cli.arms import load_arm

    if not design.minutes > 0:
        raise UsageError(f"--minutes must be positive, got {design.minutes}")
    if len(design.arms) < 2 or len(set(design.arms)) != len(design.arms):
        raise UsageError("a matrix needs at least two distinct arms")
    if not design.seeds or len(set(design.seeds)) != len(design.seeds):
        raise UsageError("a matrix needs distinct seeds")
    loaded = tuple(load_arm(arm) for arm in design.arms)  # every arm checked before anything trains
    steps, warm_start = design.recipe.steps, design.warm_start
    window = (warm_start or steps // 2) if design.window_start is None else design.window_start
    if warm_start >= steps:
        raise UsageError(f"--warm-start ({warm_start}) must be below --steps ({steps}); 0 turns it off")
    if not 0 <= warm_start <= window:
        raise UsageError(f"--warm-start must be between 0 and the window start ({window}), got {warm_start}")
    for arm in loaded:
        check_run_name(warmup_run_name(design.prefix, arm.name, max(design.seeds)), "--prefix")
    first_evaluation = window if design.eval_from is None else design.eval_from
    run_root = str(Path(db_path).resolve().parent / "ccpo-runs")
    blocks = [Block(seed, design.prefix, loaded, replace(design.recipe, seed=seed, eval_from=first_evaluation),
                    warm_start, run_root) for seed in design.seeds]
    return _Plan(window, blocks, [arm.name for arm in loaded])


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    plain = json.loads(json.dumps(config, sort_keys=True))
    return {key: value for key, value in plain.items() if key not in NOT_PROTOCOL}


def protocol_differences(recorded: dict[str, Any] | None, planned: TrainConfig) -> list[str]:
    """How a recorded run's training configuration differs from the planned one, leaving out
    what does not change the protocol (`NOT_PROTOCOL`); ["not recorded"] without a record."""
    if not isinstance(recorded, dict):
        return ["its training settings are not recorded"]
    have, want = _comparable(recorded), _comparable(planned.as_dict())
    return [f"{key} {have.get(key)!r} (now {want.get(key)!r})" for key in sorted(set(have) | set(want))
            if have.get(key) != want.get(key)]


def check_rerun(db, plan: _Plan) -> None:
    """Refuse (InvalidInput) when runs of this prefix were trained with other settings."""
    from ccpo_cli.store import get_run

    found: list[str] = []
    for block in plan.blocks:
        for run in block.runs():
            try:
                recorded = get_run(db, run.name)
            except InvalidInput:
                continue
            if recorded.get("config") is None and recorded["status"] == "created" and not recorded["n_evaluations"]:
                continue  # created for a Ray task that never came back: nothing was trained under this name
            differences = protocol_differences((recorded.get("config") or {}).get("train"), run.config)
            if recorded.get("arm_fingerprint") not in (None, run.arm.fingerprint):
                differences.insert(0, f"arm fingerprint {recorded['arm_fingerprint']} (now {run.arm.fingerprint})")
            if differences:
                found.append(f"{run.name}: {', '.join(differences)}")
    if found:
        shown = "; ".join(found[:3]) + (f"; and {len(found) - 3} more run(s)" if len(found) > 3 else "")
        raise InvalidInput(f"--prefix {plan.blocks[0].prefix!r} already holds runs trained with other settings "
                           f"({shown}); reusing them would mix two protocols: give a new --prefix, or the "
                           "settings they were trained with")


def progress_line(done: int, total: int, elapsed_s: float, budget_s: float, power: dict | None,
                  nodes: int | None = None) -> str:
    """`runs 4/20 · 7.9 min elapsed · 22.1 min left · MDD a vs b 12.3 (paired t, 2 seeds)`; with
    Ray, `runs 4/20 on 2 nodes · ...` (the nodes that have run blocks so far)."""
    runs = f"runs {done}/{total}" + ("" if nodes is None else f" on {nodes} node{'s' if nodes != 1 else ''}")
    parts = [runs, f"{elapsed_s / 60:.1f} min elapsed", f"{max(0.0, budget_s - elapsed_s) / 60:.1f} min left"]
    for pair in (power or {}).get("pairs", []):
        if pair["mdd"] is not None:
            seeds = pair["n_pairs"] if pair["test"] == "paired t" else min(pair["n_a"], pair["n_b"])
            parts.append(f"MDD {pair['arm_a']} vs {pair['arm_b']} {pair['mdd']:.1f} ({pair['test']}, {seeds} seeds)")
        else:
            parts.append(f"MDD {pair['arm_a']} vs {pair['arm_b']}: {pair['note']}")
    return " · ".join(parts)


class InProcessBlocks:
    """Blocks trained in this process, one at a time, straight into the matrix's runs.db."""

    capacity = 1
    counts_nodes = False

    def __init__(self, db_path: str | Path, log: Callable[[str], None] | None):
        self.db_path, self.log = db_path, log
        self._waiting: list[Block] = []
        self._current: Block | None = None

    def submit(self, block: Block) -> None:
        self._waiting.append(block)

    def wait_one(self, on_run: Callable[[int], None]) -> BlockDone:
        self._current = self._waiting.pop(0)
        train_block(self._current, self.db_path, log=self.log, on_run=on_run)
        done, self._current = self._current, None
        return BlockDone(done, None)

    def abandon(self) -> list[Block]:
        stopped = ([self._current] if self._current is not None else []) + self._waiting
        self._waiting, self._current = [], None
        return stopped

    def close(self) -> None:
        return None


def run_matrix(
    db_path: str | Path,
    design: MatrixDesign,
    *,
    ray_address: str | None = None,
    progress: Callable[[str], None] | None = None,
    log: Callable[[str], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> MatrixResult:
    """Train the design's arms × seeds, seed-major, within its minutes, and compare the complete
    blocks. Without `ray_address` the blocks run here one by one and Ray is never touched; with
    one (`local` starts a Ray instance of this machine only), each block is a Ray task."""
    from ccpo_cli.report.compare import compare_runs
    from ccpo_cli.store import open_db

    plan = _plan(design, db_path)
    db = open_db(db_path)
    check_rerun(db, plan)
    if ray_address is None:
        executor: Any = InProcessBlocks(db_path, log)
    else:
        from ccpo_cli.experiments.ray_blocks import RayBlocks

        executor = RayBlocks(ray_address, db_path, cpus_per_block=max(1, design.recipe.workers))
    arm_count = len(plan.arm_names)
    budget_s = design.minutes * 60.0
    progress = progress or (lambda message: None)
    started = clock()
    total = arm_count * len(plan.blocks)
    waiting = list(plan.blocks)
    running: dict[int, float] = {}
    complete: set[int] = set()
    block_seconds: list[float] = []
    incomplete: list[Block] = []
    nodes: Counter = Counter()
    stopped_reason = "all seeds done"
    power: dict | None = None

    def compared_names() -> list[str]:
        return [name for block in plan.blocks if block.seed in complete for name in block.run_names]

    def node_count() -> int | None:
        return len(nodes) if executor.counts_nodes else None

    def report_run(index: int) -> None:
        if index < arm_count:  # a block's last run is reported with the new power below
            progress(progress_line(len(complete) * arm_count + index, total, clock() - started, budget_s, power,
                                   node_count()))

    try:
        while waiting or running:
            while waiting and len(running) < executor.capacity:
                predicted = max(block_seconds, default=0.0)
                if block_seconds and clock() - started + predicted > budget_s:
                    stopped_reason = (f"stopped before seed {waiting[0].seed}: its block (about {predicted / 60:.1f} "
                                      f"min, the longest so far) would end past the {design.minutes:g}-min budget")
                    waiting = []
                    break
                block = waiting.pop(0)
                executor.submit(block)
                running[block.seed] = clock()
            if not running:
                break
            finished = executor.wait_one(report_run)
            block_seconds.append(clock() - running.pop(finished.block.seed))
            complete.add(finished.block.seed)
            if finished.node is not None:
                nodes[finished.node] += 1
            power = compare_runs(db, compared_names(), plan.window, detect=design.detect)["power"]
            progress(progress_line(len(complete) * arm_count, total, clock() - started, budget_s, power, node_count()))
    except KeyboardInterrupt:
        incomplete = [block for block in executor.abandon() if block.seed in running]
        seeds = ", ".join(str(block.seed) for block in incomplete)
        stopped_reason = f"interrupted during seed {seeds}; {'its block is' if len(incomplete) == 1 else 'their blocks are'} left out"
    finally:
        executor.close()
    compared = compared_names()
    comparison = compare_runs(db, compared, plan.window, detect=design.detect) if compared else {}
    stopped = [{"seed": block.seed, "runs": block.run_names} for block in incomplete]
    seen = complete | {block.seed for block in incomplete}
    return MatrixResult(compared, [block.seed for block in plan.blocks if block.seed in complete],
                        stopped[0] if stopped else None, [seed for seed in design.seeds if seed not in seen],
                        clock() - started, stopped_reason, comparison, block_seconds, stopped, dict(nodes))
