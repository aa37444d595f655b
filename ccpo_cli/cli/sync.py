"""`ccpo sync push` / `ccpo sync pull`: share runs with other machines through a Hub dataset."""

from __future__ import annotations

from typing import Annotated

import typer

from ccpo_cli.cli.common import (
    FormatOption,
    HubEndpointOption,
    HubRepoOption,
    HubTimeoutOption,
    HubTokenFileOption,
    HubTokenOption,
    JsonOption,
    emit,
    emit_json,
    handle_errors,
    info,
    output_format,
    say,
    settings,
)

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


@sync_app.command("push")
@handle_errors
def push_command(
    ctx: typer.Context,
    repo: HubRepoOption,
    private: Annotated[
        bool,
        typer.Option(
            "--private/--public",
            " /--no-private",
            help="--public: create the dataset public, or push to an existing public one (default: private only; --no-private is --public).",
        ),
    ] = True,
    token: HubTokenOption = None,
    token_file: HubTokenFileOption = None,
    timeout: HubTimeoutOption = None,
    endpoint: HubEndpointOption = None,
    deadline: DeadlineOption = 900.0,
    max_mb: Annotated[
        float | None,
        typer.Option("--max-mb", help="Refuse a push of more than this many MiB (default 2048)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
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
        repo,
        token=token,
        token_file=token_file,
        timeout=timeout,
        endpoint=endpoint,
        public=not private,
        limits=_limits(deadline, max_mb, push=True),
    )
    if as_json:
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


@sync_app.command("pull")
@handle_errors
def pull_command(
    ctx: typer.Context,
    repo: HubRepoOption,
    revision: Annotated[
        str | None,
        typer.Option(
            "--revision",
            metavar="COMMIT",
            help="The dataset commit (or branch) to merge (default: main's head when the pull starts).",
        ),
    ] = None,
    token: HubTokenOption = None,
    token_file: HubTokenFileOption = None,
    timeout: HubTimeoutOption = None,
    endpoint: HubEndpointOption = None,
    deadline: DeadlineOption = 900.0,
    max_mb: Annotated[
        float | None,
        typer.Option(
            "--max-mb", help="Refuse a pull of more than this many MiB of new parts (default 8192)."
        ),
    ] = None,
    as_json: JsonOption = False,
    fmt: FormatOption = None,
) -> None:
    """Merge one commit of the dataset into this database (runs matched by their global id; only parts not merged before).

    Example: ccpo sync pull --repo me/ccpo-runs --token-file ~/.hf-token
    """
    from ccpo_cli.hub_sync import sync_pull
    from ccpo_cli.report.command_tables import sync_table
    from ccpo_cli.store import open_db

    chosen = output_format(fmt, as_json)
    result = sync_pull(
        open_db(settings(ctx).db),
        repo,
        revision=revision,
        token=token,
        token_file=token_file,
        timeout=timeout,
        endpoint=endpoint,
        limits=_limits(deadline, max_mb, push=False),
    )
    if chosen.value != "json":
        from ccpo_cli.terminal_text import escape_control

        for refused in result["parts_refused"]:  # names and reasons come from the dataset: escaped
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
    emit(chosen, {"pull": result}, lambda: [sync_table(result["counts"])])
