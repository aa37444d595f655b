"""The verl-agent checkout a run launches from: where it is, which commit it is, and what its Ray
workers get.

The commit is read from git when the checkout is a repository, else from a `SOURCE.md` that names
it in backticks (how a source snapshot without `.git` records where it came from). Only one tree
has been checked against this backend (docs/verl-backend.md); any other gets a warning that
names it, since an older tree can fail Hydra composition or lack a patch point.

verl-agent's own Ray worker environment (`verl.trainer.constants_ppo`: NCCL / vLLM settings that
stop tensor-parallel hangs) is read statically here, for the dry-run and `config.json`; the entry
module imports the real function at launch and merges the same values.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ccpo_cli.errors import CcpoError

VERL_AGENT_HOME = "VERL_AGENT_HOME"
# The interpreter of the verl-agent environment (it pins its own torch/vLLM/Ray and cannot share
# this one); run.sh falls back to python3 on PATH.
VERL_PYTHON = "CCPO_VERL_PYTHON"
GET_VERL_AGENT = (
    "verl-agent is not on PyPI: clone https://github.com/langfengQ/verl-agent, install it in its own "
    "environment (its README: Python 3.12, vllm==0.11.0, flash-attn, `pip install -e .`, alfworld, "
    "`alfworld-download -f`), install ccpo into that environment too, then pass "
    f"--verl-agent PATH or set {VERL_AGENT_HOME}"
)
# The verl-agent commit the integration suite runs against (tests/verl_integration/).
TESTED_COMMIT = "20bd331"
CONSTANTS_MODULE = "verl.trainer.constants_ppo"
_SOURCE_FILES = ("SOURCE.md",)
_COMMIT_IN_TEXT = re.compile(r"commit\s+`([0-9a-f]{7,40})`", re.IGNORECASE)


def locate(path: Path | None) -> Path | None:
    """--verl-agent PATH, else $VERL_AGENT_HOME, resolved; None when neither is given."""
    candidate = path if path is not None else os.environ.get(VERL_AGENT_HOME)
    if not candidate:
        return None
    return Path(candidate).expanduser().resolve()


def require(home: Path | None) -> Path:
    """The checkout to launch from, or a CcpoError saying how to get one."""
    if home is None:
        raise CcpoError(f"no verl-agent checkout: {GET_VERL_AGENT}")
    if (
        not (home / "verl" / "trainer" / "main_ppo.py").is_file()
        or not (home / "agent_system").is_dir()
    ):
        raise CcpoError(
            f"{home} is not a verl-agent checkout (no verl/trainer/main_ppo.py and agent_system/); {GET_VERL_AGENT}"
        )
    return home


def read_commit(home: Path) -> tuple[str | None, str | None]:
    """(commit, where it was read from) of a verl-agent checkout; (None, None) when unknown."""
    home = Path(home)
    if (home / ".git").exists():
        try:
            completed = subprocess.run(
                ["git", "-C", str(home), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            completed = None
        if completed is not None and completed.returncode == 0 and completed.stdout.strip():
            return completed.stdout.strip(), "git"
    for name in _SOURCE_FILES:
        path = home / name
        if path.is_file():
            match = _COMMIT_IN_TEXT.search(path.read_text(encoding="utf-8", errors="replace"))
            if match:
                return match.group(1), name
    return None, None


def is_tested_commit(commit: str | None) -> bool:
    if not commit:
        return False
    return commit.startswith(TESTED_COMMIT) or TESTED_COMMIT.startswith(commit)


def describe(home: Path | None) -> dict[str, Any]:
    """What config.json and the dry-run say about the checkout, with a warning when it is not the tested tree."""
    if home is None:
        return {
            "path": None,
            "commit": None,
            "commit_source": None,
            "tested_commit": TESTED_COMMIT,
            "warning": f"no verl-agent checkout given (--verl-agent or VERL_AGENT_HOME): its commit is not recorded; "
            f"the tested commit is {TESTED_COMMIT}",
        }
    commit, source = read_commit(home)
    if commit is None:
        warning = (
            f"the commit of verl-agent at {home} is unknown (no .git, no SOURCE.md naming it); "
            f"this backend is tested against commit {TESTED_COMMIT}"
        )
    elif not is_tested_commit(commit):
        warning = (
            f"verl-agent at {home} is commit {commit[:12]}, not the tested commit {TESTED_COMMIT}: "
            "Hydra keys or patch points may differ"
        )
    else:
        warning = None
    return {
        "path": str(home),
        "commit": commit,
        "commit_source": source,
        "tested_commit": TESTED_COMMIT,
        "warning": warning,
    }


def ray_runtime_env_vars(home: Path | None) -> dict[str, str] | None:
    """The env_vars verl-agent gives its Ray workers, read from its source; None when not found.

    Read without importing (the launcher's environment may not hold verl): the literal
    `PPO_RAY_RUNTIME_ENV` dict of `verl/trainer/constants_ppo.py`.
    """
    if home is None:
        return None
    path = Path(home) / (CONSTANTS_MODULE.replace(".", "/") + ".py")
    if not path.is_file():
        return None
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            getattr(target, "id", None) == "PPO_RAY_RUNTIME_ENV" for target in node.targets
        ):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            return {str(key): str(item) for key, item in dict(value.get("env_vars", {})).items()}
    return None


def merged_worker_env(
    verl_env_vars: Mapping[str, str] | None, defaults: Mapping[str, str], run_env: Mapping[str, str]
) -> dict[str, str]:
    """verl-agent's worker variables (or, without them, the defaults older trees set), then the run's own."""
    merged = dict(defaults if verl_env_vars is None else verl_env_vars)
    merged.update(run_env)
    return merged
