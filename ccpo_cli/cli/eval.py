"""`ccpo eval`: held-out evaluation of an agent, every episode recorded in runs.db."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli import completion
from ccpo_cli.cli.common import (
    MergedDirOption,
    ModelMergerOption,
    SeedsOption,
    emit,
    info,
    parse_seeds,
    run_option,
    settings,
    stderr_console,
)
from ccpo_cli.cli.options import TablesOutput, option_values, options_command
from ccpo_cli.cli.progress import Progress
from ccpo_cli.vocabulary import EVAL_TEMPERATURE


@dataclass(frozen=True)
class EvalCommandOptions:
    """What `ccpo eval` was asked, as Typer parsed it (`EvalOptions` is the library's request)."""

    run: Annotated[str, run_option("Run to record the evaluations under (created if new).")]
    agent: Annotated[
        str,
        typer.Option(
            "--agent",
            help="oracle | random | hf | vllm | local",
            autocompletion=completion.agent_names,
        ),
    ]
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Model folder or id (hf, vllm; checkpoint for local). hf/vllm also take a verl global_step_N folder, merged by verl-agent's own merger and verified first.",
        ),
    ] = None
    games: Annotated[
        Path | None,
        typer.Option(
            "--games",
            help="Folder of ALFWorld games (default: the shipped 128-game held-out panel).",
        ),
    ] = None
    episodes: Annotated[
        int | None,
        typer.Option(
            "--episodes",
            help="Episodes per seed (default: every game once; fewer = a type-balanced subset).",
        ),
    ] = None
    seeds: SeedsOption = "0"
    temperature: Annotated[
        float,
        typer.Option(
            "--temperature", help="Sampling temperature of hf/vllm/local policies (0 = greedy)."
        ),
    ] = EVAL_TEMPERATURE
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", help="Engine worker processes (default: cores, at most 8; 0 = in-process)."
        ),
    ] = None
    step: Annotated[
        int | None,
        typer.Option(
            "--step",
            help="Training step the evaluation is recorded at (default: a verl checkpoint's step, else 0).",
        ),
    ] = None
    split: Annotated[
        str, typer.Option("--split", help="Split name recorded with the evaluations.")
    ] = "heldout"
    max_steps: Annotated[int, typer.Option("--max-steps", help="Step limit of an episode.")] = 50
    max_new_tokens: Annotated[
        int | None,
        typer.Option("--max-new-tokens", help="Response length limit of hf/vllm (default 512)."),
    ] = None
    verl_agent_home: ModelMergerOption = None
    merged_dir: MergedDirOption = None
    output: TablesOutput = TablesOutput()


@options_command(EvalCommandOptions)
def eval_command(ctx: typer.Context, options: EvalCommandOptions) -> None:
    """Play the held-out panel with an agent for each seed; record every episode in runs.db.

    Progress goes to stderr: a set-up line per phase, then a bar in a terminal or a line every tenth
    of the episodes or 10 s in a log, with the turn the games are at.

    Example: ccpo eval --run oracle --agent oracle --seeds 0-2
    """
    # Imported here: the engine, the agents and the store are for this command only.
    from ccpo_cli.evaluation import EvalOptions, run_eval
    from ccpo_cli.report.command_tables import eval_tables

    chosen = options.output.chosen()
    request = EvalOptions(
        **option_values(options, EVAL_REQUEST_FIELDS), seeds=parse_seeds(options.seeds)
    )

    def announce(seed_document: dict) -> None:
        if seed_document["recorded"] == "conflict":
            info(
                ctx,
                f"warning: seed {seed_document['seed']}: a different result was already "
                f"recorded for this run/step/seed; kept both (see conflicts)",
            )

    with Progress(
        "eval", "episodes", console=stderr_console(), quiet=settings(ctx).quiet
    ) as progress:
        document = run_eval(
            settings(ctx).db,
            request,
            progress=progress.update,
            on_seed_recorded=announce,
            on_turn=progress.turn,
            on_phase=progress.phase,
        )
    emit(chosen, document, lambda: eval_tables(document), table=options.output.table)


# The options `EvalOptions` takes under the same names (the seeds are parsed first).
EVAL_REQUEST_FIELDS = (
    "run",
    "agent",
    "model",
    "games",
    "episodes",
    "temperature",
    "workers",
    "step",
    "split",
    "max_steps",
    "max_new_tokens",
    "verl_agent_home",
    "merged_dir",
)
