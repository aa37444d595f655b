"""`ccpo eval`: held-out evaluation of an agent, every episode recorded in runs.db."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ccpo_cli.cli.common import (
    JsonOption,
    SeedsOption,
    emit_json,
    handle_errors,
    info,
    parse_seeds,
    settings,
    stderr_console,
    stdout_console,
)
from ccpo_cli.task_types import TASK_TYPES


def _percent(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:.1f}"


def _seed_table(document: dict) -> Table:
    table = Table(title=f"{document['agent']} on {document['games']} (run {document['run']}, step {document['step']})")
    for column in ("seed", "episodes", "wins", "success %", "Wilson 95%", "mean turns", "invalid %"):
        table.add_column(column, justify="right", no_wrap=True)
    for row in document["evaluations"]:
        interval = row["wilson_95"]
        table.add_row(
            str(row["seed"]), str(row["episodes"]), str(row["successes"]), _percent(row["success"]),
            f"{_percent(interval['low'])}-{_percent(interval['high'])}",
            f"{row['mean_turns']:.1f}", _percent(row["invalid_turn_rate"]),
        )
    return table


def _type_table(document: dict) -> Table:
    seeds = [row["seed"] for row in document["evaluations"]]
    table = Table(title="per task type (success %)")
    table.add_column("type")
    table.add_column("episodes/seed", justify="right")
    for seed in seeds:
        table.add_column(f"seed {seed}", justify="right")
    table.add_column("mean ± sd", justify="right")
    for key in TASK_TYPES:
        if key not in document["task_types"]:
            continue
        cells = [row["task_types"].get(key) for row in document["evaluations"]]
        aggregate = document["task_types"][key]
        table.add_row(
            key, str(cells[0]["episodes"] if cells[0] else "-"),
            *[_percent(cell["success"]) if cell else "-" for cell in cells],
            f"{_percent(aggregate['mean'])} ± {_percent(aggregate['sd'])}",
        )
    return table


def render(document: dict) -> None:
    checkpoint = document.get("checkpoint")
    if checkpoint:
        stdout_console.print(
            f"model: {checkpoint['merged_folder']} ({'reused merge' if checkpoint['reused_merge'] else 'merged'} "
            f"from {checkpoint['source']}, step {checkpoint['step']}; record {checkpoint['record']})", markup=False)
    stdout_console.print(_seed_table(document))
    stdout_console.print(_type_table(document))
    stdout_console.print(
        f"success over {document['n_seeds']} seed(s): {_percent(document['mean'])} % "
        f"± {_percent(document['sd'])} (sd over seeds)"
    )


@handle_errors
def eval_command(
    ctx: typer.Context,
    run: Annotated[str, typer.Option("--run", help="Run to record the evaluations under (created if new).")],
    agent: Annotated[str, typer.Option("--agent", help="oracle | random | hf | vllm | local")],
    model: Annotated[str | None, typer.Option("--model", help="Model folder or id (hf, vllm; checkpoint for local). hf/vllm also take a verl global_step_N folder, merged by verl-agent's own merger and verified first.")] = None,
    games: Annotated[Path | None, typer.Option("--games", help="Folder of ALFWorld games (default: the shipped 128-game held-out panel).")] = None,
    episodes: Annotated[int | None, typer.Option("--episodes", help="Episodes per seed (default: every game once; fewer = a type-balanced subset).")] = None,
    seeds: SeedsOption = "0",
    temperature: Annotated[float, typer.Option("--temperature", help="Sampling temperature of hf/vllm/local policies (0 = greedy).")] = 0.4,
    workers: Annotated[int | None, typer.Option("--workers", help="Engine worker processes (default: cores, at most 8; 0 = in-process).")] = None,
    step: Annotated[int | None, typer.Option("--step", help="Training step the evaluation is recorded at (default: a verl checkpoint's step, else 0).")] = None,
    split: Annotated[str, typer.Option("--split", help="Split name recorded with the evaluations.")] = "heldout",
    max_steps: Annotated[int, typer.Option("--max-steps", help="Step limit of an episode.")] = 50,
    max_new_tokens: Annotated[int | None, typer.Option("--max-new-tokens", help="Response length limit of hf/vllm (default 512).")] = None,
    verl_agent_home: Annotated[Path | None, typer.Option("--verl-agent-home", "--verl-agent", help="verl-agent checkout whose model merger merges a global_step_N --model (default: VERL_AGENT_HOME).")] = None,
    merged_dir: Annotated[Path | None, typer.Option("--merged-dir", help="Where a merged verl checkpoint goes (default: global_step_N/ccpo_merged_hf).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Play the held-out panel with an agent for each seed; record every episode in runs.db."""
    from ccpo_cli.evaluation import EvalOptions, run_eval

    options = EvalOptions(
        run=run, agent=agent, model=model, games=games, episodes=episodes,
        seeds=parse_seeds(seeds), temperature=temperature, workers=workers, step=step,
        split=split, max_steps=max_steps, max_new_tokens=max_new_tokens,
        verl_agent_home=verl_agent_home, merged_dir=merged_dir,
    )
    quiet = settings(ctx).quiet
    progress = Progress(
        TextColumn("eval"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=stderr_console, disable=quiet, transient=True,
    )
    with progress:
        task = progress.add_task("episodes", total=None)

        def advance(finished: int, total: int) -> None:
            progress.update(task, completed=finished, total=total)

        def announce(seed_document: dict) -> None:
            if seed_document["recorded"] == "conflict":
                info(ctx, f"warning: seed {seed_document['seed']}: a different result was already "
                          f"recorded for this run/step/seed; kept both (see conflicts)")

        document = run_eval(settings(ctx).db, options, progress=advance, on_seed_recorded=announce)
    if as_json:
        emit_json(document)
    else:
        render(document)
