"""`ccpo sync push/pull`: runs shared between machines through a Hub dataset repository.

The dataset is an append-only log of parquet parts (`data/HOST/RUN/TABLE-MS-UUID.parquet`,
written and read by `ccpo_cli/store/sync.py`). A push is one commit of the rows this database
has that the dataset does not (nothing is ever rewritten, so pushes of several machines never
touch the same file); it carries no `parent_commit`, which for disjoint files would only make
writers fail each other. The Hub applies one commit per repository at a time and answers a
commit that races another with 409: ccpo retries it, as it retries 429 and 5xx answers and
dropped connections, with exponential backoff and jitter, within a bounded number of attempts
and an overall deadline (`RetryPolicy`, `SyncLimits`). A new dataset is private unless
`--public` is given, and ccpo refuses to push to an existing public one without it.

A pull reads one pinned dataset commit (`--revision`, default: the commit `main` points at when
the pull starts), downloads the parts it has not merged yet, each bounded in size and time, and
merges them part by part; it records the commit in `sync_log` and, per merged row, in
`sync_items`, which is where a card finds the commit its pulled rows came from.

Tokens, timeouts and the mapping of Hub errors to one-line messages are `ccpo_cli/hub_access.py`'s.
"""

from __future__ import annotations

import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli import __version__
from ccpo_cli.errors import CcpoError, InvalidInput, RemoteError
from ccpo_cli.hub_access import (
    HubTimeouts,
    hub_timeouts,
    is_timeout,
    remote_error,
    resolve_timeouts,
    resolve_token,
    scrub,
    transport_errors,
)
from ccpo_cli.names import check_repo_id

REPO_TYPE = "dataset"
# Answers worth another attempt: a commit racing another (409), rate limits, server trouble.
RETRYABLE_STATUS = frozenset({409, 429, 500, 502, 503, 504})
_MIB = 1 << 20


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per call and the backoff between them: the n-th wait is about
    first_delay_s · 2^n (at most max_delay_s, or the Hub's Retry-After when it sends one, also
    capped), times a random factor in [0.5, 1.5) so that machines that collided do not collide again."""

    attempts: int = 8
    first_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def wait(self, attempt: int, retry_after: float | None = None) -> float:
        base = min(self.max_delay_s, retry_after if retry_after is not None else self.first_delay_s * 2 ** attempt)
        return base * (0.5 + random.random())


@dataclass(frozen=True)
class SyncLimits:
    """Bounds of one push or pull: the whole of it must end within `deadline_s`; a push sends at
    most `max_push_bytes`; a pull downloads at most `max_pull_bytes`, no part over
    `max_part_bytes`, and lists at most `max_parts` parts."""

    deadline_s: float = 900.0
    max_push_bytes: int = 2048 * _MIB
    max_pull_bytes: int = 8192 * _MIB
    max_part_bytes: int = 512 * _MIB
    max_parts: int = 100_000


class _Deadline:
    def __init__(self, seconds: float, repo_id: str):
        self.end, self.seconds, self.repo_id = time.monotonic() + seconds, seconds, repo_id

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def check(self, what: str) -> None:
        if self.remaining() <= 0:
            raise RemoteError(f"{self.repo_id}: {what}: the sync's deadline of {self.seconds:g} s passed "
                              "(raise --deadline for a slow connection); nothing more was sent or merged")


class _Status(Exception):
    """A non-2xx answer to a download, with what the retry loop needs."""

    def __init__(self, status: int, retry_after: float | None, detail: str):
        super().__init__(detail)
        self.status, self.retry_after = status, retry_after


def _retry_after(headers: Any) -> float | None:
    try:
        value = float(headers.get("Retry-After")) if headers is not None and headers.get("Retry-After") else None
    except (TypeError, ValueError):
        return None
    return value if value is not None and value >= 0 else None


def _within(deadline: _Deadline, what: str, function: Callable[[], Any]) -> Any:
    """`function()` if it returns before the deadline; else RemoteError (a Hub that trickles an
    endless answer defeats per-read timeouts, not this). The abandoned call ends with the process."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    worker = threading.Thread(target=target, daemon=True, name=f"ccpo-sync: {what}")
    worker.start()
    worker.join(max(0.0, deadline.remaining()))
    if worker.is_alive():
        deadline.end = min(deadline.end, time.monotonic())
        deadline.check(what)
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


@dataclass
class _Hub:
    api: Any
    token: str | None
    repo_id: str
    deadline: _Deadline
    retry: RetryPolicy
    timeouts: HubTimeouts

    def call(self, what: str, function: Callable[[], Any], *, not_found: Callable[[], Any] | None = None) -> Any:
        """`function()` with retries on RETRYABLE_STATUS and dropped connections; the last failure,
        or any other, as one RemoteError line. `not_found` answers a 404 instead of failing."""
        from huggingface_hub.errors import HfHubHTTPError

        attempt = 0
        while True:
            self.deadline.check(what)
            retry_after = None
            try:
                return _within(self.deadline, what, function)
            except _Status as error:
                status, retry_after, failure = error.status, error.retry_after, error
            except HfHubHTTPError as error:
                response = error.response
                status = response.status_code if response is not None else None
                if status == 404 and not_found is not None:
                    return not_found()
                retry_after = _retry_after(response.headers) if response is not None else None
                failure = error
            except (*transport_errors(), OSError) as error:
                status, failure = None, error
            except CcpoError:
                raise
            except Exception as error:  # an answer of another shape than the Hub's (issue 21 item 7)
                raise RemoteError(f"{self.repo_id}: {what} failed: the Hub's answer was not understood "
                                  f"({type(error).__name__}: {scrub(str(error), self.token)[:200]})") from None
            retryable = status in RETRYABLE_STATUS or (status is None and (is_timeout(failure) or isinstance(
                failure, (*transport_errors(), OSError))))
            if not retryable or attempt + 1 >= self.retry.attempts:
                raise self._failed(failure, what, attempt + 1, status) from None
            time.sleep(max(0.0, min(self.retry.wait(attempt, retry_after), self.deadline.remaining())))
            attempt += 1

    def _failed(self, error: BaseException, what: str, attempts: int, status: int | None) -> RemoteError:
        if isinstance(error, _Status):
            message = f"{self.repo_id}: {what} failed with HTTP {status}: {scrub(str(error), self.token)}"
        elif isinstance(error, Exception):
            message = str(remote_error(error, self.token, self.repo_id, what))
        else:
            message = f"{self.repo_id}: {what} failed"
        if status == 409:
            message += " (other machines kept committing to the dataset at the same moment)"
        if attempts > 1:
            message += f"; gave up after {attempts} attempts"
        return RemoteError(message)

    def download(self, path_in_repo: str, revision: str, target: Path, size: int, limits: SyncLimits) -> None:
        """One file of the dataset at `revision` into `target`: exactly `size` bytes expected,
        never more than that or `max_part_bytes` taken, within the deadline."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session

        url = hf_hub_url(self.repo_id, path_in_repo, repo_type=REPO_TYPE, revision=revision, endpoint=self.api.endpoint)
        headers = build_hf_headers(token=self.token, library_name="ccpo", library_version=__version__)
        cap = min(size, limits.max_part_bytes)

        def fetch() -> None:
            session = get_session()
            if callable(getattr(session, "stream", None)):  # httpx (huggingface_hub 1.x/2.x); requests has a flag
                with session.stream("GET", url, headers=headers, follow_redirects=True) as response:
                    _store(response.status_code, response.headers, response.iter_bytes(1 << 16), target, cap, path_in_repo)
            else:  # requests (huggingface_hub 0.3x)
                with session.get(url, headers=headers, stream=True, allow_redirects=True,
                                 timeout=(self.timeouts.connect, self.timeouts.read)) as response:
                    _store(response.status_code, response.headers, response.iter_content(1 << 16), target, cap, path_in_repo)

        self.call(f"downloading {path_in_repo}", fetch)
        if target.stat().st_size != size:
            raise RemoteError(f"{self.repo_id}: {path_in_repo} arrived with {target.stat().st_size} bytes, the "
                              f"dataset lists {size}; nothing of it was merged")


def _store(status: int, headers: Any, chunks: Any, target: Path, cap: int, path_in_repo: str) -> None:
    if status >= 400:
        raise _Status(status, _retry_after(headers), f"the Hub answered {status} for {path_in_repo}")
    written = 0
    with open(target, "wb") as handle:
        for chunk in chunks:
            written += len(chunk)
            if written > cap:
                raise RemoteError(f"{path_in_repo}: the Hub sent more than the {cap} bytes expected; refused")
            handle.write(chunk)


def resolve_endpoint(explicit: str | None = None) -> str:
    """--endpoint, else HF_ENDPOINT, else the public Hub: `ccpo publish`'s rule, from its one place."""
    from ccpo_cli.hub import resolve_endpoint as publish_endpoint

    return publish_endpoint(explicit)


def _hub(repo_id: str, *, token: str | None, endpoint: str, timeouts: HubTimeouts, limits: SyncLimits,
         retry: RetryPolicy) -> _Hub:
    from huggingface_hub import HfApi

    from ccpo_cli.hub import check_endpoint_supported

    check_endpoint_supported(endpoint)  # huggingface_hub 0.3x takes the address from HF_ENDPOINT only
    if not token:
        raise RemoteError("no Hugging Face token: pass --token-file, --token -, set HF_TOKEN or run `hf auth login`")
    api = HfApi(endpoint=endpoint, token=token, library_name="ccpo", library_version=__version__)
    return _Hub(api, token, repo_id, _Deadline(limits.deadline_s, repo_id), retry, timeouts)


def push(db: sqlite_utils.Database, repo_id: str, *, token: str | None, endpoint: str | None = None,
         timeouts: HubTimeouts | None = None, public: bool = False, host: str | None = None,
         limits: SyncLimits = SyncLimits(), retry: RetryPolicy = RetryPolicy()) -> dict[str, Any]:
    """Push the rows of `db` the dataset `repo_id` lacks, as one commit. Returns what was done."""
    from ccpo_cli.store.records import this_host
    from ccpo_cli.store.sync import log_sync, mark_pushed, write_parts

    check_repo_id(repo_id)
    host = host or this_host()
    endpoint = resolve_endpoint(endpoint)
    with tempfile.TemporaryDirectory(prefix="ccpo-sync-push-") as staging:
        parts = write_parts(db, Path(staging), host, repo_id=repo_id)
        rows = sum(part.rows for part in parts)
        result: dict[str, Any] = {"repo_id": repo_id, "host": host, "parts": len(parts), "rows": rows,
                                  "bytes": sum(part.size_bytes for part in parts), "commit_id": None,
                                  "runs": len({part.run_uid for part in parts})}
        if not parts:
            return dict(result, pushed=False, note="nothing new to push: the dataset holds every row of this database")
        if result["bytes"] > limits.max_push_bytes:
            raise InvalidInput(f"{repo_id}: {result['bytes'] / _MIB:.1f} MiB to push, over the limit of "
                               f"{limits.max_push_bytes / _MIB:.0f} MiB (--max-mb); nothing was sent")
        with hub_timeouts(timeouts or resolve_timeouts()):
            commit_id = _push(db, repo_id, parts, rows, host, token=token, endpoint=endpoint, public=public,
                              limits=limits, retry=retry, timeouts=timeouts or resolve_timeouts())
        marked = mark_pushed(db, repo_id, commit_id, parts)
        log_sync(db, repo_id, "push", commit_id, revision="main", parts=len(parts), rows=marked)
    return dict(result, pushed=True, commit_id=commit_id,
                commit_url=f"{endpoint}/datasets/{repo_id}/commit/{commit_id}")


def _push(db, repo_id: str, parts, rows: int, host: str, *, token, endpoint, public, limits, retry, timeouts) -> str:
    from huggingface_hub import CommitOperationAdd

    hub = _hub(repo_id, token=token, endpoint=endpoint, timeouts=timeouts, limits=limits, retry=retry)
    hub.call("creating the dataset", lambda: hub.api.create_repo(repo_id, repo_type=REPO_TYPE, private=not public,
                                                                 exist_ok=True))
    info = hub.call("reading the dataset", lambda: hub.api.dataset_info(repo_id))
    if not public and getattr(info, "private", None) is False:
        raise InvalidInput(f"{repo_id} is a public dataset; ccpo pushes results to public datasets only with --public")
    runs = len({part.run_uid for part in parts})
    message = f"ccpo sync: {rows} row(s) of {runs} run(s) from {host}"

    paths = {part.path_in_repo for part in parts}
    tries = 0

    def commit() -> str:
        nonlocal tries
        tries += 1
        if tries > 1:
            # A failed attempt may have landed with its answer lost: its part files (unique names)
            # are then in the dataset already, and sending them again would make a second commit.
            landed = hub.api.dataset_info(repo_id)
            if paths <= {sibling.rfilename for sibling in landed.siblings or []}:
                return landed.sha
        operations = [CommitOperationAdd(part.path_in_repo, str(part.local_path)) for part in parts]
        return hub.api.create_commit(repo_id, operations, commit_message=message, repo_type=REPO_TYPE,
                                     revision="main").oid

    return hub.call(f"committing {len(parts)} part(s)", commit)


def pull(db: sqlite_utils.Database, repo_id: str, *, revision: str | None = None, token: str | None,
         endpoint: str | None = None, timeouts: HubTimeouts | None = None, limits: SyncLimits = SyncLimits(),
         retry: RetryPolicy = RetryPolicy()) -> dict[str, Any]:
    """Merge the parts of dataset `repo_id` at one commit (`revision`, default main's head when
    the pull starts) that this database has not merged yet. Returns what was done."""
    check_repo_id(repo_id)
    timeouts = timeouts or resolve_timeouts()
    with hub_timeouts(timeouts):
        return _pull(db, repo_id, revision, token=token, endpoint=resolve_endpoint(endpoint), timeouts=timeouts,
                     limits=limits, retry=retry)


def _pull(db, repo_id: str, revision: str | None, *, token, endpoint, timeouts, limits, retry) -> dict[str, Any]:
    from huggingface_hub.hf_api import RepoFile

    from ccpo_cli.store.sync import (
        TABLES,
        MergeCounts,
        Origin,
        log_sync,
        merge_part,
        part_already_merged,
        part_table,
    )

    hub = _hub(repo_id, token=token, endpoint=endpoint, timeouts=timeouts, limits=limits, retry=retry)

    def missing():
        raise RemoteError(f"{repo_id}: no such dataset{f' revision {revision}' if revision else ''}, or the token "
                          "cannot read it (check --repo, --revision and the token)")

    info = hub.call("reading the dataset", lambda: hub.api.dataset_info(repo_id, revision=revision), not_found=missing)
    commit_id = getattr(info, "sha", None)
    if not isinstance(commit_id, str) or not commit_id:
        raise RemoteError(f"{repo_id}: the Hub named no commit for {revision or 'main'}; nothing was merged")
    listing = hub.call("listing the dataset's parts", lambda: list(islice(
        hub.api.list_repo_tree(repo_id, path_in_repo="data", recursive=True, revision=commit_id, repo_type=REPO_TYPE),
        limits.max_parts + 1)), not_found=lambda: [])
    parts = [entry for entry in listing if isinstance(entry, RepoFile) and isinstance(entry.path, str)
             and part_table(entry.path)]
    shapeless = [entry.path for entry in parts if not isinstance(entry.size, int) or entry.size < 0]
    if shapeless:
        raise RemoteError(f"{repo_id}: the Hub listed {shapeless[0]} without a size; nothing was merged")
    if len(listing) > limits.max_parts:
        raise InvalidInput(f"{repo_id}: the dataset lists more than {limits.max_parts} entries under data/; refused")
    new = sorted((entry for entry in parts if not part_already_merged(db, repo_id, entry.path, entry.blob_id)),
                 key=lambda entry: (TABLES.index(part_table(entry.path)), entry.path))
    too_large = [entry.path for entry in new if entry.size > limits.max_part_bytes]
    if too_large:
        raise InvalidInput(f"{repo_id}: part {too_large[0]} is over {limits.max_part_bytes / _MIB:.0f} MiB; refused")
    total = sum(entry.size for entry in new)
    if total > limits.max_pull_bytes:
        raise InvalidInput(f"{repo_id}: {total / _MIB:.1f} MiB of new parts, over the limit of "
                           f"{limits.max_pull_bytes / _MIB:.0f} MiB (--max-mb); nothing was merged")
    counts = MergeCounts()
    with tempfile.TemporaryDirectory(prefix="ccpo-sync-pull-") as scratch:
        local = Path(scratch) / "part.parquet"
        for entry in new:
            hub.download(entry.path, commit_id, local, entry.size, limits)
            hub.deadline.check(f"merging {entry.path}")
            counts.update(merge_part(db, local, entry.path, Origin(repo_id, commit_id, entry.path),
                                     blob_id=entry.blob_id, size_bytes=entry.size))
            local.unlink()
    log_sync(db, repo_id, "pull", commit_id, revision=revision or "main", parts=len(new), counts=counts)
    return {"repo_id": repo_id, "commit_id": commit_id, "revision": revision or "main", "parts": len(parts),
            "parts_merged": len(new), "bytes": total, "counts": counts.as_dict(),
            "rows_new": counts.total("new"), "rows_conflict": counts.total("conflict")}


def sync_push(db: sqlite_utils.Database, repo_id: str, *, token: str | None = None, token_file: Path | None = None,
              timeout: str | None = None, endpoint: str | None = None, public: bool = False,
              limits: SyncLimits = SyncLimits()) -> dict[str, Any]:
    """`ccpo sync push` as one call: the token and timeouts resolved as every Hub command does."""
    return push(db, repo_id, token=resolve_token(token, token_file), endpoint=endpoint,
                timeouts=resolve_timeouts(timeout), public=public, limits=limits)


def sync_pull(db: sqlite_utils.Database, repo_id: str, *, revision: str | None = None, token: str | None = None,
              token_file: Path | None = None, timeout: str | None = None, endpoint: str | None = None,
              limits: SyncLimits = SyncLimits()) -> dict[str, Any]:
    """`ccpo sync pull` as one call."""
    return pull(db, repo_id, revision=revision, token=resolve_token(token, token_file), endpoint=endpoint,
                timeouts=resolve_timeouts(timeout), limits=limits)
