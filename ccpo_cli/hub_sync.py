"""`ccpo sync push/pull`: runs shared between machines through a Hub dataset repository.

The dataset is an append-only log of parquet parts (`data/HOST/RUN/TABLE-MS-UUID.parquet`,
written by `ccpo_cli/store/sync_export.py`, read by `store/sync_read.py` and merged by
`store/sync_merge.py`). A push is one commit of the rows this database has that the dataset
does not (nothing is ever rewritten, so pushes of several machines never touch the same file); it carries no `parent_commit`, which for disjoint files would only make
writers fail each other. The Hub applies one commit per repository at a time and answers a
commit that races another with 409: ccpo retries it, as every Hub call is retried, by the one
rule and client of hub_access.py (`RetryRule`, `HubClient`), within the whole command's deadline
(`SyncLimits`); after a failure the dataset is read for the commit's part files before it is sent
again, so a commit whose answer was lost is not made twice. A new dataset is private unless
`--public` is given, and ccpo refuses to push to an existing public one without it.

A pull reads one pinned dataset commit (`--revision`, default: the commit `main` points at when
the pull starts), downloads the parts it has not merged yet, each bounded in size and time, and
merges them part by part; it records the commit in `sync_log` and, per merged row, in
`sync_items`, from which `ccpo runs show` names the commit a run's pulled rows came from.

Tokens, timeouts and the mapping of Hub errors to one-line messages are `ccpo_cli/hub_access.py`'s.

One concern, kept in one file past 400 lines: the Hub side of `ccpo sync`: push and pull share
the dataset session (`_hub`), the size and time bounds (`SyncLimits`) and the capped part
download, and a pull reads the part paths a push writes.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, Unpack

import sqlite_utils

from ccpo_cli import __version__
from ccpo_cli.errors import InvalidInput, RemoteError
from ccpo_cli.hub_access import (
    DEFAULT_RULE,
    Deadline,
    HubAccess,
    HubCallError,
    HubClient,
    HubTimeouts,
    RetryRule,
    hub_timeouts,
    required_token,
    resolve_timeouts,
    resolve_token,
)
from ccpo_cli.hub_transport import AnswerTooLarge
from ccpo_cli.names import check_repo_id

REPO_TYPE = "dataset"
_MIB = 1 << 20


@dataclass(frozen=True)
class SyncLimits:
    """Bounds of one push or pull: the whole of it must end within `deadline_s` (the command's
    deadline of hub_access.py, retries and waits included); a push sends at most
    `max_push_bytes`; a pull downloads at most `max_pull_bytes`, no part over `max_part_bytes`,
    and lists at most `max_parts` parts."""

    deadline_s: float = 900.0
    max_push_bytes: int = 2048 * _MIB
    max_pull_bytes: int = 8192 * _MIB
    max_part_bytes: int = 512 * _MIB
    max_parts: int = 100_000
    # What one pull may add to runs.db over all its parts (store/sync.py PullBudget).
    max_pull_rows: int = 2_000_000
    max_pull_growth_bytes: int = 2048 * _MIB


def _write_capped(chunks, handle, cap: int) -> None:
    """Write an answer's chunks, refusing it (AnswerTooLarge) once it passes `cap` bytes."""
    written = 0
    for chunk in chunks:
        written += len(chunk)
        if written > cap:
            raise AnswerTooLarge(cap)
        handle.write(chunk)


def _download(
    client: HubClient, path_in_repo: str, revision: str, target: Path, size: int, cap: int
) -> None:
    """One file of the dataset at `revision` into `target`, never more than `cap` bytes taken
    (the transport cuts the answer; this stops a short-sized part too)."""
    blocks = client.file_blocks(path_in_repo, revision, repo_type=REPO_TYPE)
    with open(target, "wb") as handle, contextlib.closing(blocks):
        _write_capped(blocks, handle, cap)


def download_part(
    client: HubClient, path_in_repo: str, revision: str, target: Path, size: int, limits: SyncLimits
) -> None:
    """One part into `target`: exactly `size` bytes expected, never more than that or
    `max_part_bytes` taken, within the command's deadline."""
    cap = min(size, limits.max_part_bytes)
    client.call(
        f"downloading {path_in_repo}",
        _download,
        client,
        path_in_repo,
        revision,
        target,
        size,
        cap,
        transfer_bytes=size,
        transfer_cap=cap,
    )
    if target.stat().st_size != size:
        raise RemoteError(
            f"{client.repo_id}: {path_in_repo} arrived with {target.stat().st_size} bytes, the "
            f"dataset lists {size}; nothing of it was merged"
        )


def resolve_endpoint(explicit: str | None = None) -> str:
    """--endpoint, else HF_ENDPOINT, else the public Hub: `ccpo publish`'s rule, from its one place."""
    from ccpo_cli.hub_plan import resolve_endpoint as publish_endpoint

    return publish_endpoint(explicit)


def _hub(
    repo_id: str,
    *,
    token: str | None,
    endpoint: str,
    timeouts: HubTimeouts,
    limits: SyncLimits,
    rule: RetryRule,
) -> HubClient:
    from huggingface_hub import HfApi

    from ccpo_cli.hub_repo import check_endpoint_supported

    check_endpoint_supported(
        endpoint
    )  # huggingface_hub 0.3x takes the address from HF_ENDPOINT only
    api = HfApi(
        endpoint=endpoint,
        token=required_token(token),
        library_name="ccpo",
        library_version=__version__,
    )
    return HubClient(api, token, repo_id, timeouts, rule=rule, deadline=Deadline(limits.deadline_s))


def push(
    db: sqlite_utils.Database,
    repo_id: str,
    *,
    token: str | None,
    endpoint: str | None = None,
    timeouts: HubTimeouts | None = None,
    public: bool = False,
    host: str | None = None,
    limits: SyncLimits = SyncLimits(),
    rule: RetryRule = DEFAULT_RULE,
) -> dict[str, Any]:
    """Push the rows of `db` the dataset `repo_id` lacks, as one commit. Returns what was done."""
    from ccpo_cli.store.records import this_host
    from ccpo_cli.store.sync import log_sync, mark_pushed
    from ccpo_cli.store.sync_export import write_parts

    check_repo_id(repo_id)
    host = host or this_host()
    endpoint = resolve_endpoint(endpoint)
    with tempfile.TemporaryDirectory(prefix="ccpo-sync-push-") as staging:
        parts = write_parts(db, Path(staging), host, repo_id=repo_id)
        result = _push_summary(repo_id, host, parts, limits)
        if not parts:
            return result
        timeouts = timeouts or resolve_timeouts()
        with hub_timeouts(timeouts):
            hub = _hub(
                repo_id, token=token, endpoint=endpoint, timeouts=timeouts, limits=limits, rule=rule
            )
            commit_id = _push(hub, parts, result["rows"], host, public=public)
        marked = mark_pushed(db, repo_id, commit_id, parts)
        log_sync(db, repo_id, "push", commit_id, revision="main", parts=len(parts), rows=marked)
    return dict(
        result,
        pushed=True,
        commit_id=commit_id,
        commit_url=f"{endpoint}/datasets/{repo_id}/commit/{commit_id}",
    )


def _push_summary(repo_id: str, host: str, parts: list, limits: SyncLimits) -> dict[str, Any]:
    """What a push would send; with no parts, the whole answer (nothing new); refused
    (InvalidInput, nothing sent) when it is over `max_push_bytes`."""
    from ccpo_cli.store.sync_format import TABLES as SYNCED_TABLES

    result: dict[str, Any] = {
        "repo_id": repo_id,
        "host": host,
        "parts": len(parts),
        "rows": sum(part.rows for part in parts),
        "bytes": sum(part.size_bytes for part in parts),
        "commit_id": None,
        "runs": len({part.run_uid for part in parts}),
    }
    if not parts:
        return dict(
            result,
            pushed=False,
            note="nothing new to push: the dataset holds every row ccpo sync carries from this database "
            f"({', '.join(SYNCED_TABLES)}; checkpoints, liveness and the outbox stay on this machine)",
        )
    if result["bytes"] > limits.max_push_bytes:
        raise InvalidInput(
            f"{repo_id}: {result['bytes'] / _MIB:.1f} MiB to push, over the limit of "
            f"{limits.max_push_bytes / _MIB:.0f} MiB (--max-mb); nothing was sent"
        )
    return result


def _ensure_dataset(hub: HubClient, public: bool) -> None:
    """Create the dataset (private unless `public`) or find it; a dataset that is public, or
    whose visibility the Hub does not say, is refused unless `public`: never sent unasked."""
    hub.call(
        "creating the dataset",
        hub.api.create_repo,
        hub.repo_id,
        repo_type=REPO_TYPE,
        private=not public,
        exist_ok=True,
    )
    info = hub.call("reading the dataset", hub.api.dataset_info, hub.repo_id)
    if not public and getattr(info, "private", None) is not True:
        raise InvalidInput(
            f"{hub.repo_id} is a public dataset; ccpo pushes results to public datasets only with --public"
        )


def _push(hub: HubClient, parts: list, rows: int, host: str, *, public: bool) -> str:
    """The parts as one commit to the dataset; its id."""
    from huggingface_hub import CommitOperationAdd

    _ensure_dataset(hub, public)
    runs = len({part.run_uid for part in parts})
    message = f"ccpo sync: {rows} row(s) of {runs} run(s) from {host}"
    paths = {part.path_in_repo for part in parts}

    def send() -> str:
        operations = [CommitOperationAdd(part.path_in_repo, str(part.local_path)) for part in parts]
        return hub.api.create_commit(
            hub.repo_id, operations, commit_message=message, repo_type=REPO_TYPE, revision="main"
        ).oid

    def landed() -> str | None:
        # The landed check of a dataset: its part files (unique names) are there already.
        info = hub.call("reading the dataset", hub.api.dataset_info, hub.repo_id)
        return info.sha if paths <= {sibling.rfilename for sibling in info.siblings or []} else None

    commit_id, _ = hub.commit(
        f"committing {len(parts)} part(s)",
        send,
        landed,
        size_bytes=sum(part.size_bytes for part in parts),
    )
    return commit_id


def pull(
    db: sqlite_utils.Database,
    repo_id: str,
    *,
    revision: str | None = None,
    token: str | None,
    endpoint: str | None = None,
    timeouts: HubTimeouts | None = None,
    limits: SyncLimits = SyncLimits(),
    rule: RetryRule = DEFAULT_RULE,
) -> dict[str, Any]:
    """Merge the parts of dataset `repo_id` at one commit (`revision`, default main's head when
    the pull starts) that this database has not merged yet. Returns what was done."""
    check_repo_id(repo_id)
    timeouts = timeouts or resolve_timeouts()
    with hub_timeouts(timeouts):
        hub = _hub(
            repo_id,
            token=token,
            endpoint=resolve_endpoint(endpoint),
            timeouts=timeouts,
            limits=limits,
            rule=rule,
        )
        return _pull(db, hub, revision, limits)


def _pull(db, hub: HubClient, revision: str | None, limits: SyncLimits) -> dict[str, Any]:
    from ccpo_cli.store.sync import log_sync

    commit_id = _pinned_commit(hub, revision)
    parts = _listed_parts(hub, commit_id, limits)
    new, total = _new_parts(db, hub.repo_id, parts, limits)
    counts, refused, waiting = _merge_new_parts(db, hub, commit_id, new, limits)
    log_sync(
        db,
        hub.repo_id,
        "pull",
        commit_id,
        revision=revision or "main",
        parts=len(new),
        counts=counts,
    )
    return {
        "repo_id": hub.repo_id,
        "commit_id": commit_id,
        "revision": revision or "main",
        "parts": len(parts),
        "parts_merged": len(new) - len(refused) - max(0, waiting - 1),
        "parts_waiting": waiting,
        "parts_refused": refused,
        "bytes": total,
        "counts": counts.as_dict(),
        "rows_new": counts.total("new"),
        "rows_conflict": counts.total("conflict"),
    }


def _pinned_commit(hub: HubClient, revision: str | None) -> str:
    """The dataset commit a pull reads (`revision`, else main's head now): every part is read at
    it, so a push landing meanwhile never mixes into this pull."""
    repo_id = hub.repo_id
    try:
        info = hub.call("reading the dataset", hub.api.dataset_info, repo_id, revision=revision)
    except HubCallError as failure:
        if failure.status != 404:
            raise
        raise RemoteError(
            f"{repo_id}: no such dataset{f' revision {revision}' if revision else ''}, or the token "
            "cannot read it (check --repo, --revision and the token)"
        ) from None
    commit_id = getattr(info, "sha", None)
    if not isinstance(commit_id, str) or not commit_id:
        raise RemoteError(
            f"{repo_id}: the Hub named no commit for {revision or 'main'}; nothing was merged"
        )
    return commit_id


def _listed_parts(hub: HubClient, commit_id: str, limits: SyncLimits) -> list:
    """The part files the dataset lists under data/ at `commit_id` (none when it has no data/
    yet); a listing of more than `max_parts` entries, or a part without a size, is refused."""
    from huggingface_hub.hf_api import RepoFile

    from ccpo_cli.store.sync_format import part_table

    def tree() -> list:
        return list(
            islice(
                hub.api.list_repo_tree(
                    hub.repo_id,
                    path_in_repo="data",
                    recursive=True,
                    revision=commit_id,
                    repo_type=REPO_TYPE,
                ),
                limits.max_parts + 1,
            )
        )

    try:
        listing = hub.call("listing the dataset's parts", tree)
    except HubCallError as failure:
        if failure.status != 404:
            raise
        listing = []  # a dataset without data/ yet
    parts = [
        entry
        for entry in listing
        if isinstance(entry, RepoFile) and isinstance(entry.path, str) and part_table(entry.path)
    ]
    shapeless = [entry.path for entry in parts if not isinstance(entry.size, int) or entry.size < 0]
    if shapeless:
        raise RemoteError(
            f"{hub.repo_id}: the Hub listed {shapeless[0]} without a size; nothing was merged"
        )
    if len(listing) > limits.max_parts:
        raise InvalidInput(
            f"{hub.repo_id}: the dataset lists more than {limits.max_parts} entries under data/; refused"
        )
    return parts


def _new_parts(db, repo_id: str, parts: list, limits: SyncLimits) -> tuple[list, int]:
    """The parts this database has not merged, in merge order (by table, then path), and their
    bytes; refused (nothing merged) when one is over `max_part_bytes` or all over `max_pull_bytes`."""
    from ccpo_cli.store.sync import part_already_merged
    from ccpo_cli.store.sync_format import TABLES, part_table

    new = sorted(
        (
            entry
            for entry in parts
            if not part_already_merged(db, repo_id, entry.path, entry.blob_id)
        ),
        key=lambda entry: (TABLES.index(part_table(entry.path)), entry.path),
    )
    too_large = [entry.path for entry in new if entry.size > limits.max_part_bytes]
    if too_large:
        raise InvalidInput(
            f"{repo_id}: part {too_large[0]} is over {limits.max_part_bytes / _MIB:.0f} MiB; refused"
        )
    total = sum(entry.size for entry in new)
    if total > limits.max_pull_bytes:
        raise InvalidInput(
            f"{repo_id}: {total / _MIB:.1f} MiB of new parts, over the limit of "
            f"{limits.max_pull_bytes / _MIB:.0f} MiB (--max-mb); nothing was merged"
        )
    return new, total


class _LeftForNextPull(Exception):
    """The pull's budget is spent on the parts merged before this one: the rest waits."""


def _merge_new_parts(
    db, hub: HubClient, commit_id: str, new: list, limits: SyncLimits
) -> tuple[Any, list[dict[str, str]], int]:
    """Each new part downloaded and merged in turn, within one budget: (the merge counts, the
    parts refused and why, how many wait for the next pull, counting the one that found the
    budget spent)."""
    from ccpo_cli.store.sync import PullBudget
    from ccpo_cli.store.sync_merge import MergeCounts, Origin

    counts = MergeCounts()
    refused: list[dict[str, str]] = []
    budget = PullBudget(limits.max_pull_rows, limits.max_pull_growth_bytes)
    with tempfile.TemporaryDirectory(prefix="ccpo-sync-pull-") as scratch:
        local = Path(scratch) / "part.parquet"
        for index, entry in enumerate(new):
            origin = Origin(hub.repo_id, commit_id, entry.path)
            try:
                reason = _merge_one(db, hub, entry, origin, local, limits, budget, counts)
            except _LeftForNextPull as spent:
                refused.append({"part": entry.path, "reason": f"{spent}; left for the next pull"})
                return counts, refused, len(new) - index
            if reason is not None:
                refused.append({"part": entry.path, "reason": reason})
    return counts, refused, 0


def _download_failure(db, hub: HubClient, entry, origin, local: Path, limits) -> str | None:
    """Download one part into `local`; why it could not be (recorded in runs.db as failed: a
    part that cannot be downloaded never blocks the parts after it, the next pull tries it
    again), or None. A failure once the command's deadline has passed ends the pull."""
    from ccpo_cli.store.sync import record_failed_part

    try:
        download_part(hub, entry.path, origin.commit_id, local, entry.size, limits)
    except (HubCallError, RemoteError, AnswerTooLarge) as error:
        if hub.deadline.remaining() <= 0:
            raise
        record_failed_part(db, origin, blob_id=entry.blob_id, size_bytes=entry.size)
        local.unlink(missing_ok=True)
        return f"download failed: {error}"
    return None


def _merge_one(db, hub, entry, origin, local: Path, limits, budget, counts) -> str | None:
    """One part downloaded into `local` and merged; why it was not (recorded in runs.db, and
    never blocking the parts after it), or None. The command's deadline ends the pull."""
    from ccpo_cli.store.sync import (
        PullBudgetSpent,
        merge_part,
        part_path_problem,
        record_refused_part,
    )

    def refuse(reason: str) -> str:
        record_refused_part(db, origin, blob_id=entry.blob_id, size_bytes=entry.size)
        return reason

    problem = part_path_problem(entry.path)
    if problem is not None:  # never downloaded: its path is not one ccpo writes
        return refuse(problem)
    failure = _download_failure(db, hub, entry, origin, local, limits)
    if failure is not None:
        return failure
    if hub.deadline.remaining() <= 0:
        raise hub.deadline.failure(hub.repo_id, f"merging {entry.path}")
    try:
        counts.update(
            merge_part(
                db,
                local,
                origin,
                blob_id=entry.blob_id,
                size_bytes=entry.size,
                budget=budget,
            )
        )
    except PullBudgetSpent as error:
        if budget.used:  # the rest waits for the next pull, within its own budget
            raise _LeftForNextPull(str(error)) from None
        return refuse(str(error))
    except InvalidInput as error:
        # One bad part (hand-made, damaged, of a newer ccpo) is named, skipped and recorded, so
        # it never blocks the rest of this pull or any later one; nothing of it was merged.
        return refuse(str(error))
    finally:
        local.unlink(missing_ok=True)
    return None


def sync_push(
    db: sqlite_utils.Database,
    repo_id: str,
    *,
    public: bool = False,
    limits: SyncLimits = SyncLimits(),
    **access: Unpack[HubAccess],
) -> dict[str, Any]:
    """`ccpo sync push` as one call: the token and timeouts resolved as every Hub command does."""
    return push(db, repo_id, public=public, limits=limits, **_reached(access))


def sync_pull(
    db: sqlite_utils.Database,
    repo_id: str,
    *,
    revision: str | None = None,
    limits: SyncLimits = SyncLimits(),
    **access: Unpack[HubAccess],
) -> dict[str, Any]:
    """`ccpo sync pull` as one call."""
    return pull(db, repo_id, revision=revision, limits=limits, **_reached(access))


def _reached(access: HubAccess) -> dict[str, Any]:
    """The token, endpoint and timeouts the Hub options name, resolved (in that order)."""
    return {
        "token": resolve_token(access.get("token"), access.get("token_file")),
        "endpoint": access.get("endpoint"),
        "timeouts": resolve_timeouts(access.get("timeout"), access.get("deadline")),
    }
