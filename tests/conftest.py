"""Session-wide test environment and the fixtures shared across test areas.

Nothing here may reach outside the machine. Plain helpers that build data (batches, databases,
metrics files, tiny models) live in `tests/helpers_*.py` and are imported normally; fixtures
live here so that tests only name them as arguments.
"""

import os
import socket
import tempfile

import pytest
from helpers_cache import SHARED
from hypothesis import settings as hypothesis_settings

# alfworld creates $ALFWORLD_DATA at import time (default ~/.cache/alfworld): keep tests in a temp
# dir. conftest.py is imported before any test module, so this holds for every engine import.
os.environ.setdefault("ALFWORLD_DATA", tempfile.mkdtemp(prefix="ccpo-alfworld-data-"))
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# Ray instances the tests start listen on 127.0.0.1 only (read by Ray when it is imported).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# A table is as wide as COLUMNS says (160 without it): tests that print one set their own width,
# and none inherits one (pytest-xdist's workers start with COLUMNS=80 and LINES=24).
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)
# Shipped game sets are regenerated from their manifests into this cache once, for every worker
# of this test run and later runs of the same code (tests/helpers_cache.py).
os.environ.setdefault("CCPO_CACHE_DIR", str(SHARED / "ccpo-cache"))

# CI explores the same hypothesis examples on every run, so a red build is reproducible;
# locally hypothesis keeps searching new ones.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


@pytest.fixture
def loopback_only(monkeypatch):
    """Sockets may connect to loopback only; anything else fails loudly and is listed."""
    real_connect = socket.socket.connect
    attempts: list = []

    def guarded_connect(self, address):
        host = address[0] if isinstance(address, tuple) else address
        if self.family in (socket.AF_INET, socket.AF_INET6) and host not in LOOPBACK_HOSTS:
            attempts.append(address)
            raise OSError(f"network access outside loopback blocked in tests: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    yield attempts


@pytest.fixture
def no_network(loopback_only):
    """Loopback only, and the test fails afterwards if anything tried to leave the machine."""
    yield
    assert loopback_only == [], f"a test tried to leave the machine: {loopback_only}"


@pytest.fixture
def no_sockets(monkeypatch):
    """No socket may be opened at all (a dry run must not touch the network)."""
    opened: list = []

    def refusing_init(self, *args, **kwargs):
        opened.append(args)
        raise OSError("socket creation blocked: this code path must not use the network")

    monkeypatch.setattr(socket.socket, "__init__", refusing_init)
    yield opened


@pytest.fixture
def hub_env(monkeypatch, tmp_path):
    """A private HF_HOME, no inherited token or endpoint, and huggingface_hub's own background
    lookups (agent-harness registry) pointed at an empty local file instead of the public Hub."""
    from huggingface_hub import constants

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    registry = tmp_path / "hf-home" / "agent_harnesses.json"
    registry.parent.mkdir(parents=True)
    registry.write_text('{"standardEnvVars": [], "harnesses": {}}')
    # (huggingface_hub 0.3x has no such registry; setting the name there is harmless)
    monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(registry), raising=False)
    yield tmp_path


@pytest.fixture
def hub(hub_env, loopback_only, monkeypatch):
    """The loopback fake Hub (tests/fakehub.py) with huggingface_hub pointed at it; the test fails
    if anything tried to reach another host."""
    from fakehub import FakeHub
    from helpers_hub import TOKEN, started_with

    with FakeHub(token=TOKEN) as fake:
        started_with(monkeypatch, fake.endpoint)
        yield fake
    assert loopback_only == [], f"the Hub client tried to leave the machine: {loopback_only}"
