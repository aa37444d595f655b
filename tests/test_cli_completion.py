"""Shell completion of arm names, run names, benchmarks and backends, in bash.

The completion script is the one `ccpo` prints for bash; bash sources it and calls its function
with COMP_WORDS/COMP_CWORD as readline would, against a `ccpo` on PATH that runs this checkout.

Asked for in issue 23, item 2.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ccpo_cli import store
from ccpo_cli.store.identity import ExternalArm

REPO_ROOT = Path(__file__).resolve().parents[1]
BASH = shutil.which("bash")


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """(run a completion in bash, the database it reads by default)."""
    folder = tmp_path_factory.mktemp("completion")
    binary = folder / "bin"
    binary.mkdir()
    ccpo = binary / "ccpo"
    # As pip writes the console script: the program's name is `ccpo`.
    ccpo.write_text(
        f"#!{sys.executable}\nimport sys\nfrom ccpo_cli.cli.app import main\nsys.exit(main())\n",
        encoding="utf-8",
    )
    ccpo.chmod(0o755)
    db = store.open_db(folder / "runs.db")
    for name in ("grpo-seed0", "grpo-seed1", "gigpo-seed0", "odd_name.1", "oddXname"):
        store.ensure_run(db, name, arm=ExternalArm("grpo"))
    other = store.open_db(folder / "other.db")
    store.ensure_run(other, "elsewhere-run")
    environment = dict(
        os.environ, PATH=f"{binary}{os.pathsep}{os.environ['PATH']}", PYTHONPATH=str(REPO_ROOT)
    )
    environment.pop("CCPO_DB", None)
    script = subprocess.run(
        ["ccpo"],
        env=dict(environment, _CCPO_COMPLETE="source_bash"),
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert "complete -o default -F _ccpo_completion ccpo" in script

    def complete(line: str, **env: str) -> list[str]:
        words = line.split(" ")
        program = (
            script + "\nCOMP_WORDS=(" + " ".join(f"'{word}'" for word in words) + ")\n"
            f"COMP_CWORD={len(words) - 1}\n_ccpo_completion ccpo\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n"
        )
        done = subprocess.run(
            [BASH, "--norc", "-c", program],
            env=dict(environment, **env),
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return [word for word in done.stdout.splitlines() if word]

    return complete, folder


def test_run_names_come_from_the_database(shell):
    complete, folder = shell
    assert complete("ccpo runs show grpo") == ["grpo-seed0", "grpo-seed1"]
    assert complete("ccpo compare g") == ["gigpo-seed0", "grpo-seed0", "grpo-seed1"]
    assert complete("ccpo card --run gi") == ["gigpo-seed0"]
    assert complete("ccpo runs show odd_") == [
        "odd_name.1"
    ]  # `_` is a character, not SQL's wildcard


def test_run_names_follow_the_database_the_line_names(shell):
    complete, folder = shell
    other = str(folder / "other.db")
    assert complete(f"ccpo --db {other} runs show e") == ["elsewhere-run"]
    assert complete(f"ccpo runs show --db {other} e") == ["elsewhere-run"]  # --db after the command
    assert complete("ccpo runs show e", CCPO_DB=other) == ["elsewhere-run"]
    assert complete("ccpo --db /no/such/file.db runs show g") == []  # nothing, and no traceback


def test_arm_names_benchmarks_and_backends(shell):
    complete, _ = shell
    assert complete("ccpo train --arm return") == ["return-hard", "return-hard-fbjw"]
    assert complete("ccpo arms show gl") == ["global-successor"]
    assert complete("ccpo matrix --arms grpo,gi") == ["grpo,gigpo"]
    assert complete("ccpo train --backend ") == ["local", "verl"]
    assert complete("ccpo ingest log.txt --benchmark web") == ["webshop"]
    assert complete("ccpo eval --agent o") == ["oracle"]
    assert "retract" in complete("ccpo runs re")
