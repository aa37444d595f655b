"""Publishing a card (and optionally a checkpoint) to the Hugging Face Hub.

One card publish is one `create_commit` holding README.md, results/ccpo_summary.json and the
learning curve, made with `parent_commit` set to the revision ccpo read: if someone edits the
repository in between, the Hub answers 412 and ccpo stops (exit 4) instead of overwriting the
edit. A README that a person edited by hand keeps everything outside ccpo's fenced regions. A
checkpoint goes up in its own commit first and is verified (file list and sizes) before the
card that describes it is committed. `--dry-run` stages the same files and writes the commit
plan without touching the network.

The token is only ever handed to huggingface_hub; it is never printed, logged or stored, and
any error text is scrubbed of it before it reaches the user.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli import __version__, store
from ccpo_cli.cards.fences import merge_into_remote
from ccpo_cli.cards.lint import lint_card
from ccpo_cli.cards.staging import README_PATH, StagedCard, sha256_text, stage_card
from ccpo_cli.errors import InvalidInput, RemoteError
from ccpo_cli.hub_access import (  # noqa: F401 - resolve_token is part of this module's API
    HubTimeouts,
    hub_timeouts,
    remote_error,
    resolve_timeouts,
    resolve_token,
    transport_errors,
)
from ccpo_cli.names import check_repo_id, check_run_name

PUBLIC_ENDPOINT = "https://huggingface.co"
PLAN_FILE = "commit_plan.json"


# --- settings ----------------------------------------------------------------------------


def resolve_endpoint(explicit: str | None = None) -> str:
    """--endpoint, else HF_ENDPOINT, else the public Hub."""
    endpoint = explicit or os.environ.get("HF_ENDPOINT") or PUBLIC_ENDPOINT
    return endpoint.rstrip("/")


def default_private(status: str, explicit: bool | None) -> bool:
    """Interim cards go to private repositories unless the user says otherwise."""
    return explicit if explicit is not None else status == "interim"


# --- the plan ----------------------------------------------------------------------------


def _file_entry(path_in_repo: str, local: Path, source: str) -> dict[str, Any]:
    digest = hashlib.sha256()
    with open(local, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return {"path_in_repo": path_in_repo, "size": local.stat().st_size, "sha256": digest.hexdigest(),
            "source": source}


def checkpoint_files(folder: Path) -> dict[str, Path]:
    """Files of a model folder by their path in the repository (hidden files and folders skipped)."""
    if not folder.is_dir():
        raise InvalidInput(f"--checkpoint {folder}: not a folder")
    found = {}
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in relative.parts):
            found[relative.as_posix()] = path
    if not found:
        raise InvalidInput(f"--checkpoint {folder}: the folder holds no files")
    clashes = sorted(set(found) & {README_PATH, "results/ccpo_summary.json", "results/learning_curve.png"})
    if clashes:
        raise InvalidInput(f"--checkpoint {folder}: holds {', '.join(clashes)}, which the card commit owns")
    return found


def commit_plan(
    staged: StagedCard,
    *,
    repo_id: str,
    revision: str,
    private: bool,
    endpoint: str,
    checkpoint: Path | None = None,
) -> dict[str, Any]:
    """What a publish would do: the commits, their files with sizes and sha256, the repository
    settings. Pure: it reads local files only."""
    card_files = [_file_entry(path, local, "card") for path, local in staged.files.items()]
    commits = []
    if checkpoint is not None:
        commits.append({
            "purpose": "checkpoint",
            "commit_message": _checkpoint_message(staged),
            "files": [_file_entry(path, local, "checkpoint") for path, local in checkpoint_files(checkpoint).items()],
            "verify": "remote file list and sizes must match the local folder",
        })
    commits.append({
        "purpose": "card",
        "commit_message": _card_message(staged),
        "files": card_files,
        "parent_commit": "the head of the revision at publish time (a concurrent edit fails with 412)",
        "readme": "merged into the remote README's ccpo regions if the remote README exists and differs",
    })
    return {
        "repo_id": repo_id,
        "revision": revision,
        "private": private,
        "endpoint": endpoint,
        "run": staged.context.run,
        "status": staged.context.status,
        "card_hash": staged.card_hash,
        "checkpoint_step": staged.context.summary["checkpoint_step"],
        "staging": str(staged.folder),
        "commits": commits,
    }


def _card_message(staged: StagedCard) -> str:
    context = staged.context
    summary = context.summary
    if context.status == "interim":
        return f"ccpo: interim card for {context.run} (step {summary['last_step']} of {summary['total_steps']})"
    return f"ccpo: final card for {context.run}"


def _checkpoint_message(staged: StagedCard) -> str:
    return f"ccpo: checkpoint of {staged.context.run} at step {staged.context.summary['checkpoint_step']}"


def write_plan(plan: dict[str, Any], folder: Path) -> Path:
    path = folder / PLAN_FILE
    path.write_text(json.dumps(plan, indent=2, sort_keys=True) + "\n")
    return path


# --- talking to the Hub ------------------------------------------------------------------


@dataclass
class _Hub:
    api: Any
    token: str | None
    repo_id: str

    def call(self, what: str, function, *args, **kwargs):
        from huggingface_hub.errors import HfHubHTTPError

        try:
            return function(*args, **kwargs)
        except (HfHubHTTPError, *transport_errors(), OSError, ValueError) as error:
            raise remote_error(error, self.token, self.repo_id, what) from None


def check_endpoint_supported(endpoint: str) -> None:
    """huggingface_hub 0.3x (the line verl-agent's transformers needs) parses the URLs the Hub
    returns against HF_ENDPOINT as read at import, so another address given only as --endpoint
    fails after the upload; say so before anything is sent."""
    import huggingface_hub
    from huggingface_hub import constants

    if int(huggingface_hub.__version__.split(".")[0]) >= 1:
        return
    if endpoint.rstrip("/") != constants.ENDPOINT.rstrip("/"):
        raise InvalidInput(
            f"--endpoint {endpoint}: huggingface_hub {huggingface_hub.__version__} takes the Hub address only from "
            f"HF_ENDPOINT at start-up; run with HF_ENDPOINT={endpoint} instead"
        )


def _remote_readme(hub: _Hub, revision_sha: str, scratch: Path) -> str | None:
    from huggingface_hub import hf_hub_download

    path = hub.call(
        "reading the remote README", hf_hub_download, hub.repo_id, README_PATH, revision=revision_sha,
        endpoint=hub.api.endpoint, token=hub.token, cache_dir=scratch,
    )
    return Path(path).read_text(encoding="utf-8")


def verify_remote_files(hub: _Hub, revision: str, expected: dict[str, Path]) -> dict[str, Any]:
    """Compare the remote file list and sizes at `revision` with the local files."""
    info = hub.call("listing the uploaded files", hub.api.model_info, hub.repo_id, revision=revision, files_metadata=True)
    remote = {sibling.rfilename: sibling.size for sibling in (info.siblings or [])}
    missing = sorted(path for path in expected if path not in remote)
    wrong_size = sorted(
        f"{path} ({remote[path]} bytes on the Hub, {local.stat().st_size} here)"
        for path, local in expected.items()
        if path in remote and remote[path] != local.stat().st_size
    )
    if missing or wrong_size:
        problems = (["missing: " + ", ".join(missing)] if missing else []) + (
            ["size differs: " + "; ".join(wrong_size)] if wrong_size else [])
        raise RemoteError(f"{hub.repo_id}: checkpoint verification failed at {revision}: " + "; ".join(problems))
    return {"verified_files": len(expected), "revision": revision,
            "bytes": sum(local.stat().st_size for local in expected.values())}


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
) -> dict[str, Any]:
    """Create the repository if needed, upload and verify the checkpoint, then commit the card
    in one commit against the revision ccpo read. Returns what happened (no secrets)."""
    if not token:
        raise RemoteError("no Hugging Face token: pass --token-file, --token -, set HF_TOKEN or run `hf auth login`")
    with hub_timeouts(timeouts or resolve_timeouts()):
        return _push(staged, repo_id=repo_id, revision=revision, private=private, token=token,
                     endpoint=endpoint, checkpoint=checkpoint)


def _push(staged: StagedCard, *, repo_id: str, revision: str, private: bool, token: str, endpoint: str,
          checkpoint: Path | None) -> dict[str, Any]:
    from huggingface_hub import CommitOperationAdd, HfApi

    check_endpoint_supported(endpoint)
    api = HfApi(endpoint=endpoint, token=token, library_name="ccpo", library_version=__version__)
    hub = _Hub(api, token, repo_id)
    repo_url = hub.call("creating the repository", api.create_repo, repo_id, private=private, exist_ok=True)
    if revision != "main":
        hub.call(f"creating branch {revision}", api.create_branch, repo_id, branch=revision, exist_ok=True)

    result: dict[str, Any] = {"repo_id": repo_id, "revision": revision, "url": str(repo_url), "checkpoint": None}
    if checkpoint is not None:
        files = checkpoint_files(checkpoint)
        operations = [CommitOperationAdd(path, str(local)) for path, local in files.items()]
        info = hub.call("uploading the checkpoint", api.create_commit, repo_id, operations,
                        commit_message=_checkpoint_message(staged), revision=revision)
        result["checkpoint"] = dict(verify_remote_files(hub, info.oid, files), commit_id=info.oid)

    head = hub.call("reading the repository", api.model_info, repo_id, revision=revision)
    remote_names = {sibling.rfilename for sibling in (head.siblings or [])}
    readme_text, merged = staged.text, False
    if README_PATH in remote_names:
        remote_text = _remote_readme(hub, head.sha, staged.folder / ".hub-cache")
        if remote_text != staged.text:
            readme_text = merge_into_remote(remote_text, staged.text)
            merged = readme_text != staged.text
            # Only ccpo's own parts are checked: the hand-written prose around them is the owner's.
            problems = [p for p in lint_card(readme_text, allow_extra_keys=True) if not p.startswith("body line")]
            if problems:
                raise InvalidInput(f"{repo_id}: the README merged with the Hub's copy fails the lint: " + "; ".join(problems))
    operations = [CommitOperationAdd(README_PATH, readme_text.encode("utf-8"))] + [
        CommitOperationAdd(path, str(local)) for path, local in staged.files.items() if path != README_PATH
    ]
    info = hub.call("committing the card", api.create_commit, repo_id, operations,
                    commit_message=_card_message(staged), revision=revision, parent_commit=head.sha)
    result.update(commit_id=info.oid, commit_url=str(info.commit_url), parent_commit=head.sha,
                  readme_merged=merged, card_hash=sha256_text(readme_text),
                  files=[README_PATH] + [p for p in staged.files if p != README_PATH])
    return result


# --- the whole publish, as `ccpo publish` runs it ---------------------------------------


def publish_run(
    db: sqlite_utils.Database,
    run: str,
    repo_id: str,
    *,
    status: str = "interim",
    staging: Path,
    revision: str = "main",
    private: bool | None = None,
    token: str | None = None,
    endpoint: str | None = None,
    checkpoint: Path | None = None,
    dry_run: bool = False,
    window_start: int | None = None,
    license: str | None = None,  # noqa: A002 - the metadata key's name
    checkpoint_step: int | None = None,
    token_file: Path | None = None,
    timeout: str | None = None,
    verl_agent_home: Path | None = None,
    merged_dir: Path | None = None,
) -> dict[str, Any]:
    """Stage the card of `run`, then either write the commit plan (dry run, no network) or push
    it and record the publication in runs.db. Returns the plan or the publication.

    A verl `global_step_N` checkpoint is first merged by verl-agent's own merger and verified
    (locally, in a dry run too); the merged folder, with its ccpo-merge.json, is what goes up,
    and the card's checkpoint step is the checkpoint's."""
    check_run_name(run)
    check_repo_id(repo_id)
    timeouts = resolve_timeouts(timeout)
    endpoint = resolve_endpoint(endpoint)
    private = default_private(status, private)
    verl_checkpoint = _verl_checkpoint(checkpoint, merged_dir)
    if verl_checkpoint is not None:
        checkpoint_step = _checkpoint_step(verl_checkpoint, checkpoint_step)
    staged = stage_card(db, run, Path(staging) / README_PATH, status=status, repo_id=repo_id,
                        window_start=window_start, license=license, checkpoint_step=checkpoint_step,
                        clobber_hint="choose another --staging folder")
    merged = None
    if verl_checkpoint is not None:
        from ccpo_cli.backends.verl.checkpoint import merge_checkpoint

        merged = merge_checkpoint(verl_checkpoint, verl_agent_home=verl_agent_home, target=merged_dir)
        checkpoint = merged.folder
    plan = commit_plan(staged, repo_id=repo_id, revision=revision, private=private, endpoint=endpoint,
                       checkpoint=checkpoint)
    if merged is not None:
        plan["checkpoint_source"] = merged.summary()
    plan_path = write_plan(plan, staged.folder)
    if dry_run:
        return {"dry_run": True, "plan_file": str(plan_path), **plan}
    result = push(staged, repo_id=repo_id, revision=revision, private=private,
                  token=resolve_token(token, token_file), endpoint=endpoint, checkpoint=checkpoint,
                  timeouts=timeouts)
    publication_id = store.record_publication(
        db, run, repo_id, revision=revision, commit_id=result["commit_id"], card_hash=result["card_hash"],
        status=status, checkpoint_step=staged.context.summary["checkpoint_step"] if checkpoint else None,
        url=result.get("commit_url"),
    )
    return {"dry_run": False, "publication_id": publication_id, "private": private, "endpoint": endpoint,
            "run": run, "status": status, "checkpoint_source": plan.get("checkpoint_source"), **result}


def _verl_checkpoint(checkpoint: Path | None, merged_dir: Path | None):
    """The verl checkpoint that --checkpoint names, None for a model folder."""
    from ccpo_cli.backends.verl.checkpoint import find_verl_checkpoint

    found = find_verl_checkpoint(checkpoint) if checkpoint is not None else None
    if found is None and merged_dir is not None:
        raise InvalidInput(f"--merged-dir applies to a verl checkpoint; --checkpoint {checkpoint} is not one")
    return found


def _checkpoint_step(verl_checkpoint: Any, step: int | None) -> int | None:
    """The card's checkpoint step is the checkpoint's own; --checkpoint-step may only agree."""
    if verl_checkpoint.step is None:
        return step
    if step is not None and step != verl_checkpoint.step:
        raise InvalidInput(f"--checkpoint-step {step}, but {verl_checkpoint.folder} is the checkpoint of step "
                           f"{verl_checkpoint.step}")
    return verl_checkpoint.step
