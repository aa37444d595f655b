"""`ccpo publish`: push a run's card (and a checkpoint) to the Hugging Face Hub, or follow a run
that trains elsewhere and push it as it grows (`--follow RUN`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli.card import (
    CardStatus,
    CardStatusOption,
    PublishedCheckpointStepOption,
    resolved_status,
)
from ccpo_cli.cli.common import (
    CheckpointMergerOption,
    HubRevisionOption,
    JsonOption,
    LicenseOption,
    MergedDirOption,
    OptionalHubRepoOption,
    WindowStartOption,
    emit_json,
    info,
    run_option,
    say,
    settings,
)
from ccpo_cli.cli.options import HubPublishing, option_values, options_command, scoped_option
from ccpo_cli.errors import UsageError

# The options only `--follow` reads.
follow_option = scoped_option("--follow")


@dataclass(frozen=True)
class PublishOptions:
    """What `ccpo publish` was asked (None: not given)."""

    run: Annotated[str | None, run_option("The run to publish (or --follow RUN).")] = None
    repo: OptionalHubRepoOption = None
    follow: Annotated[
        str | None,
        run_option(
            "Follow this run while it trains elsewhere: ingest its growing log, push an interim card at every evaluation, its best checkpoint (a verl global_step_N merged by verl-agent's merger), then the final card and weights; resumes what an earlier trainer or follower left pending.",
            flag="--follow",
        ),
    ] = None
    run_dir: Annotated[
        Path | None,
        follow_option("--run-dir", help="the run folder (default: the one runs.db records)."),
    ] = None
    poll: Annotated[float, follow_option("--poll", help="seconds between looks at the run.")] = 30.0
    once: Annotated[
        bool,
        follow_option(
            "--once",
            help="one round (ingest, queue, upload what is ready), within --deadline, then exit.",
        ),
    ] = False
    retry_failed: Annotated[
        bool,
        follow_option(
            "--retry-failed",
            help="queue the run's failed publications again first (after fixing the token, freeing the disk).",
        ),
    ] = False
    status: CardStatusOption = CardStatus.interim
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            "--checkpoint",
            help="Model folder to upload (then verified by sha256 and tagged step-N) before the card; a verl global_step_N folder is merged by verl-agent's own merger and verified first.",
        ),
    ] = None
    verl_agent_home: CheckpointMergerOption = None
    merged_dir: MergedDirOption = None
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Write the staging folder and commit plan (--follow: list what would be published); no network call.",
        ),
    ] = False
    hub: HubPublishing = HubPublishing()
    revision: HubRevisionOption = "main"
    staging: Annotated[
        Path | None, typer.Option("--staging", help="Staging folder (default: ccpo-publish-RUN).")
    ] = None
    window_start: WindowStartOption = None
    license: LicenseOption = None  # noqa: A002
    checkpoint_step: PublishedCheckpointStepOption = None
    as_json: JsonOption = False


@options_command(PublishOptions)
def publish(ctx: typer.Context, options: PublishOptions) -> None:
    """Render the card of a run and publish it (README.md + results/ccpo_summary.json + plot) in one commit.

    Example: ccpo publish --run grpo-seed0 --repo me/grpo-alfworld --dry-run
    """
    if (options.run is None) == (options.follow is None):
        raise UsageError(
            "give --run RUN (publish once) or --follow RUN (publish as it trains), not both or neither"
        )
    if options.repo is None:
        raise UsageError("--repo OWNER/NAME is required")
    if options.follow is not None:
        _follow(ctx, options)
    else:
        _publish_once(ctx, options)


# The options `publish_run` takes under their own names.
PUBLISH_RUN_OPTIONS = (
    "revision",
    "checkpoint",
    "dry_run",
    "window_start",
    "license",
    "checkpoint_step",
    "verl_agent_home",
    "merged_dir",
)
# The options `push_target` takes under their own names (--follow), besides the Hub's.
PUSH_TARGET_OPTIONS = (
    "revision",
    "window_start",
    "license",
    "staging",
)


def _publish_once(ctx: typer.Context, options: PublishOptions) -> None:
    """`ccpo publish --run RUN`: stage the card, then push it (or, dry, write the plan)."""
    # Imported here: the Hub client and the cards load only for a publication.
    from ccpo_cli.hub import publish_run
    from ccpo_cli.hub_access import token_source
    from ccpo_cli.names import default_folder, require_inside
    from ccpo_cli.store import open_db
    from ccpo_cli.terminal_text import escape_control

    run = options.run
    # The run name is checked as a folder name before the database is asked about it.
    staging = options.staging or require_inside(
        default_folder("ccpo-publish", run), Path.cwd(), "--run"
    )
    db = open_db(settings(ctx).db, must_exist=True)
    result = publish_run(
        db,
        run,
        options.repo,
        status=resolved_status(ctx, db, run, options.status, options.window_start),
        staging=staging,
        **option_values(options, PUBLISH_RUN_OPTIONS),
        **dataclasses.asdict(options.hub),
        log=lambda message: info(ctx, escape_control(message)),
    )
    if options.as_json:
        emit_json(result)
    elif result["dry_run"]:
        files = [entry["path_in_repo"] for commit in result["commits"] for entry in commit["files"]]
        info(ctx, f"dry run: nothing was sent; staged {len(files)} file(s) in {result['staging']}")
        for line in _plan_lines(result, token_source(options.hub.token, options.hub.token_file)):
            say(line)
        say(result["plan_file"])
    else:
        merged = "merged into the remote README" if result["readme_merged"] else "README replaced"
        info(ctx, f"published {result['repo_id']}@{result['revision']} ({merged})")
        say(result["commit_url"])


def _plan_lines(plan: dict, token_from: str) -> list[str]:
    """The dry run's plan as a person reads it: where, what in which commit, and the token."""
    visibility = "private" if plan["private"] else "public"
    lines = [
        f"plan: {plan['repo_id']}@{plan['revision']} ({visibility} if created) on {plan['endpoint']}, "
        f"{plan['status']} card of {plan['run']}"
    ]
    for number, commit in enumerate(plan["commits"], start=1):
        size = sum(entry.get("size") or 0 for entry in commit["files"])
        tag = f", tag {commit['tag']}" if commit.get("tag") else ""
        lines.append(
            f"  commit {number} ({commit['purpose']}{tag}): {len(commit['files'])} file(s), {size:,} bytes: "
            f"{commit['commit_message']}"
        )
        lines += [f"    {entry['path_in_repo']}" for entry in commit["files"][:12]]
        if len(commit["files"]) > 12:
            lines.append(f"    ... and {len(commit['files']) - 12} more")
    lines.append(f"token: {token_from}")
    return lines


def _follow(ctx: typer.Context, options: PublishOptions) -> None:
    """`ccpo publish --follow RUN`: publish the run as it trains elsewhere (dry: the plan)."""
    from ccpo_cli.hub_access import resolve_token
    from ccpo_cli.publishing.follow import check_poll, follow_run
    from ccpo_cli.publishing.target import push_target

    check_poll(options.poll)
    hub = options.hub
    target = push_target(
        options.repo,
        **option_values(hub, ("endpoint", "private", "timeout", "deadline")),
        **option_values(options, PUSH_TARGET_OPTIONS),
    )
    if options.dry_run:  # no token, no lock, no network: what the outbox would publish now
        _follow_plan(ctx, options, target)
        return
    secret = resolve_token(options.hub.token, options.hub.token_file)
    if not secret:
        from ccpo_cli.errors import RemoteError

        raise RemoteError(
            "no Hugging Face token: pass --token-file, --token -, set HF_TOKEN or run `hf auth login`"
        )
    from ccpo_cli.terminal_text import escape_control

    # The uploader's lines carry the Hub's words and names from files: escaped for the terminal.
    result = follow_run(
        settings(ctx).db,
        options.follow,
        target,
        secret,
        **option_values(options, ("run_dir", "verl_agent_home", "once", "retry_failed")),
        poll_s=options.poll,
        log=lambda message: info(ctx, escape_control(message)),
    )
    if options.as_json:
        emit_json(result)
    else:
        _print_followed(options, result)


def _print_followed(options: PublishOptions, result: dict) -> None:
    """The outbox's counts after the follow, and the weights on the Hub no card names."""
    from ccpo_cli.terminal_text import escape_control

    outbox = result["outbox"]
    say(
        f"{options.follow} -> {options.repo}: {outbox['done']} done, {outbox['pending']} pending, "
        f"{outbox['failed']} failed, {outbox['skipped']} skipped"
    )
    for weights in result["weights_without_card"]:
        say(
            escape_control(
                f"warning: the {weights['role']} weights of step {weights['step']} are on the Hub (commit "
                f"{str(weights['commit_id'])[:12]}, tag {weights['tag'] or 'none'}) but no card names them: "
                f"{weights['card']}"
            )
        )


def _follow_plan(ctx: typer.Context, options: PublishOptions, target) -> None:
    """`--follow --dry-run`: what a follow would publish now, in order; nothing sent or written."""
    from ccpo_cli.publishing.follow import plan_follow

    result = plan_follow(settings(ctx).db, options.follow, target, run_dir=options.run_dir)
    if options.as_json:
        emit_json(result)
        return
    info(
        ctx,
        f"dry run: nothing was sent or written; a follow would publish {len(result['would_publish'])} "
        "publication(s), in this order",
    )
    for entry in result["would_publish"]:
        say(f"{entry['role']} {entry['kind']} of step {entry['step']}")
