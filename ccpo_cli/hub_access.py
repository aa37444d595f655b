"""How ccpo reaches the Hub: which token, how long to wait, how often to try again, and what
the user is told when it fails.

The token comes from --token (``-`` reads it from stdin, so it never shows in `ps`),
--token-file, HF_TOKEN or the saved login, in that order. Every Hub call is one
`HubClient.call`: it runs under the limits of hub_transport.py (short timeouts for metadata,
longer ones for transfers, an overall deadline, a size cap on answers), is tried again with
bounded, jittered backoff on the statuses of its `RetryRule` (408, 429 after its Retry-After,
500, 502, 503, 504, and on a commit, `HubClient.commit`, 409), and any failure becomes one `HubCallError` (a RemoteError, exit 4) that says what
failed and how to fix it. A Hub that accepts a connection and never answers, streams forever or
trickles ends in exit 4 within the deadline.

One concern, kept in one file past 400 lines: the token, the timeouts and deadline, the retry
rule and the mapping of failures to one-line messages are the one client every Hub call goes
through (`HubClient.call`), and each part reads the others: the deadline bounds the backoff, the
error mapping decides what is retried, every message is scrubbed of the token.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import stat
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from ccpo_cli.errors import InvalidInput, RemoteError
from ccpo_cli.hub_transport import (
    COMMIT_RETRY_STATUSES,
    RETRY_STATUSES,
    AnswerTooLarge,
    CallLimits,
    DeadlineExceeded,
    RetryableAnswer,
    install_limits,
    limited_call,
    remove_limits,
    uses_httpx,
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
# The whole of one command's Hub work (a publish, a sync, a model download, one outbox entry,
# one `--once` round), retries and waits included, when --deadline / CCPO_HUB_DEADLINE do not say.
DEFAULT_COMMAND_DEADLINE = 900.0


# A Hugging Face token is about 40 characters; a source holding more than this is not a token
# (a 100 MB file would otherwise be read whole and sent as a header).
MAX_TOKEN_BYTES = 4096


def _checked_token(text: str, where: str) -> str:
    """`text` as a token: one printable line of at most MAX_TOKEN_BYTES, else one line saying so."""
    token = text.strip()
    if not token:
        raise InvalidInput(f"{where}: held no token")
    if len(token.encode("utf-8", "surrogateescape")) > MAX_TOKEN_BYTES:
        raise InvalidInput(f"{where}: more than {MAX_TOKEN_BYTES} bytes; not a Hugging Face token")
    if not token.isprintable() or any(character.isspace() for character in token):
        raise InvalidInput(
            f"{where}: expected one printable line holding the token (it holds control characters, "
            "spaces or several lines)"
        )
    return token


def _read_token_file(token_file: Path, where: str | None = None) -> str:
    """The token file's text, read only when it is a regular file of at most MAX_TOKEN_BYTES: a
    named pipe is never opened for a blocking read, a device never read (it may never end)."""
    where = where or f"--token-file {token_file}"
    try:
        # O_NONBLOCK: opening a named pipe with no writer would otherwise wait forever.
        fd = os.open(token_file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise InvalidInput(f"{where}: cannot read it ({error.strerror or error})") from None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise InvalidInput(
                f"{where}: not a regular file (a pipe, device or folder); give a file holding the token"
            )
        if status.st_size > MAX_TOKEN_BYTES:
            raise InvalidInput(
                f"{where}: {status.st_size} bytes, more than {MAX_TOKEN_BYTES} bytes; not a Hugging Face token"
            )
        data = os.read(fd, MAX_TOKEN_BYTES + 1)
    except OSError as error:
        raise InvalidInput(f"{where}: cannot read it ({error.strerror or error})") from None
    finally:
        os.close(fd)
    if len(data) > MAX_TOKEN_BYTES:
        raise InvalidInput(f"{where}: more than {MAX_TOKEN_BYTES} bytes; not a Hugging Face token")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(
            f"{where}: not UTF-8 text; expected one line holding the token"
        ) from None


def _read_token_stdin() -> str:
    """One line of stdin, at most MAX_TOKEN_BYTES (an endless stdin, /dev/zero, is never read whole)."""
    try:
        line = sys.stdin.readline(MAX_TOKEN_BYTES + 2)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise InvalidInput(f"--token -: cannot read stdin ({error})") from None
    if len(line.rstrip("\r\n").encode("utf-8", "surrogateescape")) > MAX_TOKEN_BYTES:
        raise InvalidInput(
            f"--token -: more than {MAX_TOKEN_BYTES} bytes on stdin; not a Hugging Face token"
        )
    return line


def resolve_token(explicit: str | None = None, token_file: Path | None = None) -> str | None:
    """--token (``-`` reads one line from stdin), else --token-file, else HF_TOKEN, else the
    token saved by `hf auth login` (None when none). Every source is bounded: a regular file
    (or stdin) of at most MAX_TOKEN_BYTES holding one printable line, else exit 3."""
    if explicit and token_file:
        raise InvalidInput("--token and --token-file: give one of them")
    if explicit == "-":
        return _checked_token(_read_token_stdin(), "--token -: stdin")
    if explicit:
        return _checked_token(explicit, "--token")
    if token_file is not None:
        return _checked_token(_read_token_file(Path(token_file)), f"--token-file {token_file}")
    if os.environ.get("HF_TOKEN"):
        return _checked_token(os.environ["HF_TOKEN"], "HF_TOKEN")
    from huggingface_hub import constants, get_token

    saved_file = Path(constants.HF_TOKEN_PATH)
    if os.path.lexists(saved_file):  # read under the same bounds as --token-file
        where = f"the saved login {saved_file}"
        return _checked_token(_read_token_file(saved_file, where), where)
    saved = get_token()
    return None if saved is None else _checked_token(saved, "the saved login (hf auth login)")


def required_token(token: str | None, where: str = "") -> str:
    """`token`, or RemoteError (exit 4) saying how to give one (`where` names the option)."""
    if not token:
        raise RemoteError(
            f"{where}no Hugging Face token: pass --token-file, --token -, set HF_TOKEN or run "
            "`hf auth login`"
        )
    return token


def token_source(explicit: str | None = None, token_file: Path | None = None) -> str:
    """Where `resolve_token` would take the token from, in words, without reading stdin or
    printing the token (a dry run says it before anything is sent)."""
    if explicit == "-":
        return "--token - (read from stdin when publishing)"
    if explicit:
        return "--token (given on the command line)"
    if token_file is not None:
        return f"--token-file {token_file}" + (
            "" if Path(token_file).is_file() else " (no such file: a push would fail)"
        )
    if os.environ.get("HF_TOKEN"):
        return "HF_TOKEN (environment)"
    from huggingface_hub import get_token

    if get_token():
        return "the saved login (hf auth login)"
    return "none found (--token-file, --token -, HF_TOKEN or hf auth login): a push would fail with exit 4"


class HubAccess(TypedDict, total=False):
    """How a Hub command reaches the Hub, as its options say it (one option group, declared
    once): --token (``-`` reads stdin), --token-file, --timeout, --deadline and --endpoint. What
    is left out falls back as `resolve_token`, `resolve_timeouts` and --endpoint's rule say."""

    token: str | None
    token_file: Path | None
    timeout: str | None
    deadline: str | float | None
    endpoint: str | None


@dataclass(frozen=True)
class HubTimeouts:
    """How long ccpo waits for the Hub, in seconds (and how much it reads, in bytes).

    `connect` bounds opening a connection; `metadata` one read of a small answer (repository
    info, commit lists, refs); `read` one read during a transfer (a commit's upload, a file
    download); `deadline` a whole metadata call, however many requests it makes and however
    slowly its answer arrives; a transfer call gets `deadline` plus its bytes at `min_rate`;
    `command` the whole command (every call, retry and wait; a transfer adds its bytes at
    `min_rate`). `answer_cap` bounds the size of every answer but a file download's (a
    commit's answer is small JSON too)."""

    connect: float
    read: float
    metadata: float = DEFAULT_METADATA_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    answer_cap: int = DEFAULT_ANSWER_CAP
    min_rate: float = DEFAULT_MIN_RATE
    command: float = DEFAULT_COMMAND_DEADLINE

    def limits(self) -> CallLimits:
        return CallLimits(
            connect=self.connect,
            metadata_read=self.metadata,
            transfer_read=self.read,
            deadline=self.deadline,
            answer_cap=self.answer_cap,
        )

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


def resolve_timeouts(
    explicit: str | None = None, deadline: str | float | None = None
) -> HubTimeouts:
    """--timeout, else $CCPO_HUB_TIMEOUT, else 10 s connect / 20 s metadata read / 300 s transfer
    read; --deadline, else $CCPO_HUB_DEADLINE, else 900 s for the whole command (and 60 s, or
    the command's deadline when shorter, for one metadata call). The timeout text is either READ
    or CONNECT,READ in seconds; a READ below the metadata default lowers that one too."""
    command = DEFAULT_COMMAND_DEADLINE
    given = deadline if deadline is not None else os.environ.get(DEADLINE_ENV)
    if given is not None and str(given).strip():
        where = "--deadline" if deadline is not None else DEADLINE_ENV
        values = _seconds(str(given), where, "one number of")
        if len(values) != 1:
            raise InvalidInput(f"{where} {given!r}: expected one number of seconds (in (0, 86400])")
        command = values[0]
    per_call = min(DEFAULT_DEADLINE, command)
    text = explicit if explicit is not None else os.environ.get(TIMEOUT_ENV)
    if text is None or not str(text).strip():
        return HubTimeouts(
            DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, deadline=per_call, command=command
        )
    where = "--timeout" if explicit is not None else TIMEOUT_ENV
    values = _seconds(str(text), where, "READ or CONNECT,READ")
    if len(values) > 2:
        raise InvalidInput(
            f"{where} {text!r}: expected READ or CONNECT,READ seconds (each in (0, 86400])"
        )
    read = values[-1]
    connect = values[0] if len(values) == 2 else min(DEFAULT_CONNECT_TIMEOUT, read)
    return HubTimeouts(
        connect,
        read,
        metadata=min(DEFAULT_METADATA_TIMEOUT, read),
        deadline=per_call,
        command=command,
    )


_blocks_lock = threading.Lock()
_blocks_inside = 0


@contextlib.contextmanager
def hub_timeouts(timeouts: HubTimeouts) -> Iterator[None]:
    """Every request huggingface_hub sends inside the block is held to ccpo's limits (see
    hub_transport.py; each `HubClient.call` inside sets its own); afterwards the library has its
    default client back."""
    # Counted: threads of one process (two pushes at once) share huggingface_hub's one client,
    # so it is swapped in by the first block to enter and given back by the last to leave;
    # swapping it under another thread's request would close that request's connection.
    global _blocks_inside
    with _blocks_lock:
        if _blocks_inside == 0:
            install_limits()
        _blocks_inside += 1
    try:
        yield
    finally:
        with _blocks_lock:
            _blocks_inside -= 1
            if _blocks_inside == 0:
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

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        status: int | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    def said_further(self, more: str) -> HubCallError:
        """The same failure (kind, status, Retry-After), its message followed by `more`."""
        return HubCallError(
            f"{self}; {more}", kind=self.kind, status=self.status, retry_after=self.retry_after
        )

    @property
    def answered(self) -> bool:
        """Whether the Hub gave a definite refusal (nothing could have landed)."""
        return (
            self.kind == "http"
            and self.status is not None
            and 400 <= self.status < 500
            and self.status != 408
        )


# Errors that mean "the library could not make sense of the answer": a field of the wrong type
# (siblings as a string), a missing key, an attribute of something that is not the object it should be.
SHAPE_ERRORS = (TypeError, KeyError, AttributeError, IndexError)


def remote_error(error: Exception, token: str | None, repo_id: str, what: str) -> HubCallError:
    """`error`, met while `what` for `repo_id`, as one HubCallError: a line that says what failed
    and how to fix it (scrubbed of the token), and the kind the retry rule decides on."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(error, HubCallError):
        return error
    if isinstance(error, (RetryableAnswer, DeadlineExceeded, AnswerTooLarge)):
        return _limit_error(error, token, f"{repo_id}: {what} failed")
    if isinstance(error, HfHubHTTPError) and error.response is not None:
        return _http_error(error, error.response.status_code, token, repo_id, what)
    if is_timeout(error):
        return HubCallError(
            f"{repo_id}: {what} failed: the Hub did not answer in time ({type(error).__name__}); "
            f"raise --timeout / {TIMEOUT_ENV} for a slow connection",
            kind="timeout",
        )
    if isinstance(error, SHAPE_ERRORS):
        return HubCallError(
            f"{repo_id}: {what} failed: the Hub's answer is not of the shape ccpo expects "
            f"({type(error).__name__}: {scrub(str(error), token)[:200]}); is the endpoint a Hugging Face Hub?",
            kind="shape",
        )
    if isinstance(
        error, ValueError
    ):  # e.g. the Hub rejected the README metadata, or an answer that is not JSON
        return HubCallError(f"{repo_id}: {what} failed: {scrub(str(error), token)}", kind="shape")
    return HubCallError(
        f"{repo_id}: {what} failed, the Hub is unreachable: {scrub(str(error), token)}",
        kind="unreachable",
    )


def _limit_error(
    error: RetryableAnswer | DeadlineExceeded | AnswerTooLarge, token: str | None, failed: str
) -> HubCallError:
    """A call that hub_transport's limits ended: an answer worth another attempt (with the
    Hub's Retry-After), no complete answer within the deadline, or an answer over its cap."""
    if isinstance(error, RetryableAnswer):
        hint = {
            429: "the Hub's rate limit (about 128 commits an hour per repository); try again later",
            409: "another commit was in progress",
        }.get(error.status, "the Hub is having trouble; try again later")
        wait = f", it asked to wait {error.retry_after:.0f} s" if error.retry_after else ""
        return HubCallError(
            f"{failed} with HTTP {error.status}{wait} ({hint})"
            + (f": {scrub(error.detail, token)}" if error.detail else ""),
            kind="retryable",
            status=error.status,
            retry_after=error.retry_after,
        )
    if isinstance(error, DeadlineExceeded):
        return HubCallError(
            f"{failed}: the Hub gave no complete answer within the deadline of "
            f"{error.seconds:.0f} s; raise --deadline / {DEADLINE_ENV} for a slow connection",
            kind="deadline",
        )
    return HubCallError(
        f"{failed}: the Hub's answer exceeded {error.cap} bytes, far more than "
        "this call needs; not reading further",
        kind="too_large",
    )


def _http_error(
    error: Exception, status: int, token: str | None, repo_id: str, what: str
) -> HubCallError:
    """An HTTP error answer: a moved head (412) and a refused token say how to go on; any other
    status is named with the Hub's first line, retryable when the retry rule's statuses say so."""
    if status == 412:
        return HubCallError(
            f"{repo_id}: the repository changed on the Hub while ccpo was publishing ({what}: 412, "
            "a commit has happened since ccpo read it); nothing was overwritten. Run the publish again "
            "to merge with the new state",
            kind="http",
            status=412,
        )
    if status in (401, 403):
        return HubCallError(
            f"{repo_id}: the Hub refused the token ({what}: {status}); check --token / HF_TOKEN",
            kind="http",
            status=status,
        )
    detail = scrub(str(error).splitlines()[0], token)
    kind = "retryable" if status in RETRY_STATUSES else "http"
    return HubCallError(
        f"{repo_id}: {what} failed with HTTP {status}: {detail}", kind=kind, status=status
    )


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


# What a failure is, for the one rule below: worth another attempt now (the Hub said "not now",
# or could not be reached); worth coming back to later, after a wait, but not in the same
# command (it did not answer in time, answered endlessly or in another shape: the same request
# now would meet the same fault; the outbox tries the entry again later); or final (a refusal:
# 4xx but 408/409/429, which only a changed token, repository or input fixes, `--retry-failed`).
TRANSIENT_KINDS = frozenset({"retryable", "unreachable"})
LATER_KINDS = TRANSIENT_KINDS | {"timeout", "deadline", "too_large", "shape"}


@dataclass(frozen=True)
class RetryRule:
    """The one retry rule of every Hub call ccpo makes (publish, sync, model download, outbox).

    Statuses worth another attempt are `statuses`, and `commit_statuses` on a commit (they add
    409: another commit was being applied); a failure without an answer is worth one when the Hub
    could not be reached. A call is tried at most `attempts` times; the n-th wait is `first_wait_s` · 2^n (at
    most `max_wait_s`) times a random factor in [0.5, 1), or the Hub's Retry-After when it sends
    one, honoured up to `retry_after_max_s` (a longer one ends the call: the caller decides when
    to come back). No wait reaches past the command's deadline."""

    statuses: frozenset[int] = RETRY_STATUSES
    commit_statuses: frozenset[int] = COMMIT_RETRY_STATUSES
    attempts: int = 5
    first_wait_s: float = 1.0
    max_wait_s: float = 30.0
    retry_after_max_s: float = 60.0

    def transient(self, failure: HubCallError, *, commit: bool = False) -> bool:
        """Whether `failure` (of a commit when `commit`) is worth another attempt now (the one
        answer every path uses)."""
        if failure.status is not None:
            return failure.status in (self.commit_statuses if commit else self.statuses)
        return failure.kind in TRANSIENT_KINDS

    def retry_later(self, failure: HubCallError) -> bool:
        """Whether a queued publication that failed so is tried again after a wait (the outbox)."""
        return failure.kind in LATER_KINDS

    def wait(self, attempt: int, retry_after: float | None) -> float:
        """Seconds before attempt `attempt + 1` (full jitter, so many clients do not retry in step)."""
        if retry_after is not None:
            return retry_after + random.uniform(0, 0.5)
        return random.uniform(0.5, 1.0) * min(self.max_wait_s, self.first_wait_s * 2**attempt)


DEFAULT_RULE = RetryRule()


class Deadline:
    """The end of one command's Hub work (time.monotonic()); a transfer moves it out by its bytes
    at the slowest rate ccpo waits for."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def remaining(self) -> float:
        return self.end - time.monotonic()

    def extend(self, seconds: float) -> None:
        self.seconds += seconds
        self.end += seconds

    def failure(self, repo_id: str, what: str) -> HubCallError:
        return HubCallError(
            f"{repo_id}: {what}: the command's deadline of {self.seconds:.0f} s passed; raise "
            f"--deadline / {DEADLINE_ENV} for a slow connection",
            kind="deadline",
        )


@dataclass
class HubClient:
    """One repository on one Hub, reached under ccpo's limits. `call` runs one library call
    with the right deadline and answer cap, retrying what `rule` calls transient; `commit` makes
    one commit that a lost answer cannot double; everything else becomes a HubCallError. Every
    call and wait ends by the command's `deadline`."""

    api: Any
    token: str | None
    repo_id: str
    timeouts: HubTimeouts
    rule: RetryRule = DEFAULT_RULE
    sleep: Callable[[float], None] = time.sleep
    log: Callable[[str], None] | None = None
    deadline: Deadline | None = None

    def __post_init__(self) -> None:
        if self.deadline is None:
            self.deadline = Deadline(self.timeouts.command)

    @property
    def attempts(self) -> int:
        return self.rule.attempts

    def restart(self) -> None:
        """A new command begins (the next outbox entry, the next follow round): a fresh deadline."""
        self.deadline = Deadline(self.timeouts.command)

    def _pause(self, what: str, attempt: int, failure: HubCallError) -> None:
        """Wait before attempt `attempt + 1`, or raise `failure` when the wait is too long."""
        wait = self.rule.wait(attempt, failure.retry_after)
        if wait > self.rule.retry_after_max_s:
            raise failure
        if wait >= self.deadline.remaining():
            raise failure.said_further(
                f"not trying again: the wait of {wait:.0f} s would pass the command's "
                f"deadline of {self.deadline.seconds:.0f} s"
            )
        if self.log is not None:
            self.log(
                f"{self.repo_id}: {what}: {failure.kind}{f' (HTTP {failure.status})' if failure.status else ''}"
                f"; sending again in {wait:.1f} s"
            )
        self.sleep(wait)

    def _once(
        self,
        what: str,
        function: Callable,
        args: tuple,
        kwargs: dict,
        *,
        deadline: float,
        transfer_cap: int | None,
    ) -> Any:
        left = self.deadline.remaining()
        if left <= 0:
            raise self.deadline.failure(self.repo_id, what)
        try:
            with limited_call(
                self.timeouts.limits(),
                deadline=min(deadline, left),
                transfer_cap=transfer_cap,
            ):
                return function(*args, **kwargs)
        except call_errors() as error:
            raise remote_error(error, self.token, self.repo_id, what) from None

    def call(
        self,
        what: str,
        function: Callable,
        *args: Any,
        transfer_bytes: int | None = None,
        transfer_cap: int | None = None,
        whole_deadline: bool = False,
        **kwargs: Any,
    ) -> Any:
        """`function(*args, **kwargs)` as one Hub call: a metadata call under the metadata deadline,
        or (`transfer_bytes` given) a transfer whose deadline grows with its size, or
        (`whole_deadline`, a download of unknown size) one under what is left of the command's;
        `transfer_cap` bounds a download's answer (any other answer is held to `answer_cap`);
        what `rule` calls transient is tried again."""
        deadline = math.inf if whole_deadline else self.timeouts.deadline
        if transfer_bytes is not None:
            deadline = self.timeouts.transfer_deadline(transfer_bytes)
            self.deadline.extend(max(transfer_bytes, 0) / self.timeouts.min_rate)
        for attempt in range(self.rule.attempts):
            try:
                return self._once(
                    what, function, args, kwargs, deadline=deadline, transfer_cap=transfer_cap
                )
            except HubCallError as failure:
                if not self.rule.transient(failure):
                    raise
                if attempt + 1 == self.rule.attempts:
                    raise failure.said_further(f"gave up after {attempt + 1} attempts") from None
                self._pause(what, attempt, failure)
        raise AssertionError("unreachable")  # the loop returns or raises

    def file_blocks(
        self, path_in_repo: str, revision: str, repo_type: str | None = None
    ) -> Generator[bytes, None, None]:
        """One file as the Hub serves it at `revision`, streamed in blocks (never held whole in
        memory), on whichever HTTP client this huggingface_hub talks; iterated inside `call`,
        so the transfer's limits hold. Close it when done (contextlib.closing)."""
        from huggingface_hub import hf_hub_url
        from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

        from ccpo_cli import __version__

        url = hf_hub_url(
            self.repo_id,
            path_in_repo,
            repo_type=repo_type,
            revision=revision,
            endpoint=self.api.endpoint,
        )
        headers = build_hf_headers(
            token=self.token, library_name="ccpo", library_version=__version__
        )
        session = get_session()
        if uses_httpx():  # huggingface_hub 1.x/2.x: httpx (a requests session's `stream` is a flag)
            with session.stream("GET", url, headers=headers, follow_redirects=True) as response:
                hf_raise_for_status(response)
                yield from response.iter_bytes(1 << 16)
        else:  # 0.3x: requests
            response = session.get(url, headers=headers, stream=True, allow_redirects=True)
            try:
                hf_raise_for_status(response)
                yield from response.iter_content(1 << 16)
            finally:
                response.close()

    def commit(
        self,
        what: str,
        send: Callable[[], str],
        landed: Callable[[], str | None],
        *,
        size_bytes: int = 0,
        refused: Callable[[HubCallError], bool] | None = None,
    ) -> tuple[str, bool]:
        """One commit: `send()` makes it and returns its id; after any failure but a definite
        refusal, `landed()` (the check of this kind of repository: a publication key in the
        history, part files in the dataset) is asked before it is sent again, so a commit whose
        answer was lost is recognised, not made twice. (The commit id, whether found landed.)
        `refused(failure)` may end the loop at once (a 412 the caller merges)."""
        deadline = self.timeouts.transfer_deadline(size_bytes)
        self.deadline.extend(max(size_bytes, 0) / self.timeouts.min_rate)
        for attempt in range(self.rule.attempts):
            try:
                oid = self._once(what, send, (), {}, deadline=deadline, transfer_cap=None)
                if not isinstance(oid, str) or not oid:
                    raise HubCallError(
                        f"{self.repo_id}: {what} failed: the Hub's answer names no commit",
                        kind="shape",
                    )
                return oid, False
            except HubCallError as failure:
                if failure.answered or (refused is not None and refused(failure)):
                    raise
                found = landed()
                if found is not None:
                    if self.log is not None:
                        self.log(
                            f"{self.repo_id}: {what}: the answer was lost, but the commit landed ({found[:12]})"
                        )
                    return found, True
                if not self.rule.transient(failure, commit=True):
                    raise
                if attempt + 1 == self.rule.attempts:
                    raise failure.said_further(f"gave up after {attempt + 1} attempts") from None
                self._pause(what, attempt, failure)
        raise AssertionError("unreachable")
