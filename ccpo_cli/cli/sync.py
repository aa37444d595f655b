"""`ccpo sync push` / `ccpo sync pull`: share runs with other machines through a Hub dataset."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Annotated

import typer

from ccpo_cli.cli.common import (
    HubRepoOption,
    JsonOption,
    emit,
    emit_json,
    info,
    say,
    settings,
)
from ccpo_cli.cli.options import HubConnection, Output, options_command

sync_app = typer.Typer(
    help="Share runs between machines through a private Hub dataset: push this database's new rows, pull everyone's.",
    no_args_is_help=True,
)

DeadlineOption = Annotated[
    float,
    typer.Option("--deadline", help="Seconds the whole push or pull may take, retries included."),
]


def _limits(deadline: float, max_mb: float | None, push: bool):
    import math

    from ccpo_cli.errors import UsageError
    from ccpo_cli.hub_sync import SyncLimits

    if not (math.isfinite(deadline) and 0 < deadline <= 86_400):
        raise UsageError(f"--deadline must be seconds in (0, 86400], got {deadline}")
    if max_mb is None:
        return SyncLimits(deadline_s=deadline)
    if not (math.isfinite(max_mb) and 0 < max_mb <= 1 << 20):
        raise UsageError(
            f"--max-mb must be a positive number of MiB (at most {1 << 20}), got {max_mb}"
        )
    size = int(max_mb * (1 << 20))
    return SyncLimits(
        deadline_s=deadline, **({"max_push_bytes": size} if push else {"max_pull_bytes": size})
    )


@dataclass(frozen=True)
class PushOptions:
    """What `ccpo sync push` was asked."""

    repo: HubRepoOption
    private: Annotated[
        bool,
        typer.Option(
            "--private/--public",
            " /--no-private",
            help="--public: create the dataset public, or push to an existing public one (default: private only; --no-private is --public).",
        ),
    ] = True
    hub: HubConnection = HubConnection()
    deadline: DeadlineOption = 900.0
    max_mb: Annotated[
        float | None,
        typer.Option("--max-mb", help="Refuse a push of more than this many MiB (default 2048)."),
    ] = None
    as_json: JsonOption = False


@sync_app.command("push")
@options_command(PushOptions)
def push_command(ctx: typer.Context, options: PushOptions) -> None:
    """Push the rows of this database the dataset lacks (runs, evaluations, facts, conflicts, publications) as one commit.

    Example: ccpo sync push --repo me/ccpo-runs --token-file ~/.hf-token
    """
    from ccpo_cli.hub_sync import sync_push
    from ccpo_cli.store import open_db
    from ccpo_cli.store.db import check_writable

    db = open_db(settings(ctx).db, must_exist=True)
    # A push records what it pushed: a database that cannot record it is refused before the
    # commit, or the next push would send the same rows again.
    check_writable(db, "a push must record what it pushed")
    result = sync_push(
        db,
        options.repo,
        **dataclasses.asdict(options.hub),
        public=not options.private,
        limits=_limits(options.deadline, options.max_mb, push=True),
    )
    if options.as_json:
        emit_json({"push": result})
    elif not result["pushed"]:
        info(ctx, result["note"])
    else:
        info(
            ctx,
            f"pushed {result['rows']} row(s) of {result['runs']} run(s) in {result['parts']} part(s) "
            f"({result['bytes'] / 1024:.1f} KiB) to {result['repo_id']} as {result['host']}",
        )
        say(result["commit_url"])


@dataclass(frozen=True)
class PullOptions:
    """What `ccpo sync pull` was asked."""

    repo: HubRepoOption
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision",
            metavar="COMMIT",
            help="The dataset commit (or branch) to merge (default: main's head when the pull starts).",
        ),
    ] = None
    hub: HubConnection = HubConnection()
    deadline: DeadlineOption = 900.0
    max_mb: Annotated[
        float | None,
        typer.Option(
            "--max-mb", help="Refuse a pull of more than this many MiB of new parts (default 8192)."
        ),
    ] = None
    output: Output = Output()


@sync_app.command("pull")
@options_command(PullOptions)
def pull_command(ctx: typer.Context, options: PullOptions) -> None:
    """Merge one commit of the dataset into this database (runs matched by their global id; only parts not merged before).

    Example: ccpo sync pull --repo me/ccpo-runs --token-file ~/.hf-token
    """
    from ccpo_cli.hub_sync import sync_pull
    from ccpo_cli.report.command_tables import sync_table
    from ccpo_cli.store import open_db

    chosen = options.output.chosen()
    result = sync_pull(
        open_db(settings(ctx).db),
        options.repo,
        revision=options.revision,
        **dataclasses.asdict(options.hub),
        limits=_limits(options.deadline, options.max_mb, push=False),
    )
    if chosen.value != "json":
        _log_pull(ctx, result)
    emit(chosen, {"pull": result}, lambda: [sync_table(result["counts"])])


def _log_pull(ctx: typer.Context, result: dict) -> None:
    """The parts a pull refused (names and reasons come from the dataset: escaped), then what
    it merged."""
    from ccpo_cli.terminal_text import escape_control

    for refused in result["parts_refused"]:
        info(
            ctx,
            f"warning: part {escape_control(refused['part'])} refused, skipped and recorded: "
            f"{escape_control(refused['reason'])}",
        )
    info(
        ctx,
        f"merged {result['parts_merged']} new part(s) of {result['parts']} from {result['repo_id']} at "
        f"{result['commit_id']}",
    )


def _settle(ctx: typer.Context, options: SettleOptions, *, accept: bool) -> None:
    from ccpo_cli.store import get_run, open_db
    from ccpo_cli.store.retractions import default_actor
    from ccpo_cli.store.sync_trust import settle_held

    run = options.run
    db = open_db(settings(ctx).db, must_exist=True)
    settled = settle_held(
        db, get_run(db, run), options.ids or None, accept=accept, by=default_actor()
    )
    if options.as_json:
        emit_json({"run": run, "accepted" if accept else "rejected": settled})
        return
    verb = "accepted" if accept else "rejected"
    if not settled:
        info(ctx, f"run {run}: no held row to settle")
    for row in settled:
        info(ctx, f"run {run}: held {row['table']} row {row['id']} {verb} ({row['outcome']})")


@dataclass(frozen=True)
class SettleOptions:
    """What `ccpo sync accept` or `ccpo sync reject` was asked: one run's held rows."""

    run: Annotated[str, typer.Argument(metavar="RUN", help="One of this machine's runs.")]
    ids: Annotated[
        list[int] | None,
        typer.Option(
            "--id",
            help="A held row's id, as `ccpo runs show RUN` lists it (default: every held row).",
        ),
    ] = None
    as_json: JsonOption = False


@sync_app.command("accept")
@options_command(SettleOptions)
def accept_command(ctx: typer.Context, options: SettleOptions) -> None:
    """Merge rows a pull held for one of this machine's runs (foreign evaluations, corrections), as a local write would.

    Only this machine writes its runs: a pulled row that would change one is held, in no number,
    until it is accepted here (or rejected with `ccpo sync reject`).

    Example: ccpo sync accept grpo-seed0 --id 3
    """
    _settle(ctx, options, accept=True)


@sync_app.command("reject")
@options_command(SettleOptions)
def reject_command(ctx: typer.Context, options: SettleOptions) -> None:
    """Set aside rows a pull held for one of this machine's runs; they stay listed, never merged.

    Example: ccpo sync reject grpo-seed0 --id 3
    """
    _settle(ctx, options, accept=False)
