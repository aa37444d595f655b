"""Publishing a card (and optionally a checkpoint) to the Hugging Face Hub.

One card publish is one `create_commit` holding README.md, results/ccpo_summary.json and the
learning curve, made with `parent_commit` set to the revision ccpo read: if someone edits the
repository in between, the Hub answers 412, and ccpo reads the head again and merges its card
into the new README (never the checkpoint again), a few times before it stops (exit 4). A
README that a person edited by hand keeps everything outside ccpo's fenced regions. A
checkpoint goes up in its own commit first, is verified at the commit the Hub returned (every
file's size and sha256) and tagged `step-N` before the card that describes it, and cites it,
is committed; a final card's commit is tagged `final`. Every commit carries its publication key
in the description, so after an error the history is read before anything is sent again and a
commit whose answer was lost is recognised, not duplicated. New repositories are private unless
asked otherwise; an existing one's visibility is read back and reported, never changed.
`--dry-run` stages the same files and writes the commit plan without touching the network.

The token is only ever handed to huggingface_hub; it is never printed, logged or stored, and
any error text is scrubbed of it before it reaches the user. How the Hub is reached (limits,
backoff, error messages) is hub_access.py; docs/publishing.md tells the whole story.

By job: the settings and the commit plan (pure, local files only) are hub_plan.py, the
repository session (its calls, keyed commits, tags, checkpoint upload and verification)
hub_repo.py; this module commits a card and runs the whole publish.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Unpack

import sqlite_utils

from ccpo_cli import store
from ccpo_cli.cards.fences import merge_into_remote
from ccpo_cli.cards.lint import lint_card
from ccpo_cli.cards.staging import README_PATH, StagedCard, sha256_text, stage_card
from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import (
    HubAccess,
    HubTimeouts,
    hub_timeouts,
    required_token,
    resolve_timeouts,
    resolve_token,
)
from ccpo_cli.hub_plan import (
    card_message,
    check_revision,
    checkpoint_files,
    checkpoint_message,
    commit_plan,
    default_private,
    resolve_endpoint,
    write_plan,
)
from ccpo_cli.hub_repo import (
    RepoSession,
    open_session,
    publication_key,
    remote_readme,
)
from ccpo_cli.names import check_repo_id, check_run_name
from ccpo_cli.paths import file_sha256
from ccpo_cli.vocabulary import FINAL, INTERIM


def commit_card(
    session: RepoSession, staged: StagedCard, *, key: str, message: str
) -> dict[str, Any]:
    """Commit the card against the head ccpo read; a concurrent edit (412) is met by reading the
    head again and merging the card into the new README (the checkpoint is not sent again)."""
    from huggingface_hub import CommitOperationAdd

    others = {path: local for path, local in staged.files.items() if path != README_PATH}

    def commit_on(head: Any) -> dict[str, Any]:
        head_sha = getattr(head, "sha", None)
        readme_text = _readme_on(session, staged, head)
        readme = readme_text.encode("utf-8")
        commit_id, landed = session.commit(
            "committing the card",
            [CommitOperationAdd(README_PATH, readme)]
            + [CommitOperationAdd(path, str(local)) for path, local in others.items()],
            message=message,
            key=key,
            since=head_sha,
            parent=head_sha,
            size_bytes=len(readme) + sum(local.stat().st_size for local in others.values()),
        )
        return {
            "commit_id": commit_id,
            "parent_commit": head_sha,
            "readme_merged": readme_text != staged.text,
            "card_hash": sha256_text(readme_text),
            "found_landed": landed,
            "commit_url": session.commit_url(commit_id),
            "files": [README_PATH, *others],
        }

    return session.on_fresh_head(commit_on, "merging the card again")


def _readme_on(session: RepoSession, staged: StagedCard, head: Any) -> str:
    """The README to commit on `head`: the staged card, merged into the Hub's README when the
    repository has one that differs (a hand-edited README keeps what lies outside ccpo's fences);
    a merge whose own parts fail the lint is refused (InvalidInput)."""
    if README_PATH not in {sibling.rfilename for sibling in (head.siblings or [])}:
        return staged.text
    remote_text = remote_readme(session, getattr(head, "sha", None), staged.folder / ".hub-cache")
    if remote_text == staged.text:
        return staged.text
    readme_text = merge_into_remote(remote_text, staged.text)
    # Only ccpo's own parts are checked: the hand-written prose around them is the owner's.
    problems = [
        p for p in lint_card(readme_text, allow_extra_keys=True) if not p.startswith("body line")
    ]
    if problems:
        raise InvalidInput(
            f"{session.repo_id}: the README merged with the Hub's copy fails the lint: "
            + "; ".join(problems)
        )
    return readme_text


def push(
    staged: StagedCard,
    *,
    repo_id: str,
    revision: str = "main",
    private: bool = True,
    token: str | None,
    endpoint: str,
    checkpoint: Path | None = None,
    timeouts: HubTimeouts | None = None,
    log: Callable[[str], None] | None = None,
    restage: Callable[[dict[str, Any]], StagedCard] | None = None,
) -> dict[str, Any]:
    """Create the repository if needed, upload the checkpoint in its own commit, verify it by
    sha256 and tag it `step-N`, then commit the card against the revision ccpo read; a final
    card's commit is tagged `final`. `restage(weights)` renders the card again citing the
    weights' commit (`repo_id`, `commit`, `revision`, `step`) once it is known. Returns what
    happened (no secrets)."""
    token = required_token(token)
    with hub_timeouts(timeouts or resolve_timeouts()):
        session = open_session(
            repo_id,
            token=token,
            endpoint=endpoint,
            timeouts=timeouts or resolve_timeouts(),
            revision=revision,
            log=log,
        )
        return _push(session, staged, private=private, checkpoint=checkpoint, restage=restage)


def _push(
    session: RepoSession,
    staged: StagedCard,
    *,
    private: bool,
    checkpoint: Path | None,
    restage: Callable[[dict[str, Any]], StagedCard] | None,
) -> dict[str, Any]:
    repo = session.ensure_repo(private)
    result: dict[str, Any] = {
        "repo_id": session.repo_id,
        "revision": session.revision,
        "url": repo["url"],
        "visibility": repo,
        "checkpoint": None,
    }
    context = staged.context
    step = context.summary["checkpoint_step"]
    if checkpoint is not None:
        files = checkpoint_files(checkpoint)
        key = publication_key(
            context.run, "checkpoint", step, *(file_sha256(p) for p in files.values())
        )
        result["checkpoint"] = session.upload_checkpoint(
            files,
            message=checkpoint_message(staged),
            key=key,
            tag=None if step is None else f"step-{step}",
        )
        weights = {
            "repo_id": session.repo_id,
            "commit": result["checkpoint"]["commit_id"],
            "revision": f"step-{step}" if step is not None else result["checkpoint"]["commit_id"],
            "step": step,
        }
        if restage is not None:
            staged = restage(weights)
    key = publication_key(
        context.run,
        "card",
        context.status,
        staged.card_hash,
        (result["checkpoint"] or {}).get("commit_id"),
    )
    result.update(commit_card(session, staged, key=key, message=card_message(staged)))
    if context.status == FINAL:
        result["tag"] = session.tag(FINAL, result["commit_id"], card_message(staged))
    return result


# --- the whole publish, as `ccpo publish` runs it ---------------------------------------


def publish_run(
    db: sqlite_utils.Database,
    run: str,
    repo_id: str,
    *,
    status: str = INTERIM,
    staging: Path,
    revision: str = "main",
    private: bool | None = None,
    checkpoint: Path | None = None,
    dry_run: bool = False,
    window_start: int | None = None,
    license: str | None = None,  # noqa: A002 - the metadata key's name
    checkpoint_step: int | None = None,
    verl_agent_home: Path | None = None,
    merged_dir: Path | None = None,
    log: Callable[[str], None] | None = None,
    **access: Unpack[HubAccess],
) -> dict[str, Any]:
    """Stage the card of `run`, then either write the commit plan (dry run, no network) or push
    it and record the publication in runs.db. Returns the plan or the publication.

    A verl `global_step_N` checkpoint is first merged by verl-agent's own merger and verified
    (locally, in a dry run too); the merged folder, with its ccpo-merge.json, is what goes up,
    and the card's checkpoint step is the checkpoint's."""
    where = _repository_settings(run, repo_id, revision, status, private, access.get("endpoint"))
    timeouts = resolve_timeouts(access.get("timeout"), access.get("deadline"))
    verl, checkpoint_step = _checked_checkpoint(
        db, run, repo_id, checkpoint, checkpoint_step, merged_dir
    )
    stage = _card_stager(db, run, staging, status, repo_id, window_start, license, checkpoint_step)
    staged = stage(
        sending_checkpoint=checkpoint is not None, clobber_hint="choose another --staging folder"
    )
    plan, checkpoint = _written_plan(staged, verl, checkpoint, verl_agent_home, merged_dir, where)
    if dry_run:
        return {"dry_run": True, **plan}
    result = push(
        staged,
        token=resolve_token(access.get("token"), access.get("token_file")),
        checkpoint=checkpoint,
        timeouts=timeouts,
        log=log,
        restage=lambda weights: stage(weights=weights, force=True),
        **where,
    )
    return _recorded(db, run, status, staged, plan, result, sent_checkpoint=checkpoint is not None)


def _card_stager(
    db: sqlite_utils.Database,
    run: str,
    staging: Path,
    status: str,
    repo_id: str,
    window_start: int | None,
    license: str | None,  # noqa: A002 - the metadata key's name
    checkpoint_step: int | None,
) -> Callable[..., StagedCard]:
    """How one publish stages its card: now, and again once the weights' commit is known (the
    card then cites it), always with the same run, status, repository, window, license and step."""
    return partial(
        stage_card,
        db,
        run,
        Path(staging) / README_PATH,
        status=status,
        repo_id=repo_id,
        window_start=window_start,
        license=license,
        checkpoint_step=checkpoint_step,
    )


def _repository_settings(
    run: str, repo_id: str, revision: str, status: str, private: bool | None, endpoint: str | None
) -> dict[str, Any]:
    """Where one publish goes, its names checked: the repository, revision, visibility (private
    unless asked) and Hub address, as its plan states them and its push uses them."""
    check_run_name(run)
    check_repo_id(repo_id)
    check_revision(revision)
    return dict(
        repo_id=repo_id,
        revision=revision,
        private=default_private(status, private),
        endpoint=resolve_endpoint(endpoint),
    )


def _written_plan(
    staged: StagedCard,
    verl: Any,
    checkpoint: Path | None,
    verl_agent_home: Path | None,
    merged_dir: Path | None,
    where: dict[str, Any],
) -> tuple[dict[str, Any], Path | None]:
    """The commit plan, written beside the staged card (a dry run's answer, with its file's
    path first), and the checkpoint folder that goes up: a verl checkpoint is merged first, in a
    dry run too, so the plan lists the merged files and names their source."""
    merged = None
    if verl is not None:
        from ccpo_cli.backends.verl.checkpoint import merge_checkpoint

        merged = merge_checkpoint(verl, verl_agent_home=verl_agent_home, target=merged_dir)
        checkpoint = merged.folder
    plan = commit_plan(staged, checkpoint=checkpoint, **where)
    if merged is not None:
        plan["checkpoint_source"] = merged.summary()
    return {"plan_file": str(write_plan(plan, staged.folder)), **plan}, checkpoint


def _recorded(
    db: sqlite_utils.Database,
    run: str,
    status: str,
    staged: StagedCard,
    plan: dict[str, Any],
    result: dict[str, Any],
    *,
    sent_checkpoint: bool,
) -> dict[str, Any]:
    """The publication recorded in runs.db, and what `ccpo publish` reports of it."""
    publication_id = store.record_publication(
        db,
        run,
        plan["repo_id"],
        revision=plan["revision"],
        commit_id=result["commit_id"],
        card_hash=result["card_hash"],
        status=status,
        checkpoint_step=staged.context.summary["checkpoint_step"] if sent_checkpoint else None,
        url=result.get("commit_url"),
    )
    return {
        "dry_run": False,
        "publication_id": publication_id,
        "private": plan["private"],
        "endpoint": plan["endpoint"],
        "run": run,
        "status": status,
        "checkpoint_source": plan.get("checkpoint_source"),
        **result,
    }


def _checked_checkpoint(
    db: sqlite_utils.Database,
    run: str,
    repo_id: str,
    checkpoint: Path | None,
    step: int | None,
    merged_dir: Path | None,
) -> tuple[Any, int | None]:
    """The verl checkpoint --checkpoint names (None for a model folder or none) and the card's
    checkpoint step, checked before anything is staged: --merged-dir applies to a verl
    checkpoint only; the card's step is a verl checkpoint's own (--checkpoint-step may only
    agree); without --checkpoint nothing is uploaded, so the card may name only weights already
    landed."""
    from ccpo_cli.backends.verl.checkpoint import find_verl_checkpoint
    from ccpo_cli.cards.evidence import landed_checkpoint_steps

    verl = find_verl_checkpoint(checkpoint) if checkpoint is not None else None
    if verl is None and merged_dir is not None:
        raise InvalidInput(
            f"--merged-dir applies to a verl checkpoint; --checkpoint {checkpoint} is not one"
        )
    if verl is not None and verl.step is not None:
        if step is not None and step != verl.step:
            raise InvalidInput(
                f"--checkpoint-step {step}, but {verl.folder} is the checkpoint of step {verl.step}"
            )
        step = verl.step
    if (
        checkpoint is None
        and step is not None
        and step not in landed_checkpoint_steps(db, run, repo_id)
    ):
        raise InvalidInput(
            f"--checkpoint-step {step}: no upload of that step's checkpoint to {repo_id} is recorded "
            "as landed, and the card would say it is published there; give --checkpoint to upload it"
        )
    return verl, step
