"""Commands import only what they use.

Each light command runs in a fresh interpreter through the `ccpo` entry point (`cli/app.py
main`), and the modules it loaded are read from `sys.modules` at exit. No torch, transformers,
Ray, matplotlib or pandas for commands that do not train, evaluate or plot; scipy only for the
commands that compute statistics; and `--help` and a TAB of completion answer without even
sqlite-utils or numpy. Speed itself is measured by scripts/bench_cli.py, never asserted here.

Asked for in issue 23, item 1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ccpo_cli import store
from ccpo_cli.store.identity import ExternalArm

REPO_ROOT = Path(__file__).resolve().parents[1]
HEAVY = {"torch", "transformers", "ray", "matplotlib", "pandas", "scipy"}
# What the fast path (help, completion) must not load either.
STORE_LIBRARIES = {"sqlite_utils", "numpy", "huggingface_hub", "jinja2"}

PROBE = """
import atexit, json, sys
OUT = sys.argv[1]
def _dump():
    with open(OUT, "w") as handle:
        json.dump(sorted({name.split(".")[0] for name in sys.modules}), handle)
atexit.register(_dump)
sys.argv = ["ccpo", *sys.argv[2:]]
from ccpo_cli.cli.app import main
main()
"""


def loaded_modules(
    tmp_path: Path, *args: str, env: dict | None = None
) -> tuple[set[str], subprocess.CompletedProcess]:
    out = tmp_path / "modules.json"
    environment = dict(os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS="120", **(env or {}))
    environment.pop("VIRTUAL_ENV", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(out), *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return set(json.loads(out.read_text())), done


@pytest.fixture(scope="module")
def small_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("startup") / "runs.db"
    db = store.open_db(path)
    for name, arm in (("a-seed0", "grpo"), ("b-seed0", "return-hard")):
        store.ensure_run(db, name, arm=ExternalArm(arm), seed=0, total_steps=20, base_model="m")
        for step in range(0, 21, 5):
            store.record_evaluation(db, name, step, successes=step, episodes=40)
    return path


@pytest.mark.parametrize(
    "args", [["--help"], ["runs", "--help"], ["train", "--help"], ["compare", "--help"]]
)
def test_help_loads_no_library(tmp_path, args):
    modules, done = loaded_modules(tmp_path, *args)
    assert done.returncode == 0, done.stderr
    assert not modules & (HEAVY | STORE_LIBRARIES), sorted(modules & (HEAVY | STORE_LIBRARIES))


def test_completion_of_run_names_loads_no_library(tmp_path, small_db):
    modules, done = loaded_modules(
        tmp_path,
        env={
            "_CCPO_COMPLETE": "complete_bash",
            "COMP_WORDS": f"ccpo --db {small_db} runs show a",
            "COMP_CWORD": "5",
        },
    )
    assert done.stdout.split() == ["a-seed0"], (done.stdout, done.stderr)
    assert not modules & (HEAVY | STORE_LIBRARIES), sorted(modules & (HEAVY | STORE_LIBRARIES))


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "list"],
        ["runs", "list", "--format", "csv"],
        ["runs", "show", "a-seed0"],
        ["arms", "list"],
        ["arms", "show", "return-hard"],
        ["runs", "retract", "b-seed0", "--step", "5", "--reason", "probe"],
    ],
)
def test_light_commands_load_no_heavy_module(tmp_path, small_db, args):
    modules, done = loaded_modules(tmp_path, "--db", str(small_db), *args)
    assert done.returncode == 0, done.stderr
    assert not modules & HEAVY, sorted(modules & HEAVY)


def test_compare_loads_scipy_only_for_the_power_of_a_pair_and_nothing_heavier(tmp_path, small_db):
    # The two-arm test is scipy-free (ccpo_cli/distributions.py); scipy computes only the power of
    # a pair with seeds enough for one. Here each arm has one seed: no power, no scipy.
    modules, done = loaded_modules(tmp_path, "--db", str(small_db), "compare", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["comparisons"]  # a compared pair: the check is not vacuous
    assert not modules & HEAVY, sorted(modules & HEAVY)


def test_sqlite_utils_runs_without_pandas_in_the_ccpo_process_only():
    # In ccpo's process sqlite-utils gets no pandas (the import it makes only for pd.Timestamp),
    # and pandas itself still imports afterwards; a library user's sqlite-utils is untouched.
    script = (
        "import sys\nfrom ccpo_cli.cli.startup import sqlite_utils_without_pandas\nsqlite_utils_without_pandas()\n"
        "import sqlite_utils.db\nprint(sqlite_utils.db.pd is None, 'pandas' in sys.modules)\n"
        "try:\n    import pandas\n    print(pandas.__name__)\nexcept ImportError:\n    print('absent')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    installed = importlib.util.find_spec("pandas") is not None
    assert done.stdout.split() == ["True", "False", "pandas" if installed else "absent"], (
        done.stderr
    )
    plain = subprocess.run(
        [sys.executable, "-c", "import sqlite_utils.db; print(sqlite_utils.db.pd is None)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Outside ccpo's entry point sqlite-utils sees pandas exactly when it is installed.
    assert plain.stdout.strip() == str(importlib.util.find_spec("pandas") is None)


def test_help_texts_written_out_agree_with_the_library():
    from ccpo_cli.cli import ingest
    from ccpo_cli.store.ingest import FORMATS
    from ccpo_cli.store.readers.base import MAX_LINE_TEXT

    assert ingest.FORMATS_HELP == " | ".join(FORMATS)
    assert ingest.LINE_LIMIT_HELP == MAX_LINE_TEXT


def test_the_default_backend_on_a_machine_without_a_cuda_device_asks_no_torch(tmp_path):
    script = (
        "import sys\nfrom ccpo_cli.backends.device import default_backend\n"
        "print(default_backend(), 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), CUDA_VISIBLE_DEVICES=""),
    )
    assert done.stdout.split() == ["local", "False"], done.stderr
