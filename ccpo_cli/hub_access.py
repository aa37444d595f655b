"""How ccpo reaches the Hub: which token, and how long to wait.

The token comes from --token (``-`` reads it from stdin, so it never shows in `ps`),
--token-file, HF_TOKEN or the saved login, in that order. Every request huggingface_hub sends
for ccpo carries a connect and a read timeout, so a Hub that accepts a connection and never
answers ends in exit 4 instead of a hang.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ccpo_cli.errors import InvalidInput, RemoteError

TIMEOUT_ENV = "CCPO_HUB_TIMEOUT"
# Connect fails fast; read is generous, since a large upload's final answer can take minutes.
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 300.0


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


@dataclass(frozen=True)
class HubTimeouts:
    connect: float
    read: float


def resolve_timeouts(explicit: str | None = None) -> HubTimeouts:
    """--timeout, else $CCPO_HUB_TIMEOUT, else 10 s connect / 300 s read. The text is either
    READ or CONNECT,READ in seconds."""
    text = explicit if explicit is not None else os.environ.get(TIMEOUT_ENV)
    if text is None or not str(text).strip():
        return HubTimeouts(DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)
    where = "--timeout" if explicit is not None else TIMEOUT_ENV
    try:
        values = [float(part) for part in str(text).split(",")]
    except ValueError:
        values = []
    if len(values) not in (1, 2) or not all(math.isfinite(v) and 0 < v <= 86_400 for v in values):
        raise InvalidInput(f"{where} {text!r}: expected READ or CONNECT,READ seconds (each in (0, 86400])")
    if len(values) == 1:
        return HubTimeouts(min(DEFAULT_CONNECT_TIMEOUT, values[0]), values[0])
    return HubTimeouts(values[0], values[1])


@contextlib.contextmanager
def hub_timeouts(timeouts: HubTimeouts) -> Iterator[None]:
    """Every request huggingface_hub sends inside the block carries these timeouts where the
    call gave none; afterwards the library is as it was (other users in the process)."""
    install_timeouts(timeouts)
    try:
        yield
    finally:
        remove_timeouts()


def remove_timeouts() -> None:
    import huggingface_hub.utils as hf_utils

    if hasattr(hf_utils, "set_client_factory"):
        session = hf_utils.get_session()
        hooks = dict(session.event_hooks)
        hooks["request"] = [hook for hook in hooks.get("request", []) if not getattr(hook, "ccpo_timeouts", False)]
        session.event_hooks = hooks
    else:  # huggingface_hub 0.3x (CI's .venv-verl)
        hf_utils.configure_http_backend()


def install_timeouts(timeouts: HubTimeouts) -> None:
    """Make every request huggingface_hub sends carry these timeouts where the call gave none.

    huggingface_hub 1.x/2.x (httpx) passes ``timeout=None`` on many calls, which disables the
    client's default, so the timeouts go in through a request event hook on the shared session
    (`get_session`). The 0.3x line (requests) takes a session factory (`configure_http_backend`)
    whose adapter fills in the timeout that requests would otherwise leave unbounded.
    """
    import huggingface_hub.utils as hf_utils

    if hasattr(hf_utils, "set_client_factory"):
        session = hf_utils.get_session()
        hooks = dict(session.event_hooks)
        kept = [hook for hook in hooks.get("request", []) if not getattr(hook, "ccpo_timeouts", False)]
        hooks["request"] = kept + [_httpx_timeout_hook(timeouts)]
        session.event_hooks = hooks
    else:  # huggingface_hub 0.3x (CI's .venv-verl)
        hf_utils.configure_http_backend(backend_factory=lambda: _requests_session(timeouts))


def _httpx_timeout_hook(timeouts: HubTimeouts):
    wanted = {"connect": timeouts.connect, "read": timeouts.read, "write": timeouts.read, "pool": timeouts.connect}

    def fill_timeouts(request) -> None:
        current = dict(request.extensions.get("timeout") or {})
        request.extensions["timeout"] = {key: current.get(key) or value for key, value in wanted.items()}

    fill_timeouts.ccpo_timeouts = True  # type: ignore[attr-defined]
    return fill_timeouts


def _requests_session(timeouts: HubTimeouts):  # huggingface_hub 0.3x (CI's .venv-verl)
    import requests
    from requests.adapters import HTTPAdapter

    class TimeoutAdapter(HTTPAdapter):
        def send(self, request, **kwargs):
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = (timeouts.connect, timeouts.read)
            return super().send(request, **kwargs)

    session = requests.Session()
    session.mount("http://", TimeoutAdapter())
    session.mount("https://", TimeoutAdapter())
    return session


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


def remote_error(error: Exception, token: str | None, repo_id: str, what: str) -> RemoteError:
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(error, HfHubHTTPError) and error.response is not None:
        status = error.response.status_code
        if status == 412:
            return RemoteError(
                f"{repo_id}: the repository changed on the Hub while ccpo was publishing ({what}: 412, "
                "a commit has happened since ccpo read it); nothing was overwritten. Run the publish again "
                "to merge with the new state"
            )
        if status in (401, 403):
            return RemoteError(f"{repo_id}: the Hub refused the token ({what}: {status}); check --token / HF_TOKEN")
        detail = scrub(str(error).splitlines()[0], token)
        return RemoteError(f"{repo_id}: {what} failed with HTTP {status}: {detail}")
    if is_timeout(error):
        return RemoteError(
            f"{repo_id}: {what} failed: the Hub did not answer in time ({type(error).__name__}); "
            f"raise --timeout / {TIMEOUT_ENV} for a slow connection"
        )
    if isinstance(error, ValueError):  # e.g. the Hub rejected the README metadata
        return RemoteError(f"{repo_id}: {what} failed: {scrub(str(error), token)}")
    return RemoteError(f"{repo_id}: {what} failed, the Hub is unreachable: {scrub(str(error), token)}")


def transport_errors() -> tuple[type[BaseException], ...]:
    """Connection failures of the HTTP client this huggingface_hub uses: from 1.0 on the httpx it
    exposes as `huggingface_hub.utils.httpx`; 0.3x uses requests, whose errors are OSErrors already."""
    try:
        from huggingface_hub.utils import httpx
    except ImportError:
        return ()
    return (httpx.HTTPError,)
