"""The integration suite: ccpo against verl-agent's real modules, on CPU, in the environment
`scripts/verl_env.sh` builds. verl-agent is imported from VERL_AGENT_HOME (never installed)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

HOME = os.environ.get("VERL_AGENT_HOME")
if HOME and os.path.abspath(HOME) not in sys.path:
    sys.path.insert(0, os.path.abspath(HOME))


def pytest_collection_modifyitems(config, items):
    # Never a silent skip: run without a verl-agent checkout, this suite refuses to start.
    here = Path(__file__).parent
    if not HOME and any(here in Path(str(item.fspath)).parents for item in items):
        raise pytest.UsageError(
            "tests/verl_integration needs VERL_AGENT_HOME, a verl-agent checkout to test "
            "against (.ci/run sets it)"
        )


@pytest.fixture(scope="session")
def verl_home() -> Path:
    return Path(HOME).resolve()


@pytest.fixture(scope="session")
def verl_agent_home() -> str:
    return os.path.abspath(HOME)
