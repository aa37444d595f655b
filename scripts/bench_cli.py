"""Benchmark the command line's start-up: `ccpo --help`, `ccpo runs list`, `ccpo runs show`,
`ccpo compare` (table and --json), `ccpo estimate` and one TAB of bash completion, side by side
with `sqlite-utils tables` on the same database.

    python scripts/bench_cli.py [--runs 40] [--evals 30] [--repeats 7]

Every command runs as a fresh process, as a user's shell starts it (`ccpo` is a console script
like the one pip writes), in turns: one of each, then the next round, so that a busy machine
slows all of them alike. The figure is the median CPU time (user + system) of each process,
which a machine's load moves far less than its wall time; the ratios to `sqlite-utils tables`
are what carries over between machines. The reference is the plain package: sqlite-utils
imports pandas when it is installed, so it runs with pandas hidden, as where pandas is not
installed (issue 43: every command within 2x of that); the ratios to `sqlite-utils tables` with
pandas are printed beside them. Everything is written to a temporary folder; nothing is left
behind. Exit 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ccpo_cli import store  # noqa: E402
from ccpo_cli.arms import load_arm  # noqa: E402
from ccpo_cli.task_types import TASK_TYPES  # noqa: E402
from ccpo_cli.vocabulary import EVAL_TEMPERATURE, VERL  # noqa: E402

ARMS = ("grpo", "gigpo", "return-hard", "return-hard-fbjw", "global-successor")
TARGETS = {
    "ccpo --help": 2.0,
    "ccpo runs list": 2.0,
    "ccpo runs show": 2.0,
    "ccpo compare": 2.0,
    "ccpo compare --json": 2.0,
    "ccpo estimate": 2.0,
    "ccpo TAB (run names)": 2.0,
}
REFERENCE = "sqlite-utils tables (no pandas)"
WITH_PANDAS = "sqlite-utils tables (with pandas)"


def fill(path: Path, runs: int, evals: int) -> None:
    db = store.open_db(path)
    with store.write_transaction(db):
        for index in range(runs):
            arm = load_arm(ARMS[index % len(ARMS)])
            name = f"{arm.name}-seed{index // len(ARMS)}"
            store.ensure_run(
                db,
                name,
                arm=arm,
                seed=index // len(ARMS),
                base_model="Qwen/Qwen2.5-7B-Instruct",
                benchmark="alfworld",
                backend=VERL,
                total_steps=150,
                hardware="8xH100",
            )
            for eval_index in range(evals):
                step = 5 * eval_index
                level = min(95.0, 30 + step / 2 + index % 7)
                types = {
                    key: {"episodes": 21, "successes": max(0, min(21, round(level * 0.21) - i % 3))}
                    for i, key in enumerate(TASK_TYPES)
                }
                store.record_evaluation(
                    db,
                    name,
                    step,
                    episodes=128,
                    successes=round(level * 1.28),
                    temperature=EVAL_TEMPERATURE,
                    task_types=types,
                )


def console_script(folder: Path) -> Path:
    """`ccpo` as pip installs it, running this checkout."""
    script = folder / "ccpo"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
        "from ccpo_cli.cli.app import main\nsys.exit(main())\n",
        encoding="utf-8",
    )
    script.chmod(0o755)
    return script


def sqlite_utils_command() -> list[str]:
    found = Path(sys.executable).with_name("sqlite-utils")
    if found.is_file():
        return [str(found)]
    which = shutil.which("sqlite-utils")
    if which is None:
        raise SystemExit(
            "sqlite-utils' command is not installed beside this Python: pip install sqlite-utils"
        )
    return [which]


def commands(folder: Path, db: Path) -> dict[str, tuple[list[str], dict[str, str]]]:
    ccpo = str(console_script(folder))
    hidden = (
        "import sys; sys.modules['pandas'] = None; from sqlite_utils.cli import cli; "
        "sys.argv = ['sqlite-utils', *sys.argv[1:]]; cli()"
    )
    return {
        REFERENCE: ([sys.executable, "-c", hidden, "tables", str(db)], {}),
        WITH_PANDAS: ([*sqlite_utils_command(), "tables", str(db)], {}),
        "ccpo --help": ([ccpo, "--help"], {}),
        "ccpo runs list": ([ccpo, "--db", str(db), "runs", "list"], {}),
        "ccpo runs show": ([ccpo, "--db", str(db), "runs", "show", "grpo-seed0"], {}),
        "ccpo compare": ([ccpo, "--db", str(db), "compare"], {}),
        "ccpo compare --json": ([ccpo, "--db", str(db), "compare", "--json"], {}),
        "ccpo estimate": (
            [
                ccpo,
                "estimate",
                "--arm",
                "gigpo",
                "--input",
                str(REPO / "examples" / "worked-example-1.json"),
            ],
            {},
        ),
        "ccpo TAB (run names)": (
            [ccpo],
            {
                "_CCPO_COMPLETE": "complete_bash",
                "COMP_WORDS": f"ccpo --db {db} runs show g",
                "COMP_CWORD": "5",
            },
        ),
    }


def run_once(argv: list[str], extra_env: dict[str, str], cwd: Path) -> float:
    # As a user's shell starts it: without PYTHONDONTWRITEBYTECODE, which CI sandboxes set and
    # which would make every process (the warm-up round's too) compile ccpo from source.
    unset = ("PYTHONPATH", "CCPO_DB", "PYTHONDONTWRITEBYTECODE")
    environment = {key: value for key, value in os.environ.items() if key not in unset}
    environment.update(extra_env, COLUMNS="100")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, env=environment, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    elapsed = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-400:]}"
        )
    if "_CCPO_COMPLETE" in extra_env and not done.stdout.split():
        raise SystemExit("the completion offered no run name: the benchmark would time nothing")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="runs in the database (default 40)")
    parser.add_argument("--evals", type=int, default=30, help="evaluations per run (default 30)")
    parser.add_argument(
        "--repeats", type=int, default=7, help="timed rounds (default 7), after one warm-up round"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ccpo-bench-cli-") as name:
        folder = Path(name)
        db = folder / "runs.db"
        fill(db, options.runs, options.evals)
        table = commands(folder, db)
        times: dict[str, list[float]] = {label: [] for label in table}
        for round_index in range(options.repeats + 1):
            for label, (argv, extra_env) in table.items():
                elapsed = run_once(argv, extra_env, folder)
                if round_index:  # the first round warms the file cache and the bytecode
                    times[label].append(elapsed)
    medians = {label: statistics.median(values) for label, values in times.items()}
    reference, with_pandas = medians[REFERENCE], medians[WITH_PANDAS]
    load = os.getloadavg()[0]
    print(
        f"{options.runs} runs x {options.evals} evaluations; median CPU time of {options.repeats} fresh processes each, "
        f"run in turns (load average {load:.1f} on {os.cpu_count()} cores)"
    )
    print(
        f"{'command':<34} {'CPU s':>7} {'min s':>7} {'x sqlite-utils':>15} {'target':>10} {'x with pandas':>14}"
    )
    missed = []
    for label, median in medians.items():
        ratio = median / reference
        target = TARGETS.get(label)
        verdict = (
            "" if target is None else (f"<= {target:g}" + (" ok" if ratio <= target else " MISSED"))
        )
        if target is not None and ratio > target:
            missed.append(label)
        print(
            f"{label:<34} {median:7.3f} {min(times[label]):7.3f} {ratio:15.2f} {verdict:>10} {median / with_pandas:14.2f}"
        )
    print(
        json.dumps(
            {
                "median_cpu_s": medians,
                "ratio_to_sqlite_utils": {k: v / reference for k, v in medians.items()},
                "ratio_to_sqlite_utils_with_pandas": {
                    k: v / with_pandas for k, v in medians.items()
                },
                "targets": TARGETS,
                "missed": missed,
            }
        )
    )
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
