"""How ccpo reaches the Hub: which token, how long to wait, how often to try again, and what
the user is told when it fails.

The token comes from --token (``-`` reads it from stdin, so it never shows in `ps`),
--token-file, HF_TOKEN or the saved login, in that order. Every Hub call is one
`HubClient.call`: it runs under the limits of hub_transport.py (short timeouts for metadata,
longer ones for transfers, an overall deadline, a size cap on answers), is tried again with
bounded, jittered backoff on 408, 429 (after its Retry-After), 5xx and (for commits, by the
caller) 409, and any failure becomes one `HubCallError` (a RemoteError, exit 4) that says what
failed and how to fix it. A Hub that accepts a connection and never answers, streams forever or
trickles ends in exit 4 within the deadline.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput, RemoteError
from ccpo_cli.hub_transport import (
    RETRY_STATUSES,
    AnswerTooLarge,
    CallLimits,
    DeadlineExceeded,
    RetryableAnswer,
    install_limits,
    limited_call,
    remove_limits,
)

TIMEOUT_ENV = "CCPO_HUB_TIMEOUT"
DEADLINE_ENV = "CCPO_HUB_DEADLINE"
# Connect fails fast; a metadata answer is small and quick; a transfer's final answer (the Hub
# hashing a large upload) can take minutes.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_METADATA_TIMEOUT = 20.0
DEFAULT_READ_TIMEOUT = 300.0
# A whole metadata call, however its answer arrives: with the 20 s metadata read, a Hub that
# never answers costs one call of at most this, so `ccpo publish` ends well within 90 s.
DEFAULT_DEADLINE = 60.0
# One metadata answer (a repository's file list, a page of commits) is far below this.
DEFAULT_ANSWER_CAP = 8 * 1024 * 1024
# The slowest upload or download ccpo waits for: a transfer's deadline grows by its bytes at this rate.
DEFAULT_MIN_RATE = 1024 * 1024
# A model download's whole deadline (its size is not known up front; every read is bounded anyway).
DOWNLOAD_DEADLINE = 86_400.0
# Backoff: attempts per call, the first wait, the longest wait, and the longest Retry-After
# honoured in place (a longer one ends the call: the caller decides when to come back).
RETRY_ATTEMPTS = 4
RETRY_BASE_S = 1.0
RETRY_MAX_WAIT_S = 30.0
RETRY_AFTER_MAX_S = 60.0


def resolve_token(explicit: str | None = None, token_file: Path | None = None) -> str | None:
    """--token (``-`` reads one line from stdin), else --token-file, else HF_TOKEN, else the
    token saved by `hf auth login` (None when none)."""
    if explicit and token_file:
        raise InvalidInput("--token and --token-file: give one of them")
    if explicit == "-":
        token = sys.stdin.readline().strip()
        if not token:
            raise InvalidInput("--token -: stdin held no token")
        return token
    if explicit:
        return explicit
    if token_file is not None:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidInput(f"--token-file {token_file}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
        if not token or "\n" in token:
            raise InvalidInput(f"--token-file {token_file}: expected one line holding the token")
        return token
    if os.environ.get("HF_TOKEN"):
        return os.environ["HF_TOKEN"]
    from huggingface_hub import get_token

    return get_token()


def token_source(explicit: str | None = None, token_file: Path | None = None) -> str:
    """Where `resolve_token` would take the token from, in words, without reading stdin or
    printing the token (a dry run says it before anything is sent)."""
    if explicit == "-":
        return "--token - (read from stdin when publishing)"
    if explicit:
        return "--token (given on the command line)"
    if token_file is not None:
        return f"--token-file {token_file}" + ("" if Path(token_file).is_file() else " (no such file: a push would fail)")
    if os.environ.get("HF_TOKEN"):
        return "HF_TOKEN (environment)"
    from huggingface_hub import get_token

    if get_token():
        return "the saved login (hf auth login)"
    return "none found (--token-file, --token -, HF_TOKEN or hf auth login): a push would fail with exit 4"


@dataclass(frozen=True)
class HubTimeouts:
    """How long ccpo waits for the Hub, in seconds (and how much it reads, in bytes).

    `connect` bounds opening a connection; `metadata` one read of a small answer (repository
    info, commit lists, refs); `read` one read during a transfer (a commit's upload, a file
    download); `deadline` a whole metadata call, however many requests it makes and however
    slowly its answer arrives; a transfer call gets `deadline` plus its bytes at `min_rate`.
    `answer_cap` bounds the size of one metadata answer."""

    connect: float
    read: float
    metadata: float = DEFAULT_METADATA_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    answer_cap: int = DEFAULT_ANSWER_CAP
    min_rate: float = DEFAULT_MIN_RATE

    def limits(self) -> CallLimits:
        return CallLimits(connect=self.connect, metadata_read=self.metadata, transfer_read=self.read,
                          deadline=self.deadline, answer_cap=self.answer_cap)

    def transfer_deadline(self, size_bytes: int) -> float:
        """The deadline of a call that moves `size_bytes` (a commit's upload, a download)."""
        return self.deadline + max(size_bytes, 0) / self.min_rate


def _seconds(text: str, where: str, shape: str) -> list[float]:
    try:
        values = [float(part) for part in str(text).split(",")]
    except ValueError:
        values = []
    if not values or not all(math.isfinite(v) and 0 < v <= 86_400 for v in values):
        raise InvalidInput(f"{where} {text!r}: expected {shape} seconds (each in (0, 86400])")
    return values


def resolve_timeouts(explicit: str | None = None, deadline: str | float | None = None) -> HubTimeouts:
    """--timeout, else $CCPO_HUB_TIMEOUT, else 10 s connect / 20 s metadata read / 300 s transfer
    read; --deadline, else $CCPO_HUB_DEADLINE, else 60 s per call. The timeout text is either
    READ or CONNECT,READ in seconds; a READ below the metadata default lowers that one too."""
    seconds = DEFAULT_DEADLINE
    per_call = deadline if deadline is not None else os.environ.get(DEADLINE_ENV)
    if per_call is not None and str(per_call).strip():
        values = _seconds(str(per_call), "--deadline" if deadline is not None else DEADLINE_ENV, "one number of")
        if len(values) != 1:
            raise InvalidInput(f"--deadline {per_call!r}: expected one number of seconds (in (0, 86400])")
        seconds = values[0]
    text = explicit if explicit is not None else os.environ.get(TIMEOUT_ENV)
    if text is None or not str(text).strip():
        return HubTimeouts(DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, deadline=seconds)
    where = "--timeout" if explicit is not None else TIMEOUT_ENV
    values = _seconds(str(text), where, "READ or CONNECT,READ")
    if len(values) > 2:
        raise InvalidInput(f"{where} {text!r}: expected READ or CONNECT,READ seconds (each in (0, 86400])")
    read = values[-1]
    connect = values[0] if len(values) == 2 else min(DEFAULT_CONNECT_TIMEOUT, read)
    return HubTimeouts(connect, read, metadata=min(DEFAULT_METADATA_TIMEOUT, read), deadline=seconds)


@contextlib.contextmanager
def hub_timeouts(timeouts: HubTimeouts, *, whole_block: dict[str, Any] | None = None) -> Iterator[None]:
    """Every request huggingface_hub sends inside the block is held to these limits (see
    hub_transport.py); afterwards the library has its default client back. With `whole_block`
    (keywords of `limited_call`: deadline, answer_cap) the block is one call under them; without
    it, each `HubClient.call` inside sets its own."""
    install_limits()
    try:
        if whole_block is None:
            yield
        else:
            with limited_call(timeouts.limits(), **whole_block):
                yield
    finally:
        remove_limits()


def is_timeout(error: BaseException | None) -> bool:
    """A timeout, or an error raised while handling one (snapshot downloads wrap the timeout)."""
    seen = 0
    while error is not None and seen < 8:
        if isinstance(error, TimeoutError) or "Timeout" in type(error).__name__:
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def scrub(text: str, token: str | None) -> str:
    """One line, without the token."""
    text = " ".join(text.split())
    return text.replace(token, "***") if token else text


class HubCallError(RemoteError):
    """A Hub call that failed (exit 4), with what the retry and landed-commit logic needs:
    `kind` is http, retryable, timeout, deadline, too_large, shape or unreachable; `status` the
    HTTP status when there was one; `retry_after` the Hub's Retry-After in seconds."""

    def __init__(self, message: str, *, kind: str, status: int | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    @property
    def answered(self) -> bool:
        """Whether the Hub gave a definite refusal (nothing could have landed)."""
        return self.kind == "http" and self.status is not None and 400 <= self.status < 500 and self.status != 408


# Errors that mean "the library could not make sense of the answer": a field of the wrong type
# (siblings as a string), a missing key, an attribute of something that is not the object it should be.
SHAPE_ERRORS = (TypeError, KeyError, AttributeError, IndexError)


def remote_error(error: Exception, token: str | None, repo_id: str, what: str) -> HubCallError:
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(error, HubCallError):
        return error
    if isinstance(error, RetryableAnswer):
        hint = {429: "the Hub's rate limit (about 128 commits an hour per repository); try again later",
                409: "another commit was in progress"}.get(error.status, "the Hub is having trouble; try again later")
        wait = f", it asked to wait {error.retry_after:.0f} s" if error.retry_after else ""
        return HubCallError(f"{repo_id}: {what} failed with HTTP {error.status}{wait} ({hint})"
                            + (f": {scrub(error.detail, token)}" if error.detail else ""),
                            kind="retryable", status=error.status, retry_after=error.retry_after)
    if isinstance(error, DeadlineExceeded):
        return HubCallError(f"{repo_id}: {what} failed: the Hub gave no complete answer within the deadline of "
                            f"{error.seconds:.0f} s; raise --deadline / {DEADLINE_ENV} for a slow connection",
                            kind="deadline")
    if isinstance(error, AnswerTooLarge):
        return HubCallError(f"{repo_id}: {what} failed: the Hub's answer exceeded {error.cap} bytes, far more than "
                            "this call needs; not reading further", kind="too_large")
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        status = error.response.status_code
        if status == 412:
            return HubCallError(
                f"{repo_id}: the repository changed on the Hub while ccpo was publishing ({what}: 412, "
                "a commit has happened since ccpo read it); nothing was overwritten. Run the publish again "
                "to merge with the new state", kind="http", status=412,
            )
        if status in (401, 403):
            return HubCallError(f"{repo_id}: the Hub refused the token ({what}: {status}); check --token / HF_TOKEN",
                                kind="http", status=status)
        detail = scrub(str(error).splitlines()[0], token)
        kind = "retryable" if status in RETRY_STATUSES else "http"
        return HubCallError(f"{repo_id}: {what} failed with HTTP {status}: {detail}", kind=kind, status=status)
    if is_timeout(error):
        return HubCallError(
            f"{repo_id}: {what} failed: the Hub did not answer in time ({type(error).__name__}); "
            f"raise --timeout / {TIMEOUT_ENV} for a slow connection", kind="timeout",
        )
    if isinstance(error, SHAPE_ERRORS):
        return HubCallError(f"{repo_id}: {what} failed: the Hub's answer is not of the shape ccpo expects "
                            f"({type(error).__name__}: {scrub(str(error), token)[:200]}); is the endpoint a Hugging Face Hub?",
                            kind="shape")
    if isinstance(error, ValueError):  # e.g. the Hub rejected the README metadata, or an answer that is not JSON
        return HubCallError(f"{repo_id}: {what} failed: {scrub(str(error), token)}", kind="shape")
    return HubCallError(f"{repo_id}: {what} failed, the Hub is unreachable: {scrub(str(error), token)}",
                        kind="unreachable")


def transport_errors() -> tuple[type[BaseException], ...]:
    """Connection failures of the HTTP client this huggingface_hub uses: from 1.0 on the httpx it
    exposes as `huggingface_hub.utils.httpx`; 0.3x uses requests, whose errors are OSErrors already."""
    try:
        from huggingface_hub.utils import httpx
    except ImportError:
        return ()
    return (httpx.HTTPError,)


def call_errors() -> tuple[type[BaseException], ...]:
    """Everything a Hub call can raise that `remote_error` turns into one line."""
    from huggingface_hub.errors import HfHubHTTPError

    from ccpo_cli.hub_transport import TransportLimit

    return (HfHubHTTPError, TransportLimit, *transport_errors(), OSError, ValueError, *SHAPE_ERRORS)


def backoff_wait(attempt: int, retry_after: float | None) -> float:
    """Seconds before attempt `attempt + 1`: the Hub's Retry-After when it gave one, else an
    exponential wait with full jitter (so many uploaders do not retry in step)."""
    if retry_after is not None:
        return retry_after + random.uniform(0, 0.5)
    return random.uniform(0.5, 1.0) * min(RETRY_MAX_WAIT_S, RETRY_BASE_S * 2 ** attempt)


@dataclass
class HubClient:
    """One repository on one Hub, reached under ccpo's limits. `call` runs one library call
    with the right deadline and answer cap, retrying answers worth retrying; everything else
    becomes a HubCallError."""

    api: Any
    token: str | None
    repo_id: str
    timeouts: HubTimeouts
    attempts: int = RETRY_ATTEMPTS
    sleep: Callable[[float], None] = time.sleep
    log: Callable[[str], None] | None = None

    def call(self, what: str, function: Callable, *args: Any, transfer_bytes: int | None = None,
             answer_cap: int | None = None, transfer_cap: int | None = None, retry: bool = True,
             **kwargs: Any) -> Any:
        """`function(*args, **kwargs)` as one Hub call: a metadata call under the metadata deadline,
        or (`transfer_bytes` given) a transfer whose deadline grows with its size; `transfer_cap`
        bounds a download's answer. `retry=False` leaves retrying to the caller (commits)."""
        deadline = None if transfer_bytes is None else self.timeouts.transfer_deadline(transfer_bytes)
        for attempt in range(self.attempts):
            try:
                with limited_call(self.timeouts.limits(), deadline=deadline, answer_cap=answer_cap,
                                  transfer_cap=transfer_cap):
                    return function(*args, **kwargs)
            except call_errors() as error:
                failure = remote_error(error, self.token, self.repo_id, what)
            if not (retry and failure.kind == "retryable" and attempt + 1 < self.attempts):
                raise failure
            wait = backoff_wait(attempt, failure.retry_after)
            if wait > RETRY_AFTER_MAX_S:
                raise failure
            if self.log is not None:
                self.log(f"{self.repo_id}: {what}: HTTP {failure.status}, trying again in {wait:.1f} s")
            self.sleep(wait)
        raise AssertionError("unreachable")  # the loop returns or raises

