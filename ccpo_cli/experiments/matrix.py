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

With a warm start of K steps, each block first trains one arm alone for K steps (the run
PREFIX-warmup-ARM-seedN, no evaluations) and every arm's run of that seed forks from its step-K
checkpoint: the arms then differ only in what their estimators do after step K, and the seed's
take-off, which the arms otherwise go through independently, is shared by the pair
(docs/local-backend.md, "Shared warm start"). Which arm trains it rotates with the seed over
the warm-start arms (by default every compared arm: seed s is trained by arm s mod n), so no arm
is favoured by continuing its own history on every seed; `warm_start_effect` estimates how much
that continuation is worth.

An arm of a matrix (`MatrixArm`) is an arm file's arm, or a variant of one: flags set on top
(`--variant gigpo-flip=gigpo:step_advantage_w=-1`, a positive control) or another rollout
stream (`--variant gigpo-b=gigpo:stream=1`, the A/A control's twin: the same estimator with
independent training noise after the fork).

Cost is counted in wall time (`--minutes`) and, where asked, in CPU seconds of the trainers and
their rollout workers (`--cpu-minutes`), which other jobs on the machine do not change; each
block's CPU is measured with getrusage and reported.

One concern, kept in one file past 400 lines: a matrix from its arms and seeds to its
comparison. The plan, the rerun check against it, the block loop under the budget and the
warm-start effect of the blocks it ran all read the one `_Plan`; the blocks themselves, their Ray
executor and the designs are modules of their own.
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
from ccpo_cli.experiments.blocks import (
    Block,
    BlockDone,
    MatrixArm,
    run_name,
    train_block,
    warmup_run_name,
)
from ccpo_cli.experiments.designs import DEFAULT_DESIGN, Design, list_designs, load_design
from ccpo_cli.names import check_run_name
from ccpo_cli.report.window import MatrixWindow

if TYPE_CHECKING:
    from ccpo_cli.backends.local.config import TrainConfig
    from ccpo_cli.report.comparison import Comparison

# Matrix defaults: the control design's (configs/designs/control.yaml, chosen by signal per
# CPU-minute on the positive control over 20 paired seeds; docs/local-backend.md, "The design,
# chosen by signal per CPU-minute"): a 10-step shared warm-up, 16 steps, one evaluation on the
# whole 128-game panel at step 16, which is the compared window.
_CONTROL = load_design(DEFAULT_DESIGN)
DEFAULT_STEPS = _CONTROL.steps
DEFAULT_EVAL_EVERY = _CONTROL.eval_every
DEFAULT_EVAL_GAMES: int | None = _CONTROL.eval_games
DEFAULT_WARM_START = _CONTROL.warm_start
# The compared window, unless a design or --window-start says otherwise: the last evaluation
# points, as many as the control design compares (one: each earlier evaluation costs about a
# sixth of a block and, closer to the fork, carries less of the effect than it adds in cost).
DEFAULT_WINDOW_EVALUATIONS = len(_CONTROL.compared_evaluations)
# Settings a rerun may change: how fast the runs go, not what they measure.
# The design's name and the compared window are labels of the runs, not settings they train with.
NOT_PROTOCOL = frozenset({"workers", "torch_threads", "dump_batches", "design", "window_start"})

# The key of a variant that picks its rollout stream rather than an arm flag.
STREAM_KEY = "stream"

__all__ = [
    "DEFAULT_EVAL_EVERY",
    "DEFAULT_EVAL_GAMES",
    "DEFAULT_STEPS",
    "DEFAULT_WARM_START",
    "DEFAULT_DESIGN",
    "DEFAULT_WINDOW_EVALUATIONS",
    "MatrixArm",
    "list_designs",
    "design_recipe",
    "matrix_of_design",
    "MatrixDesign",
    "MatrixResult",
    "default_recipe",
    "parse_arm_list",
    "parse_seed_list",
    "parse_variant",
    "plan_summary",
    "progress_line",
    "run_matrix",
    "run_name",
    "warm_start_effect",
    "warmup_run_name",
]


def parse_seed_list(text: str) -> list[int]:
    """`0-9`, `0,1,2` or a mix (`0-3,7`): the one seed syntax of every command (ccpo_cli/seeds.py)."""
    from ccpo_cli.seeds import parse_seeds

    return parse_seeds(text)


def parse_arm_list(text: str, *, minimum: int = 2, option: str = "--arms") -> list[str]:
    arms = [part.strip() for part in text.split(",") if part.strip()]
    if len(arms) < minimum or len(set(arms)) != len(arms):
        expected = "at least two distinct arms" if minimum == 2 else "distinct arms"
        raise UsageError(f"{option} {text!r}: expected {expected}, e.g. grpo,gigpo")
    return arms


def parse_variant(text: str) -> MatrixArm:
    """`LABEL=ARM:KEY=VALUE[:KEY=VALUE...]` as a matrix arm: the arm file ARM with arm flags set
    (`gigpo-flip=gigpo:step_advantage_w=-1`), and/or `stream=K`, its rollout stream
    (`gigpo-b=gigpo:stream=1`). UsageError for a malformed one, InvalidInput for a bad value."""
    from ccpo_cli.arms import load_arm, parse_set_options

    label, equals, rest = text.partition("=")
    label, parts = label.strip(), [part.strip() for part in rest.split(":")]
    if not equals or not label or not parts[0] or len(parts) < 2:
        raise UsageError(
            f"--variant {text!r}: expected LABEL=ARM:KEY=VALUE, e.g. "
            "gigpo-flip=gigpo:step_advantage_w=-1 or gigpo-b=gigpo:stream=1"
        )
    check_run_name(label, "--variant")
    settings = [part for part in parts[1:] if part]
    streams = [part for part in settings if part.partition("=")[0].strip() == STREAM_KEY]
    stream = 0
    for part in streams:
        value = part.partition("=")[2].strip()
        if not value.isdigit():
            raise UsageError(
                f"--variant {text!r}: stream must be a whole number >= 0, got {value!r}"
            )
        stream = int(value)
    flags = parse_set_options([part for part in settings if part not in streams])
    arm = load_arm(parts[0], flags or None)
    if not flags and not stream:
        raise UsageError(
            f"--variant {text!r}: set a flag or a stream; an arm file's arm needs no variant"
        )
    return MatrixArm(label, arm, stream)


def resolve_arms(
    arms: tuple[str | MatrixArm, ...], variants: tuple[MatrixArm, ...] = ()
) -> tuple[MatrixArm, ...]:
    """The matrix's arms: each name is a variant's label or an arm file."""
    from ccpo_cli.arms import load_arm

    by_label = {variant.label: variant for variant in variants}
    resolved = tuple(
        arm if isinstance(arm, MatrixArm) else by_label.get(arm) or MatrixArm(arm, load_arm(arm))
        for arm in arms
    )
    labels = [arm.label for arm in resolved]
    if len(resolved) < 2 or len(set(labels)) != len(labels):
        raise UsageError("a matrix needs at least two distinct arms")
    identical = [
        (a.label, b.label)
        for i, a in enumerate(resolved)
        for b in resolved[i + 1 :]
        if a.arm.fingerprint == b.arm.fingerprint and a.stream == b.stream
    ]
    if identical:
        first, second = identical[0]
        raise UsageError(
            f"--arms: {first} and {second} are the same arm on the same rollout stream, so their "
            "runs would be identical; give one of them another stream (an A/A control)"
        )
    return resolved


def default_recipe(**fields: Any) -> TrainConfig:
    """The matrix's training configuration: the trainer's, with the matrix defaults above."""
    from ccpo_cli.backends.local.config import TrainConfig

    defaults = {
        "steps": DEFAULT_STEPS,
        "eval_every": DEFAULT_EVAL_EVERY,
        "eval_games": DEFAULT_EVAL_GAMES,
    }
    return TrainConfig(**{**defaults, **fields})


def design_recipe(testbed: Design, **execution: Any) -> TrainConfig:
    """Every run's training configuration under a design; `execution` sets how the runs are
    executed (workers, torch_threads, dump_batches), which never changes what they measure."""
    from ccpo_cli.backends.local.config import TrainConfig

    same_name = ("steps", "tasks", "group", "eval_every", "eval_games", "room")
    return TrainConfig(
        max_steps=testbed.turn_limit,
        eval_max_steps=testbed.eval_turn_limit,
        design=testbed.name,
        **{name: getattr(testbed, name) for name in same_name},
        **execution,
    )


def matrix_of_design(
    testbed: Design,
    arms: tuple[str | MatrixArm, ...],
    seeds: tuple[int, ...],
    minutes: float,
    *,
    workers: int | None = None,
    **matrix: Any,
) -> MatrixDesign:
    """The matrix that trains `arms` × `seeds` under `testbed`, with `workers` rollout workers
    per run (None: the trainer's default); `matrix` holds the other MatrixDesign fields (prefix,
    variants, warm_start_arms, cpu_minutes, detect)."""
    execution = {} if workers is None else {"workers": workers}
    return MatrixDesign(
        arms,
        seeds,
        minutes,
        recipe=design_recipe(testbed, **execution),
        eval_from=testbed.eval_from,
        window_start=testbed.window_start,
        warm_start=testbed.warm_start,
        **matrix,
    )


@dataclass(frozen=True)
class MatrixDesign:
    """What a matrix trains. `arms` are arm-file names, labels of `variants`, or `MatrixArm`s;
    `recipe` is every run's configuration (each run gets its seed, its first evaluated step, its
    rollout stream and, for a fork, its start checkpoint); `eval_from` None evaluates from the
    window start; `window_start` None puts the window on the last DEFAULT_WINDOW_EVALUATIONS
    evaluation points (`MATRIX_WINDOW`, report/window.py). `warm_start_arms` are the arms that train the warm-ups in turn (seed s:
    number s mod n); empty means every compared arm. `cpu_minutes` adds a budget in CPU
    minutes of the trainers and their workers to the wall-time one."""

    arms: tuple[str | MatrixArm, ...]
    seeds: tuple[int, ...]
    minutes: float
    recipe: TrainConfig = field(default_factory=default_recipe)
    prefix: str = "matrix"
    eval_from: int | None = None
    window_start: int | None = None
    warm_start: int = DEFAULT_WARM_START
    detect: float | None = None
    variants: tuple[MatrixArm, ...] = ()
    warm_start_arms: tuple[str, ...] = ()
    cpu_minutes: float | None = None

    @property
    def window_first_step(self) -> int:
        """Where the compared window starts: `window_start`, else the matrix rule's step."""
        if self.window_start is not None:
            return self.window_start
        return MATRIX_WINDOW.start(self.recipe.steps, self.warm_start, self.recipe.eval_every)


@dataclass
class MatrixResult:
    run_names: list[str]  # the runs of complete blocks, compared
    seeds_compared: list[int]
    incomplete_block: (
        dict[str, Any] | None
    )  # the first of incomplete_blocks ({"seed", "runs"}), if any
    seeds_not_started: list[int]
    elapsed_s: float
    stopped_reason: str
    comparison: Comparison | None  # None when no block completed
    block_seconds: list[float] = field(default_factory=list)
    incomplete_blocks: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, int] = field(default_factory=dict)  # node -> blocks it ran (Ray only)
    # CPU seconds each complete block's runs took to train here (reused runs count 0).
    block_cpu_seconds: list[float] = field(default_factory=list)
    run_cpu_seconds: dict[str, float] = field(default_factory=dict)
    arms: list[str] = field(default_factory=list)  # each arm as `MatrixArm.described` says it
    warm_start_arms: dict[int, str] = field(
        default_factory=dict
    )  # seed -> the arm that trained its warm-up
    warm_start_effect: dict[str, Any] | None = None
    # Seeds whose blocks a --results folder already recorded: not retrained, analysed from there.
    seeds_from_records: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Plan:
    window: int
    blocks: list[Block]
    arm_names: list[str]
    arms: tuple[MatrixArm, ...] = ()


# The matrix rule of where a run's compared window starts (report/window.py owns it).
MATRIX_WINDOW = MatrixWindow(DEFAULT_WINDOW_EVALUATIONS)


def warmup_arm_for(seed: int, warm_arms: tuple[MatrixArm, ...]) -> MatrixArm:
    """The rotation: seed s's warm-up is trained by warm-start arm number s mod n."""
    return warm_arms[seed % len(warm_arms)]


def _check_budget_and_seeds(design: MatrixDesign) -> None:
    """UsageError for a budget that is not positive or seeds that are not distinct whole numbers."""
    if not design.minutes > 0:
        raise UsageError(f"--minutes must be positive, got {design.minutes}")
    if design.cpu_minutes is not None and not design.cpu_minutes > 0:
        raise UsageError(f"--cpu-minutes must be positive, got {design.cpu_minutes}")
    if not design.seeds or len(set(design.seeds)) != len(design.seeds):
        raise UsageError("a matrix needs distinct seeds")
    if any(seed < 0 for seed in design.seeds):
        raise UsageError("seeds are whole numbers >= 0")


def _plan(design: MatrixDesign, db_path: str | Path) -> _Plan:
    """Check the design (UsageError before anything trains) and lay out its blocks."""
    from ccpo_cli.arms import load_arm

    _check_budget_and_seeds(design)
    loaded = resolve_arms(design.arms, design.variants)  # every arm checked before anything trains
    steps, warm_start = design.recipe.steps, design.warm_start
    window = design.window_first_step
    if warm_start >= steps:
        raise UsageError(
            f"--warm-start ({warm_start}) must be below --steps ({steps}); 0 turns it off"
        )
    if not 0 <= warm_start <= window:
        raise UsageError(
            f"--warm-start must be between 0 and the window start ({window}), got {warm_start}"
        )
    by_label = {arm.label: arm for arm in (*design.variants, *loaded)}
    if len(set(design.warm_start_arms)) != len(design.warm_start_arms):
        raise UsageError(
            f"--warm-start-arms {','.join(design.warm_start_arms)}: name each arm once"
        )
    warm_arms = (
        tuple(
            by_label.get(name) or MatrixArm(name, load_arm(name)) for name in design.warm_start_arms
        )
        or loaded
    )
    for arm in (*loaded, *warm_arms):
        check_run_name(warmup_run_name(design.prefix, arm.label, max(design.seeds)), "--prefix")
    first_evaluation = window if design.eval_from is None else design.eval_from
    run_root = str(Path(db_path).resolve().parent / "ccpo-runs")
    blocks = [
        Block(
            seed,
            design.prefix,
            loaded,
            replace(design.recipe, seed=seed, eval_from=first_evaluation, window_start=window),
            warm_start,
            run_root,
            warmup_arm_for(seed, warm_arms) if warm_start else None,
        )
        for seed in design.seeds
    ]
    return _Plan(window, blocks, [arm.label for arm in loaded], loaded)


def plan_summary(design: MatrixDesign, testbed: Design, db_path: str | Path) -> dict[str, Any]:
    """What a matrix would train, as `ccpo matrix --dry-run` prints it: the resolved design with
    every knob, its evaluated and compared steps, the arms and, per seed, the runs in training
    order (the warm-up first) with the arm that trains the warm-up. Nothing is written."""
    plan = _plan(design, db_path)
    return {
        "design": {
            "name": testbed.name,
            "description": testbed.description,
            **testbed.knobs(),
            "evaluations": list(testbed.evaluations),
            "compared_evaluations": list(testbed.compared_evaluations),
        },
        "arms": [arm.described for arm in plan.arms],
        "seeds": [block.seed for block in plan.blocks],
        "window_start": plan.window,
        "blocks": [
            {
                "seed": block.seed,
                "warm_up_trained_by": block.trains_warmup.label if block.trains_warmup else None,
                "runs": [run.name for run in block.runs()],
            }
            for block in plan.blocks
        ],
    }


def _comparable(config: dict[str, Any]) -> dict[str, Any]:
    plain = json.loads(json.dumps(config, sort_keys=True))
    return {key: value for key, value in plain.items() if key not in NOT_PROTOCOL}


def _with_later_defaults(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded config with the fields added to TrainConfig since it was written at their
    defaults (a run trained before `rollout_stream` existed trained stream 0)."""
    from ccpo_cli.backends.local.config import TrainConfig

    defaults = TrainConfig().as_dict()
    return {**{key: defaults[key] for key in LATER_FIELDS if key not in recorded}, **recorded}


# TrainConfig fields newer than some recorded runs, whose default is what those runs did.
LATER_FIELDS = ("rollout_stream", "room", "design", "window_start")


def protocol_differences(recorded: dict[str, Any] | None, planned: TrainConfig) -> list[str]:
    """How a recorded run's training configuration differs from the planned one, leaving out
    what does not change the protocol (`NOT_PROTOCOL`); ["not recorded"] without a record."""
    if not isinstance(recorded, dict):
        return ["its training settings are not recorded"]
    have, want = _comparable(_with_later_defaults(recorded)), _comparable(planned.as_dict())
    return [
        f"{key} {have.get(key)!r} (now {want.get(key)!r})"
        for key in sorted(set(have) | set(want))
        if have.get(key) != want.get(key)
    ]


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
            if (
                recorded.get("config") is None
                and recorded["status"] == "created"
                and not recorded["n_evaluations"]
            ):
                continue  # created for a Ray task that never came back: nothing was trained under this name
            differences = protocol_differences(
                (recorded.get("config") or {}).get("train"), run.config
            )
            if recorded.get("arm_fingerprint") not in (None, run.arm.fingerprint):
                differences.insert(
                    0, f"arm fingerprint {recorded['arm_fingerprint']} (now {run.arm.fingerprint})"
                )
            if differences:
                found.append(f"{run.name}: {', '.join(differences)}")
    if found:
        shown = "; ".join(found[:3]) + (
            f"; and {len(found) - 3} more run(s)" if len(found) > 3 else ""
        )
        raise InvalidInput(
            f"--prefix {plan.blocks[0].prefix!r} already holds runs trained with other settings "
            f"({shown}); reusing them would mix two protocols: give a new --prefix, or the "
            "settings they were trained with"
        )


def progress_line(
    done: int,
    total: int,
    elapsed_s: float,
    budget_s: float,
    power: dict | None,
    nodes: int | None = None,
) -> str:
    """`runs 4/20 · 7.9 min elapsed · 22.1 min left · MDD a vs b 12.3 (paired t, 2 seeds)`; with
    Ray, `runs 4/20 on 2 nodes · ...` (the nodes that have run blocks so far)."""
    runs = f"runs {done}/{total}" + (
        "" if nodes is None else f" on {nodes} node{'s' if nodes != 1 else ''}"
    )
    parts = [
        runs,
        f"{elapsed_s / 60:.1f} min elapsed",
        f"{max(0.0, budget_s - elapsed_s) / 60:.1f} min left",
    ]
    for pair in (power or {}).get("pairs", []):
        if pair["mdd"] is not None:
            seeds = pair["n_pairs"] if pair["test"] == "paired t" else min(pair["n_a"], pair["n_b"])
            parts.append(
                f"MDD {pair['arm_a']} vs {pair['arm_b']} {pair['mdd']:.1f} ({pair['test']}, {seeds} seeds)"
            )
        else:
            parts.append(f"MDD {pair['arm_a']} vs {pair['arm_b']}: {pair['note']}")
    return " · ".join(parts)


class InProcessBlocks:
    """Blocks trained in this process, one at a time, straight into the matrix's runs.db."""

    capacity = 1
    counts_nodes = False

    def __init__(
        self,
        db_path: str | Path,
        log: Callable[[str], None] | None,
        announce: Callable[[str], None] | None = None,
    ):
        self.db_path, self.log, self.announce = db_path, log, announce
        self._waiting: list[Block] = []
        self._current: Block | None = None

    def submit(self, block: Block) -> None:
        self._waiting.append(block)

    def wait_one(self, on_run: Callable[[int], None]) -> BlockDone:
        self._current = self._waiting.pop(0)
        spent = train_block(
            self._current, self.db_path, log=self.log, on_run=on_run, announce=self.announce
        )
        done, self._current = self._current, None
        return BlockDone(done, None, spent)

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
    results_dir: str | Path | None = None,
) -> MatrixResult:
    """Train the design's arms × seeds, seed-major, within its minutes, and compare the complete
    blocks. Without `ray_address` the blocks run here one by one and Ray is never touched; with
    one (`local` starts a Ray instance of this machine only), each block is a Ray task. With
    `results_dir` (results/<preregistration>/), each complete block is recorded there
    (records.py) and the blocks it already records are not trained again."""
    from ccpo_cli.report.compare import compare_runs
    from ccpo_cli.store import open_db

    plan = _plan(design, db_path)
    db = open_db(db_path)
    check_rerun(db, plan)
    from_records, recorded_cpu = _recorded_blocks(results_dir, plan, design.prefix)
    executor = _executor(design, db_path, ray_address, log, progress)
    schedule = _Schedule(design, plan, executor, clock, progress, from_records, recorded_cpu)
    try:
        while schedule.waiting or schedule.running:
            schedule.start_blocks()
            if not schedule.running:
                break
            finished = executor.wait_one(schedule.report_run)
            schedule.block_done(finished)
            if results_dir is not None:
                _record_block(db, design, plan, finished.block.seed, results_dir)
            compared = schedule.compared_names()
            schedule.power = compare_runs(db, compared, plan.window, detect=design.detect).power
            schedule.report(len(schedule.complete) * len(plan.arm_names))
    except KeyboardInterrupt:
        schedule.interrupted()
    finally:
        executor.close()
    compared = schedule.compared_names()
    comparison = compare_runs(db, compared, plan.window, detect=design.detect) if compared else None
    return schedule.result(comparison, from_records)


def _recorded_blocks(
    results_dir: str | Path | None, plan: _Plan, prefix: str
) -> tuple[set[int], list[float]]:
    """The seeds whose blocks the --results folder already records (not trained again), and
    those blocks' CPU seconds: a resumed matrix's CPU budget counts them."""
    from ccpo_cli.experiments import records

    if results_dir is None:
        return set(), []
    seeds = records.recorded_seeds(results_dir, plan.blocks)
    return seeds, [records.recorded_cpu_s(results_dir, prefix, seed) for seed in sorted(seeds)]


def _executor(
    design: MatrixDesign,
    db_path: str | Path,
    ray_address: str | None,
    log: Callable[[str], None] | None,
    progress: Callable[[str], None] | None,
) -> Any:
    """Where the blocks train: here one by one (Ray never touched), or as Ray tasks."""
    if ray_address is None:
        return InProcessBlocks(db_path, log, progress)
    from ccpo_cli.experiments.ray_blocks import RayBlocks

    return RayBlocks(ray_address, db_path, cpus_per_block=max(1, design.recipe.workers))


def _record_block(
    db, design: MatrixDesign, plan: _Plan, seed: int, results_dir: str | Path
) -> None:
    """Record a complete block in the --results folder (records.py), when all its runs finished."""
    from ccpo_cli.experiments import records

    record = records.block_record(
        db, design.prefix, plan.arm_names, seed, Path(results_dir).resolve().name
    )
    if record is not None:
        records.write_record(results_dir, record)


class _Schedule:
    """The matrix's blocks as they run: which wait, which run (since when), which are complete,
    what each cost, and the budgets the next block must fit in."""

    def __init__(
        self,
        design: MatrixDesign,
        plan: _Plan,
        executor: Any,
        clock: Callable[[], float],
        progress: Callable[[str], None] | None,
        from_records: set[int],
        recorded_cpu: list[float],
    ):
        self.design, self.plan, self.executor = design, plan, executor
        self.clock, self.progress = clock, progress or (lambda message: None)
        self.arm_count = len(plan.arm_names)
        self.budget_s = design.minutes * 60.0
        self.cpu_budget_s = None if design.cpu_minutes is None else design.cpu_minutes * 60.0
        self.started = clock()
        self.total = self.arm_count * len(plan.blocks)
        self.waiting = [block for block in plan.blocks if block.seed not in from_records]
        self.running: dict[int, float] = {}  # seed -> when its block started
        self.complete: set[int] = set()
        self.block_seconds: list[float] = []
        self.block_cpu = recorded_cpu
        self.run_cpu: dict[str, float] = {}
        self.incomplete: list[Block] = []
        self.nodes: Counter = Counter()
        self.stopped_reason = "all seeds done"
        self.power: dict | None = None

    def over_budget(self) -> str | None:
        """Why the next block may not start (None: it may): it would end past a budget, by the
        longest block so far, counting the blocks still running."""
        design = self.design
        predicted = max(self.block_seconds, default=0.0)
        if self.block_seconds and self.clock() - self.started + predicted > self.budget_s:
            return (
                f"its block (about {predicted / 60:.1f} min, the longest so far) would end past the "
                f"{design.minutes:g}-min budget"
            )
        predicted_cpu = max(self.block_cpu, default=0.0)
        if (
            self.cpu_budget_s is not None
            and self.block_cpu
            and sum(self.block_cpu) + predicted_cpu * (len(self.running) + 1) > self.cpu_budget_s
        ):
            return (
                f"its block (about {predicted_cpu / 60:.1f} CPU-min, the most so far) would end past the "
                f"{design.cpu_minutes:g} CPU-min budget"
            )
        return None

    def start_blocks(self) -> None:
        """Submit waiting blocks while the executor has room; none at all once one would end
        past a budget (the reason is the matrix's stop)."""
        while self.waiting and len(self.running) < self.executor.capacity:
            reason = self.over_budget()
            if reason is not None:
                self.stopped_reason = f"stopped before seed {self.waiting[0].seed}: {reason}"
                self.waiting = []
                break
            block = self.waiting.pop(0)
            self.executor.submit(block)
            self.running[block.seed] = self.clock()

    def block_done(self, finished: BlockDone) -> None:
        """A block finished: its seconds, CPU (of the runs trained here) and node."""
        self.block_seconds.append(self.clock() - self.running.pop(finished.block.seed))
        if finished.run_cpu_s is not None:
            self.block_cpu.append(finished.cpu_s)
            self.run_cpu.update(finished.run_cpu_s)
        self.complete.add(finished.block.seed)
        if finished.node is not None:
            self.nodes[finished.node] += 1

    def interrupted(self) -> None:
        """^C: the blocks still running are abandoned and left out of the comparison."""
        self.incomplete = [block for block in self.executor.abandon() if block.seed in self.running]
        seeds = ", ".join(str(block.seed) for block in self.incomplete)
        self.stopped_reason = f"interrupted during seed {seeds}; {'its block is' if len(self.incomplete) == 1 else 'their blocks are'} left out"

    def compared_names(self) -> list[str]:
        return [
            name
            for block in self.plan.blocks
            if block.seed in self.complete
            for name in block.run_names
        ]

    def report(self, done: int) -> None:
        self.progress(
            progress_line(
                done,
                self.total,
                self.clock() - self.started,
                self.budget_s,
                self.power,
                len(self.nodes) if self.executor.counts_nodes else None,
            )
        )

    def report_run(self, index: int) -> None:
        if index < self.arm_count:  # a block's last run is reported with the new power
            self.report(len(self.complete) * self.arm_count + index)

    def result(self, comparison: Comparison | None, from_records: set[int]) -> MatrixResult:
        """What the matrix compared, what it left out and why, and what it cost."""
        stopped = [{"seed": block.seed, "runs": block.run_names} for block in self.incomplete]
        seen = self.complete | {block.seed for block in self.incomplete} | from_records
        done_blocks = [block for block in self.plan.blocks if block.seed in self.complete]
        warm_by_seed = {
            block.seed: block.trains_warmup.label
            for block in done_blocks
            if block.trains_warmup is not None
        }
        return MatrixResult(
            self.compared_names(),
            [block.seed for block in done_blocks],
            stopped[0] if stopped else None,
            [seed for seed in self.design.seeds if seed not in seen],
            self.clock() - self.started,
            self.stopped_reason,
            comparison,
            self.block_seconds,
            stopped,
            dict(self.nodes),
            self.block_cpu,
            self.run_cpu,
            [arm.described for arm in self.plan.arms],
            warm_by_seed,
            warm_start_effect(comparison, warm_by_seed, done_blocks)
            if warm_by_seed and comparison is not None
            else None,
            sorted(from_records),
        )


def warm_start_effect(
    comparison: Comparison, warm_by_seed: dict[int, str], blocks: list[Block]
) -> dict[str, Any]:
    """What continuing its own warm-up is worth to an arm, for every pair of arms that both
    trained warm-ups: the per-seed difference a − b (window means) on the seeds whose warm-up a
    trained, against those b trained. Half their gap is the *home advantage* h (a gains h when
    the warm-up is its own and loses h when it is b's); the mean of the two group means is the
    difference with the warm-start arm balanced out. Welch's t on the two groups gives its p."""
    from ccpo_cli.stats import welch_t_test

    means: dict[str, float] = {}
    for entry in comparison.runs:
        if entry.window.n:
            means[entry.run] = entry.window.mean
    labels = [block.arms for block in blocks][0] if blocks else ()
    trained = sorted(set(warm_by_seed.values()))
    pairs = []
    for index, first in enumerate(labels):
        for second in labels[index + 1 :]:
            if first.label not in trained or second.label not in trained:
                continue
            groups: dict[str, list[float]] = {first.label: [], second.label: []}
            for block in blocks:
                owner = warm_by_seed.get(block.seed)
                name_a, name_b = (
                    run_name(block.prefix, first.label, block.seed),
                    run_name(block.prefix, second.label, block.seed),
                )
                if owner in groups and name_a in means and name_b in means:
                    groups[owner].append(means[name_a] - means[name_b])
            own, other = groups[first.label], groups[second.label]
            entry: dict[str, Any] = {
                "arm_a": first.label,
                "arm_b": second.label,
                "n_warmup_a": len(own),
                "n_warmup_b": len(other),
                "mean_difference_warmup_a": _mean_or_none(own),
                "mean_difference_warmup_b": _mean_or_none(other),
            }
            if own and other:
                entry["balanced_difference"] = (_mean_or_none(own) + _mean_or_none(other)) / 2
                entry["home_advantage"] = (_mean_or_none(own) - _mean_or_none(other)) / 2
            if len(own) >= 2 and len(other) >= 2:
                test = welch_t_test(own, other)
                entry["p_home_advantage"] = test["p"] if isinstance(test, dict) else None
            else:
                entry["note"] = "needs ≥ 2 seeds with each arm's warm-up"
            pairs.append(entry)
    counts = Counter(warm_by_seed.values())
    return {"warmups_by_arm": dict(sorted(counts.items())), "pairs": pairs}


def _mean_or_none(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
