"""One model repository on the Hugging Face Hub, as ccpo publishes to it.

`RepoSession` makes every call through one `HubClient` (limits, backoff, error mapping:
hub_access.py): it creates or finds the repository and reads its visibility back (an existing
public one is refused without `--public`, never changed), reads the head, makes commits that
carry their publication key (`KEY_PREFIX` and `publication_key`) so that after an error the
history is read and a commit whose answer was lost is recognised, not made twice, tags without
ever moving a tag, and uploads a checkpoint in its own commit verified file by file by sha256
at the commit the Hub returned. `remote_readme` reads the README a card is merged into. The
token is only ever handed to huggingface_hub.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from ccpo_cli import __version__
from ccpo_cli.cards.staging import README_PATH
from ccpo_cli.errors import InvalidInput, RemoteError
from ccpo_cli.hub_access import (
    DEFAULT_ANSWER_CAP,
    DEFAULT_RULE,
    HubCallError,
    HubClient,
    HubTimeouts,
    RetryRule,
)
from ccpo_cli.paths import file_sha256

# Every commit ccpo makes carries this line and its publication key in the description, so a
# commit whose answer was lost is found on the Hub afterwards instead of being made twice.
KEY_PREFIX = "ccpo-publication: "
# A commit made against a head that moved meanwhile (412) is tried again this often, the
# history searched for its key each time.
HEAD_ATTEMPTS = 3
T = TypeVar("T")


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


class RepositoryExposed(InvalidInput):
    """The repository is public (or of unknown visibility) on the Hub while private was asked:
    nothing more is uploaded (exit 3, a refused operation)."""


@dataclass
class RepoSession:
    """One repository on the Hub, as ccpo publishes to it: every call goes through one
    `HubClient` (limits, backoff), every commit carries its publication key.

    One publisher per repository and run, whatever its staging folder or database copy: before
    every commit of the outbox (`landed_first`) the history is searched for the commit's publication key (a key digests the
    run's uid and the content, so any publisher of the same thing computes the same key), and
    the commit is made against the head just read (`parent_commit`). Two publishers racing meet
    the Hub's 412, read again and find the other's commit; a commit a killed process sent that
    the Hub applies late is refused by the same parent check once anything landed after it.
    Every head read also reads the repository's visibility: once private was asked
    (`ensure_repo`), a repository found public stops every upload (`RepositoryExposed`)."""

    client: HubClient
    revision: str = "main"
    log: Callable[[str], None] | None = None
    private_required: bool = False
    # Search the history for a commit's key before sending it (the outbox's publications, whose
    # keys digest the run's uid and content; a one-off `ccpo publish` sends again on request).
    landed_first: bool = False

    @property
    def repo_id(self) -> str:
        return self.client.repo_id

    def note(self, message: str) -> None:
        if self.log is not None:
            self.log(message)

    def commit_url(self, commit_id: str) -> str:
        return f"{self.client.api.endpoint.rstrip('/')}/{self.repo_id}/commit/{commit_id}"

    def call(self, what: str, method: str, **kwargs: Any) -> Any:
        """`HfApi.<method>(repo_id, **kwargs)` about this repository, as one `HubClient.call`."""
        return self.client.call(what, getattr(self.client.api, method), self.repo_id, **kwargs)

    # -- the repository ---------------------------------------------------------------------
    def ensure_repo(self, private: bool) -> dict[str, Any]:
        """Create the repository (private unless asked otherwise) or find it; read its
        visibility back. An existing public one is refused unless --public was asked (nothing
        is uploaded: a checkpoint there would be public); an existing private one asked public
        is said, never changed."""
        url = self.call("creating the repository", "create_repo", private=private, exist_ok=True)
        info = self.call("reading the repository", "model_info")
        actual = getattr(info, "private", None)
        self.private_required = private
        self._guard_visibility(info, "nothing was uploaded")
        if self.revision != "main":
            self.call(
                f"creating branch {self.revision}",
                "create_branch",
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

    def _guard_visibility(self, info: Any, done: str) -> None:
        actual = getattr(info, "private", None)
        if self.private_required and actual is not True:
            raise RepositoryExposed(
                f"{self.repo_id} is {'public' if actual is False else 'of unknown visibility'} on the "
                f"Hub; ccpo uploads to a public repository only with --public ({done})"
            )

    def head(self) -> Any:
        """The head of the revision (and, on the same answer, the visibility check that precedes
        every upload)."""
        info = self.call("reading the repository", "model_info", revision=self.revision)
        self._guard_visibility(info, "uploads stopped: nothing more is sent there")
        return info

    def head_sha(self) -> str:
        return self._named_commit(self.head())

    def _named_commit(self, head: Any) -> str:
        sha = getattr(head, "sha", None)
        if not isinstance(sha, str) or not sha:
            raise HubCallError(
                f"{self.repo_id}: reading the repository failed: the Hub's answer names no commit",
                kind="shape",
            )
        return sha

    def on_fresh_head(self, commit: Callable[[Any], T], again: str) -> T:
        """`commit(head)` commits against the head just read; when the head moved meanwhile (412)
        the head is read again and `commit` run on it, at most HEAD_ATTEMPTS times in all, each
        retry said as `again`. The one place a moved head is met, for cards and checkpoints."""
        for attempt in range(HEAD_ATTEMPTS):
            head = self.head()
            try:
                return commit(head)
            except HubCallError as failure:
                if failure.status != 412 or attempt + 1 == HEAD_ATTEMPTS:
                    raise
                self.note(f"{self.repo_id}: the repository changed meanwhile (412); {again}")
        raise AssertionError("unreachable")  # the loop returns or raises

    def find_landed(self, key: str, since: str | None) -> str | None:
        """The commit carrying publication `key` made after `since` (newest first), if any."""
        commits = self.call("listing the commits", "list_repo_commits", revision=self.revision)
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
        `since`. With `landed_first`, the whole history is searched for `key` before it is sent:
        a commit another publisher (or a killed earlier attempt) landed is returned, not made again. A 412 (the
        head moved) goes back to the caller, who reads the head again and tries again."""
        found = self.find_landed(key, None) if self.landed_first else None
        if found is not None:
            self.note(f"{self.repo_id}: {what}: already on the Hub ({found[:12]}); not sent again")
            return found, True

        def send() -> str:
            info = self.client.api.create_commit(
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
            self.call(
                f"tagging {name}",
                "create_tag",
                tag=name,
                revision=commit_id,
                tag_message=message,
                exist_ok=False,
            )
            return {"tag": name, "commit_id": commit_id, "created": True}
        except HubCallError as failure:
            if failure.status != 409:
                raise
        refs = self.call("listing the tags", "list_repo_refs")
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

        operations = [CommitOperationAdd(path, str(local)) for path, local in files.items()]
        size = sum(local.stat().st_size for local in files.values())

        def upload(head: Any) -> tuple[str, bool]:
            since = self._named_commit(head)
            return self.commit(
                "uploading the checkpoint",
                operations,
                message=message,
                key=key,
                since=since,
                parent=since,
                size_bytes=size,
            )

        commit_id, landed = self.on_fresh_head(upload, "reading it again")
        verified = self.verify(commit_id, files)
        result = dict(verified, commit_id=commit_id, found_landed=landed)
        if tag is not None:
            result["tag"] = self.tag(tag, commit_id, message)
        return result

    def verify(self, revision: str, expected: dict[str, Path]) -> dict[str, Any]:
        """Every file at `revision` has the local file's size and sha256: the Hub's LFS sha256
        where it stores the file in LFS, else the file read back from that commit."""
        info = self.call(
            "listing the uploaded files", "model_info", revision=revision, files_metadata=True
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
    digest = hashlib.sha256()
    with contextlib.closing(client.file_blocks(path, revision)) as blocks:
        for block in blocks:
            digest.update(block)
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
        endpoint=session.client.api.endpoint,
        token=session.client.token,
        cache_dir=scratch,
        transfer_bytes=0,
        transfer_cap=DEFAULT_ANSWER_CAP,
    )
    return Path(path).read_text(encoding="utf-8")


def publication_key(*parts: Any) -> str:
    """A publication's key on the Hub: the digest of what identifies it (run, kind, step, content)."""
    return hashlib.sha256("\x1f".join(str(part) for part in parts).encode("utf-8")).hexdigest()[:32]
