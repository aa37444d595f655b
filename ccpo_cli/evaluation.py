"""`ccpo eval` as a library call: play the panel per seed with an agent and record every episode.

One evaluation row per seed (with its per-type rows and every episode: game id, type, won,
turns, invalid turns, per-turn invalid flags) goes into runs.db as soon as that seed is done.
The returned document is what `ccpo eval --json` prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.agents import registry
from ccpo_cli.agents.evaluate import (
    PhaseCallback,
    ProgressCallback,
    SeedEvaluation,
    TurnCallback,
    evaluate,
)
from ccpo_cli.errors import InvalidInput
from ccpo_cli.names import check_run_name
from ccpo_cli.stats import mean_sd_n, wilson_interval
from ccpo_cli.task_types import TASK_TYPES
from ccpo_cli.vocabulary import EVAL_TEMPERATURE, LOCAL, MODEL_AGENT_KINDS, SAMPLING_AGENT_KINDS

BENCHMARK = "alfworld"  # `ccpo eval` plays ALFWorld games with the real engine
HELDOUT_PANEL = "heldout-panel"
# The local backend's policy as an agent: named here, below the backends, never by the agents.
registry.register_lazy_agent(LOCAL, "ccpo_cli.backends.local.agent:make_local_agent")


def resolve_games(games: Path | None) -> tuple[list[str], str]:
    """(game files, label): the games of a folder, else the shipped held-out panel."""
    from ccpo_cli import envs

    if games is None:
        return [str(path) for path in envs.heldout_panel()], HELDOUT_PANEL
    if not Path(games).is_dir():
        raise InvalidInput(f"--games {games}: not a folder")
    found = [str(path) for path in envs.find_games(games)]
    if not found:
        raise InvalidInput(
            f"--games {games}: no ALFWorld games (no */*/game.tw-pddl) in this folder"
        )
    return found, str(games)


def build_agent(kind: str, model: str | None, *, temperature: float, seed: int, **options: Any):
    if kind not in registry.AGENT_KINDS and kind not in registry.AGENT_FACTORIES:
        raise InvalidInput(f"--agent {kind}: not one of {', '.join(registry.AGENT_KINDS)}")
    return registry.make_agent(kind, model, temperature=temperature, seed=seed, **options)


def _percent_interval(successes: int, episodes: int) -> dict[str, float]:
    low, high = wilson_interval(successes, episodes)
    return {"low": 100.0 * low, "high": 100.0 * high}


def seed_document(result: SeedEvaluation) -> dict[str, Any]:
    document = result.summary()
    document["wilson_95"] = _percent_interval(result.successes, len(result.episodes))
    return document


def across_seeds(results: Sequence[SeedEvaluation]) -> dict[str, Any]:
    """Mean and sd (ddof 1) over seeds, overall and per task type."""
    overall = mean_sd_n([r.success for r in results])
    per_type: dict[str, Any] = {}
    for key in TASK_TYPES:
        rates = [r.task_types()[key]["success"] for r in results if key in r.task_types()]
        if rates:
            per_type[key] = dict(mean_sd_n(rates), per_seed=rates)
    return {
        "mean": overall["mean"],
        "sd": overall["sd"],
        "n_seeds": overall["n"],
        "task_type_means": per_type,
    }


def resolve_eval_model(options: EvalOptions) -> tuple[str | None, Any, int]:
    """(the model the agent loads, the merge or None, the step to record at). For hf and vllm a
    verl global_step_N folder is merged by verl's own merger and verified first, and its
    evaluations are recorded at its training step; other agents take --model as it is."""
    if options.agent not in MODEL_AGENT_KINDS:
        return options.model, None, _recorded_step(options.step, None)
    from ccpo_cli.backends.verl.checkpoint import find_verl_checkpoint, resolve_model_source

    step = _recorded_step(
        options.step, find_verl_checkpoint(options.model)
    )  # refused before any merge
    model, merged = resolve_model_source(
        options.model, verl_agent_home=options.verl_agent_home, merged_dir=options.merged_dir
    )
    return model, merged, step


def _recorded_step(step: int | None, checkpoint: Any) -> int:
    """A checkpoint's evaluations are recorded at its training step; --step may only agree."""
    checkpoint_step = None if checkpoint is None else checkpoint.step
    if step is not None and checkpoint_step is not None and step != checkpoint_step:
        raise InvalidInput(
            f"--step {step}, but the checkpoint {checkpoint.folder} is from step "
            f"{checkpoint_step}; leave --step out to record it at {checkpoint_step}"
        )
    return step if step is not None else (checkpoint_step or 0)


@dataclass
class EvalOptions:
    run: str
    agent: str
    model: str | None = None
    games: Path | None = None
    episodes: int | None = None
    seeds: Sequence[int] = (0,)
    temperature: float = EVAL_TEMPERATURE
    workers: int | None = None
    step: int | None = None  # None: the verl checkpoint's step, else 0
    split: str = "heldout"
    max_steps: int = 50
    max_new_tokens: int | None = None
    verl_agent_home: Path | None = (
        None  # where verl's model merger is (hf/vllm on a verl checkpoint)
    )
    merged_dir: Path | None = None  # where the merged checkpoint goes (default: beside its shards)

    def check(self) -> None:
        """InvalidInput for a setting out of range or a run name that cannot be recorded."""
        if self.step is not None and self.step < 0:
            raise InvalidInput(f"--step must be >= 0, got {self.step}")
        if self.max_steps < 1:
            raise InvalidInput(f"--max-steps must be >= 1, got {self.max_steps}")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise InvalidInput(f"--max-new-tokens must be >= 1, got {self.max_new_tokens}")
        if self.workers is not None and self.workers < 0:
            raise InvalidInput(f"--workers must be >= 0, got {self.workers}")
        check_run_name(self.run)

    @property
    def recorded_temperature(self) -> float | None:
        """The temperature an evaluation is recorded at: none for an agent that does not sample."""
        return self.temperature if self.agent in SAMPLING_AGENT_KINDS else None


def run_eval(
    db_path: Path,
    options: EvalOptions,
    *,
    progress: ProgressCallback | None = None,
    on_seed_recorded: Callable[[dict[str, Any]], None] | None = None,
    on_turn: TurnCallback | None = None,
    on_phase: PhaseCallback | None = None,
) -> dict[str, Any]:
    """Evaluate, record each seed in runs.db, and return the `ccpo eval --json` document.
    `on_phase` hears the set-up (the model, the engine) before each part starts."""
    from ccpo_cli.store import open_db

    options.check()
    game_files, games_label = resolve_games(options.games)
    agent, merged, step = _load_agent(options, on_phase)
    record = _SeedRecorder(open_db(db_path), options, step, on_seed_recorded)
    try:
        results = evaluate(
            agent,
            game_files,
            seeds=options.seeds,
            episodes=options.episodes,
            workers=options.workers,
            max_steps=options.max_steps,
            progress=progress,
            on_seed_done=record,
            on_turn=on_turn,
            on_phase=on_phase,
        )
    finally:
        agent.close()
    summary = across_seeds(results)
    return {
        "run": options.run,
        "agent": options.agent,
        "model": options.model,
        "games": games_label,
        "step": step,
        "split": options.split,
        "temperature": options.recorded_temperature,
        "evaluations": record.documents,
        "mean": summary["mean"],
        "sd": summary["sd"],
        "n_seeds": summary["n_seeds"],
        "task_types": summary["task_type_means"],
        "checkpoint": None if merged is None else merged.summary(),
    }


def _load_agent(options: EvalOptions, on_phase: PhaseCallback | None) -> tuple[Any, Any, int]:
    """(the agent, the verl checkpoint's merge or None, the step to record at); `on_phase`
    hears of a model's loading first, the slow part of a model agent's set-up."""
    agent_options = {}
    if options.max_new_tokens is not None and options.agent in MODEL_AGENT_KINDS:
        agent_options["max_new_tokens"] = options.max_new_tokens
    if on_phase is not None and options.agent in MODEL_AGENT_KINDS:
        on_phase(f"loading the model {options.model} for the {options.agent} agent")
    model, merged, step = resolve_eval_model(options)
    agent = build_agent(
        options.agent,
        model,
        temperature=options.temperature,
        seed=options.seeds[0],
        **agent_options,
    )
    return agent, merged, step


class _SeedRecorder:
    """Records each seed's evaluation in runs.db as soon as it is done, with the run's facts,
    and keeps its `ccpo eval --json` document."""

    def __init__(
        self,
        db,
        options: EvalOptions,
        step: int,
        on_seed_recorded: Callable[[dict[str, Any]], None] | None,
    ):
        from ccpo_cli.store.records import run_exists

        self.db, self.options, self.step = db, options, step
        self.on_seed_recorded = on_seed_recorded
        self.documents: list[dict[str, Any]] = []
        # A new run that only evaluates is a reference run (oracle, random, a checkpoint under
        # its own name); evaluations recorded into an existing training run stay that run's.
        self.kind = None if run_exists(db, options.run) else "evaluation"

    def __call__(self, result: SeedEvaluation) -> None:
        from ccpo_cli.store import ensure_run, record_evaluation_outcome
        from ccpo_cli.store.facts import record_run_facts

        db, options = self.db, self.options
        # The run is created with its first result: a failed evaluation leaves no empty run behind.
        ensure_run(db, options.run, kind=self.kind, benchmark=BENCHMARK)
        facts = {
            "split": options.split,
            "episodes": len(result.episodes),
            "max_steps": options.max_steps,
            "temperature": options.recorded_temperature,
        }
        if self.kind == "evaluation":
            facts.update(agent=options.agent, model=options.model)
        record_run_facts(
            db,
            options.run,
            {key: value for key, value in facts.items() if value is not None},
            source="ccpo eval",
        )
        outcome = record_evaluation_outcome(
            db,
            options.run,
            self.step,
            split=options.split,
            episodes=len(result.episodes),
            successes=result.successes,
            success_rate=result.success,
            mean_turns=result.mean_turns,
            temperature=options.recorded_temperature,
            eval_seed=result.seed,
            task_types=result.task_types(),
            episode_rows=[episode.as_row() for episode in result.episodes],
        )
        document = seed_document(result)
        document["evaluation_id"] = outcome.evaluation_id
        document["recorded"] = outcome.outcome
        self.documents.append(document)
        if self.on_seed_recorded is not None:
            self.on_seed_recorded(document)
