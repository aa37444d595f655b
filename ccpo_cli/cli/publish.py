"""`ccpo publish`: push a run's card (and a checkpoint) to the Hugging Face Hub in one commit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ccpo_cli.cli.card import CardStatus
from ccpo_cli.cli.common import (
    JsonOption,
    WindowStartOption,
    emit_json,
    handle_errors,
    info,
    settings,
    stdout_console,
)
from ccpo_cli.names import default_folder, require_inside
from ccpo_cli.store import open_db


@handle_errors
def publish(
    ctx: typer.Context,
    run: Annotated[str, typer.Option("--run", help="The run to publish.")],
    repo: Annotated[str, typer.Option("--repo", help="Hub repository id (owner/name).")],
    status: Annotated[CardStatus, typer.Option("--status", help="interim or final.")] = CardStatus.interim,
    checkpoint: Annotated[Path | None, typer.Option("--checkpoint", help="Model folder to upload (then verified) before the card; a verl global_step_N folder is merged by verl-agent's own merger and verified first.")] = None,
    verl_agent_home: Annotated[Path | None, typer.Option("--verl-agent-home", "--verl-agent", help="verl-agent checkout whose model merger merges a global_step_N --checkpoint (default: VERL_AGENT_HOME).")] = None,
    merged_dir: Annotated[Path | None, typer.Option("--merged-dir", help="Where a merged verl checkpoint goes (default: global_step_N/ccpo_merged_hf).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write the staging folder and commit plan; no network call.")] = False,
    private: Annotated[bool | None, typer.Option("--private/--public", help="Visibility of a new repository (default: private for interim cards).")] = None,
    token: Annotated[str | None, typer.Option("--token", help="Hub token; '-' reads it from stdin. A token given here is visible to other users of this machine (ps) while ccpo runs: prefer '-', --token-file, HF_TOKEN or the saved login. Never printed.", show_default=False)] = None,
    token_file: Annotated[Path | None, typer.Option("--token-file", help="File holding the Hub token (one line).")] = None,
    timeout: Annotated[str | None, typer.Option("--timeout", help="Hub timeouts in seconds, READ or CONNECT,READ (default: CCPO_HUB_TIMEOUT, else 10,300).")] = None,
    endpoint: Annotated[str | None, typer.Option("--endpoint", help="Hub URL (default: HF_ENDPOINT, then the public Hub).")] = None,
    revision: Annotated[str, typer.Option("--revision", help="Branch to commit to (created if missing).")] = "main",
    staging: Annotated[Path | None, typer.Option("--staging", help="Staging folder (default: ccpo-publish-RUN).")] = None,
    window_start: WindowStartOption = None,
    license: Annotated[str | None, typer.Option("--license", help="License id, when neither the run nor its base model records one.")] = None,  # noqa: A002
    checkpoint_step: Annotated[int | None, typer.Option("--checkpoint-step", help="Step of the published checkpoint (default: best so far for interim, last for final).")] = None,
    as_json: JsonOption = False,
) -> None:
    """Render the card of a run and publish it (README.md + results/ccpo_summary.json + plot) in one commit."""
    from ccpo_cli.hub import publish_run

    result = publish_run(
        open_db(settings(ctx).db, must_exist=True), run, repo, status=status.value,
        staging=staging or require_inside(default_folder("ccpo-publish", run), Path.cwd(), "--run"), revision=revision, private=private, token=token,
        endpoint=endpoint, checkpoint=checkpoint, dry_run=dry_run, window_start=window_start,
        license=license, checkpoint_step=checkpoint_step, token_file=token_file, timeout=timeout,
        verl_agent_home=verl_agent_home, merged_dir=merged_dir,
    )
    if as_json:
        emit_json(result)
        return
    if result["dry_run"]:
        files = [entry["path_in_repo"] for commit in result["commits"] for entry in commit["files"]]
        info(ctx, f"dry run: nothing was sent; staged {len(files)} file(s) in {result['staging']}")
        stdout_console.print(result["plan_file"], markup=False)
    else:
        info(ctx, f"published {result['repo_id']}@{result['revision']} ({'merged into the remote README' if result['readme_merged'] else 'README replaced'})")
        stdout_console.print(result["commit_url"], markup=False)
