"""The limits every HTTP request huggingface_hub sends for ccpo is held to, on both of its lines.

A Hub call (one `HfApi` method, one download) runs inside `limited_call`, which gives it:

- a connect timeout, and a read timeout that is short for metadata requests and long for
  transfers (a commit's upload, an LFS PUT, a file download), each cut to what is left of
- an overall deadline for the whole call, however many requests the library makes inside it
  and however slowly an answer trickles in: when it passes, every connection the call opened is
  shut and the call ends with `DeadlineExceeded`;
- a size cap on each answer (`AnswerTooLarge`), so an endless answer never fills memory: the
  metadata cap for every answer but a file download's (commits included), the call's own for a
  download;
- no silent retries inside the library: an answer ccpo retries itself (408, 429, 5xx, and 409 on
  a commit) ends the request with `RetryableAnswer`, carrying the status and `Retry-After`, so
  the caller decides whether to wait, re-read the remote head, or give up.

huggingface_hub 1.x/2.x talks httpx (its `huggingface_hub.utils.httpx`): the limits go in through
the client factory (`set_client_factory`), as request and response event hooks and a wrapped
response stream. 0.3x talks requests: they go in through the session factory
(`configure_http_backend`), as an adapter that sets the timeouts and checks the answer, and a
wrapped raw stream. Outside `limited_call` the hooks do nothing; `remove_limits` gives the
library its default client back.

One concern, kept in one file past 400 lines: the same limits (timeouts, the call's deadline,
the answer cap, no silent retries) are installed into both HTTP stacks huggingface_hub may use,
httpx and requests, and the two installations are kept side by side so they stay one rule.
"""

from __future__ import annotations

import contextlib
import email.utils
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

# The Hub's own words for "not now" (rate limit, a commit in progress, a gateway that gave up):
# the transport ends a request on them, so the library never retries one silently, and they are
# the default statuses of hub_access.RetryRule, which decides whether ccpo tries again. 409 only
# on a commit: elsewhere it means "already exists", which the library handles.
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
COMMIT_RETRY_STATUSES = RETRY_STATUSES | {409}


class TransportLimit(Exception):
    """A request ended by one of ccpo's limits (never raised by the HTTP libraries themselves)."""


class DeadlineExceeded(TransportLimit):
    def __init__(self, seconds: float):
        super().__init__(f"no complete answer within the call's deadline of {seconds:.0f} s")
        self.seconds = seconds


class AnswerTooLarge(TransportLimit):
    def __init__(self, cap: int):
        super().__init__(f"the answer exceeded {cap} bytes")
        self.cap = cap


class RetryableAnswer(TransportLimit):
    def __init__(self, status: int, retry_after: float | None, detail: str):
        super().__init__(f"HTTP {status}" + (f": {detail}" if detail else ""))
        self.status = status
        self.retry_after = retry_after
        self.detail = detail


@dataclass(frozen=True)
class CallLimits:
    """The numbers one Hub call is held to (seconds and bytes)."""

    connect: float
    metadata_read: float
    transfer_read: float
    deadline: float
    answer_cap: int


@dataclass
class _Budget:
    limits: CallLimits
    started: float
    deadline: float  # time.monotonic() value
    answer_cap: int  # one metadata answer
    transfer_cap: int | None  # one transfer answer (a download); None: bounded by the deadline only
    expired: bool = False
    sockets: list[socket.socket] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    timer: threading.Timer | None = None

    def cap_for(self, method: str, path: str) -> int | None:
        # Only a download's answer is large: a commit's or an upload's answer is small JSON, so
        # an endless answer to one is cut at the metadata cap, not read until memory fills.
        return self.transfer_cap if _is_download(path) else self.answer_cap

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check(self) -> None:
        if self.expired or self.remaining() <= 0:
            self.expired = True
            raise DeadlineExceeded(self.deadline - self.started)

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self.lock:
            if self.expired:
                _shut(sock)
            else:
                self.sockets.append(sock)

    def expire(self) -> None:
        """The watchdog: the deadline passed, so every connection of this call is shut (a read
        blocked on a trickling answer returns at once)."""
        with self.lock:
            self.expired = True
            for sock in self.sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


# The call in progress. A plain global, not a context variable: the library runs some requests
# in worker threads (parallel uploads), and those must be held to the same call's limits.
_CURRENT: _Budget | None = None


@contextlib.contextmanager
def limited_call(
    limits: CallLimits,
    *,
    deadline: float | None = None,
    answer_cap: int | None = None,
    transfer_cap: int | None = None,
) -> Iterator[_Budget]:
    """Hold every request inside the block to `limits` (with this call's own deadline and answer
    caps when given: `answer_cap` for metadata answers, `transfer_cap` for downloads). Needs
    `install_limits` to have run."""
    global _CURRENT
    seconds = limits.deadline if deadline is None else deadline
    now = time.monotonic()
    budget = _Budget(
        limits,
        now,
        now + seconds,
        limits.answer_cap if answer_cap is None else answer_cap,
        transfer_cap,
    )
    budget.timer = threading.Timer(max(seconds, 0.0), budget.expire)
    budget.timer.daemon = True
    budget.timer.start()
    previous, _CURRENT = _CURRENT, budget
    try:
        yield budget
    except Exception as error:
        if budget.expired and not isinstance(error, TransportLimit):
            # the watchdog shut a connection: the library reports a broken read, the truth is the deadline
            raise DeadlineExceeded(seconds) from None
        raise
    finally:
        # Two calls may overlap in threads of one process (two pushes of one test, a follower
        # beside an uploader): only the call that is current hands back, and never to a finished one.
        budget.finished = True
        if _CURRENT is budget:
            _CURRENT = (
                previous
                if previous is not None and not getattr(previous, "finished", False)
                else None
            )
        budget.timer.cancel()


def _is_transfer(method: str, path: str) -> bool:
    return method == "PUT" or (method == "POST" and "/commit/" in path) or "/resolve/" in path


def _is_download(path: str) -> bool:
    return "/resolve/" in path


def _request_timeouts(method: str, path: str) -> tuple[float, float] | None:
    """(connect, read) for one request of the call in progress; None outside a call."""
    budget = _CURRENT
    if budget is None:
        return None
    budget.check()
    left = max(budget.remaining(), 0.05)
    read = (
        budget.limits.transfer_read if _is_transfer(method, path) else budget.limits.metadata_read
    )
    return min(budget.limits.connect, left), min(read, left)


def _retry_after(value: str | None) -> float | None:
    """Retry-After in seconds (a number, or an HTTP date); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _check_answer(status: int, headers: Any, method: str, path: str) -> None:
    """Raise for an answer ccpo retries itself, or one announced as too large."""
    budget = _CURRENT
    if budget is None:
        return
    cap = budget.cap_for(method, path)
    statuses = COMMIT_RETRY_STATUSES if method == "POST" and "/commit/" in path else RETRY_STATUSES
    if status in statuses:
        detail = str(headers.get("X-Error-Message") or headers.get("x-error-message") or "")[:300]
        raise RetryableAnswer(
            status, _retry_after(headers.get("Retry-After") or headers.get("retry-after")), detail
        )
    length = headers.get("Content-Length") or headers.get("content-length")
    if cap is not None and length is not None and str(length).isdigit() and int(length) > cap:
        raise AnswerTooLarge(cap)


def _counted(chunks: Iterator[bytes], budget: _Budget | None, cap: int | None) -> Iterator[bytes]:
    """The answer's chunks, ended by the size cap or the deadline."""
    if budget is None:
        yield from chunks
        return
    seen = 0
    try:
        for chunk in chunks:
            seen += len(chunk)
            if cap is not None and seen > cap:
                raise AnswerTooLarge(cap)
            budget.check()
            yield chunk
    except TransportLimit:
        raise
    except Exception:
        if budget.expired:
            raise DeadlineExceeded(budget.deadline - budget.started) from None
        raise


# --- huggingface_hub 1.x/2.x: httpx -------------------------------------------------------


def _httpx_client_factory():
    from huggingface_hub.utils import _http, httpx

    client = _http.default_client_factory()
    hooks = dict(client.event_hooks)

    def request_hook(request) -> None:
        timeouts = _request_timeouts(request.method, request.url.path)
        if timeouts is not None:
            connect, read = timeouts
            request.extensions["timeout"] = {
                "connect": connect,
                "read": read,
                "write": read,
                "pool": connect,
            }

    def response_hook(response) -> None:
        budget = _CURRENT
        if budget is None:
            return
        stream = response.extensions.get("network_stream")
        sock = None
        if stream is not None:
            with contextlib.suppress(Exception):
                sock = stream.get_extra_info("socket")
        budget.watch(sock)
        method, path = response.request.method, response.request.url.path
        _check_answer(response.status_code, response.headers, method, path)
        inner = response.stream
        cap = budget.cap_for(method, path)

        class CappedStream(httpx.SyncByteStream):
            def __iter__(self):
                return _counted(iter(inner), budget, cap)

            def close(self) -> None:
                inner.close()

        response.stream = CappedStream()

    request_hook.ccpo_limits = True  # type: ignore[attr-defined]
    response_hook.ccpo_limits = True  # type: ignore[attr-defined]
    hooks["request"] = [*hooks.get("request", []), request_hook]
    hooks["response"] = [*hooks.get("response", []), response_hook]
    client.event_hooks = hooks
    return client


# --- huggingface_hub 0.3x: requests (CI's .venv-verl) ----------------------------------------


class _CappedRaw:
    """A urllib3 response whose body is read under the call's size cap and deadline."""

    def __init__(self, raw, budget: _Budget, cap: int | None):
        self._raw = raw
        self._budget = budget
        self._cap = cap

    def stream(self, amt=2**16, decode_content=None):
        return _counted(
            self._raw.stream(amt, decode_content=decode_content), self._budget, self._cap
        )

    def read(self, amt=None, *args, **kwargs):
        if amt is None:  # the whole body: in chunks, so the cap holds before memory fills
            return b"".join(self.stream(2**16, decode_content=kwargs.get("decode_content")))
        return self._raw.read(amt, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._raw, name)


def _requests_session():
    import requests
    from huggingface_hub.utils import _http

    base = getattr(_http, "UniqueRequestIdAdapter", requests.adapters.HTTPAdapter)

    class LimitedAdapter(base):
        ccpo_limits = True

        def send(self, request, **kwargs):
            path = requests.utils.urlparse(request.url).path
            timeouts = _request_timeouts(request.method, path)
            if timeouts is None:
                if kwargs.get("timeout") is None:
                    kwargs["timeout"] = None
                return super().send(request, **kwargs)
            kwargs["timeout"] = timeouts
            response = super().send(request, **kwargs)
            budget = _CURRENT
            if budget is None:  # the call ended in another thread meanwhile (see limited_call)
                return response
            raw = response.raw
            connection = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
            budget.watch(getattr(connection, "sock", None))
            try:
                _check_answer(response.status_code, response.headers, request.method, path)
            except TransportLimit:
                response.close()
                raise
            response.raw = _CappedRaw(raw, budget, budget.cap_for(request.method, path))
            return response

    session = requests.Session()
    session.mount("http://", LimitedAdapter())
    session.mount("https://", LimitedAdapter())
    return session


# --- installing ---------------------------------------------------------------------------


def uses_httpx() -> bool:
    """Whether this huggingface_hub talks httpx (1.x/2.x) rather than requests (0.3x)."""
    import huggingface_hub.utils as hf_utils

    return hasattr(hf_utils, "set_client_factory")


def install_limits() -> None:
    """Route huggingface_hub's requests through ccpo's limits (they apply inside `limited_call`)."""
    import huggingface_hub.utils as hf_utils

    if uses_httpx():
        hf_utils.set_client_factory(_httpx_client_factory)
    else:
        hf_utils.configure_http_backend(backend_factory=_requests_session)


def remove_limits() -> None:
    """Give huggingface_hub its default client back (other users in the process)."""
    import huggingface_hub.utils as hf_utils

    if uses_httpx():
        from huggingface_hub.utils import _http

        hf_utils.set_client_factory(_http.default_client_factory)
    else:
        hf_utils.configure_http_backend()


def limits_installed() -> bool:
    """Whether the session huggingface_hub uses now carries ccpo's limits (tests look)."""
    from huggingface_hub.utils import get_session

    session = get_session()
    if hasattr(session, "event_hooks"):
        return any(
            getattr(hook, "ccpo_limits", False) for hook in session.event_hooks.get("request", [])
        )
    return any(getattr(adapter, "ccpo_limits", False) for adapter in session.adapters.values())
