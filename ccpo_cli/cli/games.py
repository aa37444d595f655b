"""`ccpo games generate|check`: write seeded ALFWorld games, and check games with the planner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli.common import JsonOption, emit, emit_json, handle_errors, info, say
from ccpo_cli.cli.options import Output, options_command

games_app = typer.Typer(
    help="Generate and check ALFWorld games (the real engine's format).", no_args_is_help=True
)


def _progress(ctx: typer.Context, verb: str):
    def report(done: int, total: int) -> None:
        if done == total or done % 25 == 0:
            info(ctx, f"{verb} {done}/{total}")

    return report


@games_app.command("generate")
@handle_errors
def generate(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option("--out", help="Folder to write the games into.")],
    split: Annotated[
        str, typer.Option("--split", help="train or heldout (separate seed spaces).")
    ] = "train",
    n: Annotated[int, typer.Option("--n", help="Number of games.")] = 60,
    seed: Annotated[int, typer.Option("--seed", help="Generator seed.")] = 0,
    room: Annotated[
        str, typer.Option("--room", help="small (CPU testbed) or large rooms.")
    ] = "small",
    workers: Annotated[int, typer.Option("--workers", help="Processes validating games.")] = 1,
    as_json: JsonOption = False,
) -> None:
    """Write N solvable games, each validated by the planner's walkthrough.

    Example: ccpo games generate --out games/train --split train --n 60 --seed 0
    """
    from ccpo_cli.envs.engine import preserved_argv
    from ccpo_cli.envs.generate import generate_games
    from ccpo_cli.task_types import TASK_TYPES

    with preserved_argv():
        games = generate_games(
            out, split, n, seed, room=room, workers=workers, progress=_progress(ctx, "generated")
        )
    counts = {key: sum(g.task_type == key for g in games) for key in TASK_TYPES}
    if as_json:
        emit_json(
            {
                "out": str(out),
                "split": split,
                "seed": seed,
                "room": room,
                "n": len(games),
                "task_types": counts,
                "games": [_game_entry(game) for game in games],
            }
        )
        return
    say(
        f"wrote {len(games)} games to {out} "
        + " ".join(f"{key}={count}" for key, count in counts.items())
    )


def _game_entry(game) -> dict:
    """One generated game in `games generate --json`: its id, type, hash and walkthrough length."""
    return {
        "game_id": game.game_id,
        "task_type": game.task_type,
        "sha256": game.sha256,
        "walkthrough_steps": len(game.walkthrough),
    }


@dataclass(frozen=True)
class CheckOptions:
    """What `ccpo games check` was asked."""

    folder: Annotated[Path, typer.Argument(help="A folder of games (json_2.1.1 layout).")]
    workers: Annotated[int, typer.Option("--workers", help="Processes checking games.")] = 1
    output: Output = Output()


@games_app.command("check")
@options_command(CheckOptions)
def check(ctx: typer.Context, options: CheckOptions) -> None:
    """Load every game in the real engine and win it with the planner's walkthrough.

    Example: ccpo games check games/train --workers 2
    """
    from ccpo_cli.envs.engine import preserved_argv
    from ccpo_cli.envs.games import check_games
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.report.command_tables import games_check_table

    folder = options.folder
    chosen = options.output.chosen()
    with preserved_argv():
        report = check_games(folder, workers=options.workers, progress=_progress(ctx, "checked"))
    document = {
        "folder": str(folder),
        "games": len(report.games),
        "ok": report.ok,
        "won": sum(g.ok for g in report.games),
        "task_types": report.by_type(),
        "failures": [{"game_id": g.game_id, "error": g.error} for g in report.failures],
    }
    emit(
        chosen,
        document,
        lambda: [
            games_check_table(str(folder), report.by_type()),
            *(f"FAILED {failure.game_id}: {failure.error}" for failure in report.failures),
        ],
    )
    if not report.ok:
        raise InvalidInput(f"{len(report.failures)} of {len(report.games)} games failed the check")
