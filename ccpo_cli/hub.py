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
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
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
    DEFAULT_ANSWER_CAP,
    DEFAULT_RULE,
    HubCallError,
    HubClient,
    HubTimeouts,
    RetryRule,
    hub_timeouts,
    resolve_timeouts,
    resolve_token,
)
from ccpo_cli.hub_transport import uses_httpx
from ccpo_cli.names import check_repo_id, check_run_name
from ccpo_cli.paths import file_sha256

PUBLIC_ENDPOINT = "https://huggingface.co"
PLAN_FILE = "commit_plan.json"


# --- settings ----------------------------------------------------------------------------


def resolve_endpoint(explicit: str | None = None) -> str:
    """--endpoint, else HF_ENDPOINT, else the public Hub."""
    endpoint = explicit or os.environ.get("HF_ENDPOINT") or PUBLIC_ENDPOINT
    return endpoint.rstrip("/")


def default_private(status: str, explicit: bool | None) -> bool:
    """A new repository is private unless the user says --public: interim and final cards alike
    (a final card is still a claim the owner may want to check before the world reads it)."""
    return True if explicit is None else explicit


# --- the plan ----------------------------------------------------------------------------


def _file_entry(path_in_repo: str, local: Path, source: str) -> dict[str, Any]:
    return {
        "path_in_repo": path_in_repo,
        "size": local.stat().st_size,
        "sha256": file_sha256(local),
        "source": source,
    }


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
    clashes = sorted(
        set(found) & {README_PATH, "results/ccpo_summary.json", "results/learning_curve.png"}
    )
    if clashes:
        raise InvalidInput(
            f"--checkpoint {folder}: holds {', '.join(clashes)}, which the card commit owns"
        )
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
        commits.append(
            {
                "purpose": "checkpoint",
                "commit_message": _checkpoint_message(staged),
                "files": [
                    _file_entry(path, local, "checkpoint")
                    for path, local in checkpoint_files(checkpoint).items()
                ],
                "verify": "remote file list, sizes and sha256 at the commit it made must match the local folder",
                "tag": None
                if staged.context.summary["checkpoint_step"] is None
                else f"step-{staged.context.summary['checkpoint_step']}",
            }
        )
    commits.append(
        {
            "purpose": "card",
            "commit_message": _card_message(staged),
            "files": card_files,
            "parent_commit": "the head of the revision at publish time (a concurrent edit fails with 412)",
            "readme": "merged into the remote README's ccpo regions if the remote README exists and differs",
            "tag": "final" if staged.context.status == "final" else None,
        }
    )
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

# Every commit ccpo makes carries this line and its publication key in the description, so a
# commit whose answer was lost is found on the Hub afterwards instead of being made twice.
KEY_PREFIX = "ccpo-publication: "
# A concurrent edit (412) is met by re-reading the head and merging the card again, this often.
CARD_ATTEMPTS = 3


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


@dataclass
class RepoSession:
    """One repository on the Hub, as ccpo publishes to it: every call goes through one
    `HubClient` (limits, backoff), every commit carries its publication key."""

    client: HubClient
    revision: str = "main"
    log: Callable[[str], None] | None = None

    @property
    def api(self) -> Any:
        return self.client.api

    @property
    def repo_id(self) -> str:
        return self.client.repo_id

    def note(self, message: str) -> None:
        if self.log is not None:
            self.log(message)

    # -- the repository ---------------------------------------------------------------------
    def ensure_repo(self, private: bool) -> dict[str, Any]:
        """Create the repository (private unless asked otherwise) or find it; read its
        visibility back. An existing public one is refused unless --public was asked (nothing
        is uploaded: a checkpoint there would be public); an existing private one asked public
        is said, never changed."""
        url = self.client.call(
            "creating the repository",
            self.api.create_repo,
            self.repo_id,
            private=private,
            exist_ok=True,
        )
        info = self.client.call("reading the repository", self.api.model_info, self.repo_id)
        actual = getattr(info, "private", None)
        if private and actual is not True:
            raise InvalidInput(
                f"{self.repo_id} is {'public' if actual is False else 'of unknown visibility'} on the "
                "Hub; ccpo uploads to a public repository only with --public (nothing was uploaded)"
            )
        if self.revision != "main":
            self.client.call(
                f"creating branch {self.revision}",
                self.api.create_branch,
                self.repo_id,
                branch=self.revision,
                exist_ok=True,
            )
        result: dict[str, Any] = {"url": str(url), "private": actual, "requested_private": private}
        if actual is not None and bool(actual) != private:
            result["visibility_note"] = (
                f"{self.repo_id} is {'private' if actual else 'public'} on the Hub, not "
                f"{'private' if private else 'public'} as asked; --private/--public only set a new repository's "
                "visibility and ccpo leaves an existing one as it is (change it in the repository's settings)"
            )
            self.note(f"warning: {result['visibility_note']}")
        return result

    def head(self) -> Any:
        return self.client.call(
            "reading the repository", self.api.model_info, self.repo_id, revision=self.revision
        )

    def head_sha(self) -> str:
        sha = getattr(self.head(), "sha", None)
        if not isinstance(sha, str) or not sha:
            raise HubCallError(
                f"{self.repo_id}: reading the repository failed: the Hub's answer names no commit",
                kind="shape",
            )
        return sha

    def find_landed(self, key: str, since: str | None) -> str | None:
        """The commit carrying publication `key` made after `since` (newest first), if any."""
        commits = self.client.call(
            "listing the commits", self.api.list_repo_commits, self.repo_id, revision=self.revision
        )
        for commit in commits:
            if since is not None and commit.commit_id == since:
                return None
            if KEY_PREFIX + key in f"{commit.title or ''}\n{commit.message or ''}":
                return commit.commit_id
        return None

    # -- commits ----------------------------------------------------------------------------
    def commit(
        self,
        what: str,
        operations: list,
        *,
        message: str,
        key: str,
        since: str | None,
        parent: str | None = None,
        size_bytes: int = 0,
    ) -> tuple[str, bool]:
        """Make one commit; (its id, whether it was found landed after an error). The landed
        check of a model repository is its history: the commit carrying publication `key` after
        `since`. A 412 (the head moved) goes back to the caller, who merges."""

        def send() -> str:
            info = self.api.create_commit(
                self.repo_id,
                operations,
                commit_message=message,
                commit_description=KEY_PREFIX + key,
                revision=self.revision,
                parent_commit=parent,
            )
            return getattr(info, "oid", None)

        return self.client.commit(
            what, send, lambda: self.find_landed(key, since), size_bytes=size_bytes
        )

    def tag(self, name: str, commit_id: str, message: str) -> dict[str, Any]:
        """Tag `commit_id`; an existing tag is never moved (ccpo deletes nothing)."""
        try:
            self.client.call(
                f"tagging {name}",
                self.api.create_tag,
                self.repo_id,
                tag=name,
                revision=commit_id,
                tag_message=message,
                exist_ok=False,
            )
            return {"tag": name, "commit_id": commit_id, "created": True}
        except HubCallError as failure:
            if failure.status != 409:
                raise
        refs = self.client.call("listing the tags", self.api.list_repo_refs, self.repo_id)
        target = next((ref.target_commit for ref in (refs.tags or []) if ref.name == name), None)
        if target == commit_id:
            return {"tag": name, "commit_id": commit_id, "created": False}
        note = f"tag {name} already names commit {target}; left as it is (ccpo moves and deletes nothing)"
        self.note(f"{self.repo_id}: {note}")
        return {"tag": name, "commit_id": target, "created": False, "note": note}

    # -- checkpoints ------------------------------------------------------------------------
    def upload_checkpoint(
        self, files: dict[str, Path], *, message: str, key: str, tag: str | None
    ) -> dict[str, Any]:
        """The checkpoint in its own commit, verified by sha256 at the commit it made, then tagged."""
        from huggingface_hub import CommitOperationAdd

        since = self.head_sha()
        operations = [CommitOperationAdd(path, str(local)) for path, local in files.items()]
        size = sum(local.stat().st_size for local in files.values())
        commit_id, landed = self.commit(
            "uploading the checkpoint",
            operations,
            message=message,
            key=key,
            since=since,
            size_bytes=size,
        )
        verified = self.verify(commit_id, files)
        result = dict(verified, commit_id=commit_id, found_landed=landed)
        if tag is not None:
            result["tag"] = self.tag(tag, commit_id, message)
        return result

    def verify(self, revision: str, expected: dict[str, Path]) -> dict[str, Any]:
        """Every file at `revision` has the local file's size and sha256: the Hub's LFS sha256
        where it stores the file in LFS, else the file read back from that commit."""
        info = self.client.call(
            "listing the uploaded files",
            self.api.model_info,
            self.repo_id,
            revision=revision,
            files_metadata=True,
        )
        siblings = info.siblings or []
        remote = {sibling.rfilename: sibling for sibling in siblings}
        missing = sorted(path for path in expected if path not in remote)
        wrong_size = sorted(
            f"{path} ({remote[path].size} bytes on the Hub, {local.stat().st_size} here)"
            for path, local in expected.items()
            if path in remote and remote[path].size != local.stat().st_size
        )
        wrong_hash = []
        if not missing and not wrong_size:
            for path, local in expected.items():
                if self._remote_sha256(
                    remote[path], path, revision, local.stat().st_size
                ) != file_sha256(local):
                    wrong_hash.append(path)
        if missing or wrong_size or wrong_hash:
            problems = (
                (["missing: " + ", ".join(missing)] if missing else [])
                + (["size differs: " + "; ".join(wrong_size)] if wrong_size else [])
                + (["sha256 differs: " + ", ".join(wrong_hash)] if wrong_hash else [])
            )
            raise RemoteError(
                f"{self.repo_id}: checkpoint verification failed at {revision}: "
                + "; ".join(problems)
            )
        return {
            "verified_files": len(expected),
            "revision": revision,
            "verified_by": "sha256",
            "bytes": sum(local.stat().st_size for local in expected.values()),
        }

    def _remote_sha256(self, sibling: Any, path: str, revision: str, size: int) -> str:
        lfs = getattr(sibling, "lfs", None)
        recorded = (
            (lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None))
            if lfs
            else None
        )
        if isinstance(recorded, str) and recorded:
            return recorded
        return self.client.call(
            f"reading back {path}",
            _download_sha256,
            self.client,
            path,
            revision,
            transfer_bytes=size,
            transfer_cap=size + 1024,
        )


def _download_sha256(client: HubClient, path: str, revision: str) -> str:
    """The sha256 of one file as the Hub serves it at `revision`, streamed (never held in memory)."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(client.repo_id, path, revision=revision, endpoint=client.api.endpoint)
    headers = build_hf_headers(token=client.token, library_name="ccpo", library_version=__version__)
    digest = hashlib.sha256()
    session = get_session()
    if uses_httpx():  # huggingface_hub 1.x/2.x: httpx (a requests session's `stream` is a flag)
        with session.stream("GET", url, headers=headers, follow_redirects=True) as response:
            hf_raise_for_status(response)
            for block in response.iter_bytes():
                digest.update(block)
    else:  # 0.3x: requests
        response = session.get(url, headers=headers, stream=True, allow_redirects=True)
        try:
            hf_raise_for_status(response)
            for block in response.iter_content(1 << 20):
                digest.update(block)
        finally:
            response.close()
    return digest.hexdigest()


def open_session(
    repo_id: str,
    *,
    token: str,
    endpoint: str,
    timeouts: HubTimeouts,
    revision: str = "main",
    log: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] | None = None,
    rule: RetryRule = DEFAULT_RULE,
) -> RepoSession:
    from huggingface_hub import HfApi

    check_endpoint_supported(endpoint)
    api = HfApi(endpoint=endpoint, token=token, library_name="ccpo", library_version=__version__)
    client = HubClient(api, token, repo_id, timeouts, rule=rule, log=log)
    if sleep is not None:
        client.sleep = sleep
    return RepoSession(client, revision, log)


def remote_readme(session: RepoSession, revision_sha: str, scratch: Path) -> str:
    from huggingface_hub import hf_hub_download

    path = session.client.call(
        "reading the remote README",
        hf_hub_download,
        session.repo_id,
        README_PATH,
        revision=revision_sha,
        endpoint=session.api.endpoint,
        token=session.client.token,
        cache_dir=scratch,
        transfer_bytes=0,
        transfer_cap=DEFAULT_ANSWER_CAP,
    )
    return Path(path).read_text(encoding="utf-8")


def commit_card(
    session: RepoSession, staged: StagedCard, *, key: str, message: str
) -> dict[str, Any]:
    """Commit the card against the head ccpo read; a concurrent edit (412) is met by reading the
    head again and merging the card into the new README (the checkpoint is not sent again)."""
    from huggingface_hub import CommitOperationAdd

    for attempt in range(CARD_ATTEMPTS):
        head = session.head()
        head_sha = getattr(head, "sha", None)
        remote_names = {sibling.rfilename for sibling in (head.siblings or [])}
        readme_text, merged = staged.text, False
        if README_PATH in remote_names:
            remote_text = remote_readme(session, head_sha, staged.folder / ".hub-cache")
            if remote_text != staged.text:
                readme_text = merge_into_remote(remote_text, staged.text)
                merged = readme_text != staged.text
                # Only ccpo's own parts are checked: the hand-written prose around them is the owner's.
                problems = [
                    p
                    for p in lint_card(readme_text, allow_extra_keys=True)
                    if not p.startswith("body line")
                ]
                if problems:
                    raise InvalidInput(
                        f"{session.repo_id}: the README merged with the Hub's copy fails the lint: "
                        + "; ".join(problems)
                    )
        operations = [CommitOperationAdd(README_PATH, readme_text.encode("utf-8"))] + [
            CommitOperationAdd(path, str(local))
            for path, local in staged.files.items()
            if path != README_PATH
        ]
        size = len(readme_text.encode("utf-8")) + sum(
            local.stat().st_size for path, local in staged.files.items() if path != README_PATH
        )
        try:
            commit_id, landed = session.commit(
                "committing the card",
                operations,
                message=message,
                key=key,
                since=head_sha,
                parent=head_sha,
                size_bytes=size,
            )
        except HubCallError as failure:
            if failure.status == 412 and attempt + 1 < CARD_ATTEMPTS:
                session.note(
                    f"{session.repo_id}: the repository changed meanwhile (412); merging the card again"
                )
                continue
            raise
        return {
            "commit_id": commit_id,
            "parent_commit": head_sha,
            "readme_merged": merged,
            "card_hash": sha256_text(readme_text),
            "found_landed": landed,
            "commit_url": f"{session.api.endpoint.rstrip('/')}/{session.repo_id}/commit/{commit_id}",
            "files": [README_PATH] + [p for p in staged.files if p != README_PATH],
        }
    raise AssertionError("unreachable")


def publication_key(*parts: Any) -> str:
    """A publication's key on the Hub: the digest of what identifies it (run, kind, step, content)."""
    return hashlib.sha256("\x1f".join(str(part) for part in parts).encode("utf-8")).hexdigest()[:32]


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
    if not token:
        raise RemoteError(
            "no Hugging Face token: pass --token-file, --token -, set HF_TOKEN or run `hf auth login`"
        )
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
            message=_checkpoint_message(staged),
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
    result.update(commit_card(session, staged, key=key, message=_card_message(staged)))
    if context.status == "final":
        result["tag"] = session.tag("final", result["commit_id"], _card_message(staged))
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
    deadline: str | float | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Stage the card of `run`, then either write the commit plan (dry run, no network) or push
    it and record the publication in runs.db. Returns the plan or the publication.

    A verl `global_step_N` checkpoint is first merged by verl-agent's own merger and verified
    (locally, in a dry run too); the merged folder, with its ccpo-merge.json, is what goes up,
    and the card's checkpoint step is the checkpoint's."""
    check_run_name(run)
    check_repo_id(repo_id)
    timeouts = resolve_timeouts(timeout, deadline)
    endpoint = resolve_endpoint(endpoint)
    private = default_private(status, private)
    verl_checkpoint = _verl_checkpoint(checkpoint, merged_dir)
    if verl_checkpoint is not None:
        checkpoint_step = _checkpoint_step(verl_checkpoint, checkpoint_step)
    if checkpoint is None and checkpoint_step is not None:
        _refuse_unpublished_step(db, run, repo_id, checkpoint_step)
    staged = stage_card(
        db,
        run,
        Path(staging) / README_PATH,
        status=status,
        repo_id=repo_id,
        window_start=window_start,
        license=license,
        checkpoint_step=checkpoint_step,
        sending_checkpoint=checkpoint is not None,
        clobber_hint="choose another --staging folder",
    )
    merged = None
    if verl_checkpoint is not None:
        from ccpo_cli.backends.verl.checkpoint import merge_checkpoint

        merged = merge_checkpoint(
            verl_checkpoint, verl_agent_home=verl_agent_home, target=merged_dir
        )
        checkpoint = merged.folder
    plan = commit_plan(
        staged,
        repo_id=repo_id,
        revision=revision,
        private=private,
        endpoint=endpoint,
        checkpoint=checkpoint,
    )
    if merged is not None:
        plan["checkpoint_source"] = merged.summary()
    plan_path = write_plan(plan, staged.folder)
    if dry_run:
        return {"dry_run": True, "plan_file": str(plan_path), **plan}

    def restage(weights: dict[str, Any]) -> StagedCard:
        return stage_card(
            db,
            run,
            Path(staging) / README_PATH,
            status=status,
            repo_id=repo_id,
            window_start=window_start,
            license=license,
            checkpoint_step=checkpoint_step,
            weights=weights,
            force=True,
        )

    result = push(
        staged,
        repo_id=repo_id,
        revision=revision,
        private=private,
        token=resolve_token(token, token_file),
        endpoint=endpoint,
        checkpoint=checkpoint,
        timeouts=timeouts,
        log=log,
        restage=restage,
    )
    publication_id = store.record_publication(
        db,
        run,
        repo_id,
        revision=revision,
        commit_id=result["commit_id"],
        card_hash=result["card_hash"],
        status=status,
        checkpoint_step=staged.context.summary["checkpoint_step"] if checkpoint else None,
        url=result.get("commit_url"),
    )
    return {
        "dry_run": False,
        "publication_id": publication_id,
        "private": private,
        "endpoint": endpoint,
        "run": run,
        "status": status,
        "checkpoint_source": plan.get("checkpoint_source"),
        **result,
    }


def _refuse_unpublished_step(db: sqlite_utils.Database, run: str, repo_id: str, step: int) -> None:
    """Without --checkpoint nothing is uploaded: the card may name only weights already landed."""
    from ccpo_cli.cards.evidence import landed_checkpoint_steps

    if step not in landed_checkpoint_steps(db, run, repo_id):
        raise InvalidInput(
            f"--checkpoint-step {step}: no upload of that step's checkpoint to {repo_id} is recorded "
            "as landed, and the card would say it is published there; give --checkpoint to upload it"
        )


def _verl_checkpoint(checkpoint: Path | None, merged_dir: Path | None):
    """The verl checkpoint that --checkpoint names, None for a model folder."""
    from ccpo_cli.backends.verl.checkpoint import find_verl_checkpoint

    found = find_verl_checkpoint(checkpoint) if checkpoint is not None else None
    if found is None and merged_dir is not None:
        raise InvalidInput(
            f"--merged-dir applies to a verl checkpoint; --checkpoint {checkpoint} is not one"
        )
    return found


def _checkpoint_step(verl_checkpoint: Any, step: int | None) -> int | None:
    """The card's checkpoint step is the checkpoint's own; --checkpoint-step may only agree."""
    if verl_checkpoint.step is None:
        return step
    if step is not None and step != verl_checkpoint.step:
        raise InvalidInput(
            f"--checkpoint-step {step}, but {verl_checkpoint.folder} is the checkpoint of step "
            f"{verl_checkpoint.step}"
        )
    return verl_checkpoint.step
