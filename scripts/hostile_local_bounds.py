"""Memory and time of ccpo's local commands on the hostile inputs of issue 42 (the local half).

Each case runs `python -m ccpo_cli ...` in a child process under `ulimit -v` (RLIMIT_AS, 3 GiB
of address space: torch and SQLite map far more than they touch) and a wall-clock deadline, and
reports the child's peak resident memory (its own ru_maxrss, read with wait4), its exit code and
its last stderr line. The acceptance bar is a peak under 500 MB and an end within the deadline,
with the documented exit code. Nothing here is a timed test: it prints what it measured.

    PYTHONPATH=$PWD python scripts/hostile_local_bounds.py
"""

from __future__ import annotations

import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADDRESS_SPACE = 3 << 30
DEADLINE_S = 120
BAR_BYTES = 500e6  # the acceptance bar: 500 MB resident
HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202eexe"


def _limits(fsize: int | None):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
        if fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return apply


def run_case(args: list[str], cwd: Path, fsize: int | None = None) -> tuple[int, float, float, str]:
    """(exit code, peak MB, seconds, last stderr line) of one command."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="200")
    started = time.monotonic()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(
            [sys.executable, "-m", "ccpo_cli", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
            preexec_fn=_limits(fsize),
        )
        deadline = started + DEADLINE_S
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                child.kill()
                pid, status, usage = os.wait4(child.pid, 0)
                break
            time.sleep(0.05)
        child.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        lines = [line for line in err.read().decode(errors="replace").splitlines() if line.strip()]
    peak_mb = usage.ru_maxrss * 1024 / 1e6  # ru_maxrss is in KiB on Linux
    return child.returncode, peak_mb, time.monotonic() - started, (lines or [""])[-1]


def build(root: Path) -> Path:
    from ccpo_cli.arms import load_arm
    from ccpo_cli.store import ensure_run, open_db, record_evaluation
    from ccpo_cli.vocabulary import EVAL_TEMPERATURE, LOCAL

    db_path = root / "runs.db"
    db = open_db(db_path)
    ensure_run(db, "r0", arm=load_arm("grpo"), seed=0, base_model="tiny" + HOSTILE,
               backend=LOCAL, total_steps=3000, config={"note": HOSTILE})  # fmt: skip
    for step in range(0, 3000, 2):
        record_evaluation(
            db, "r0", step, success_rate=50.0, episodes=8, temperature=EVAL_TEMPERATURE
        )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.conn.close()
    run_dir = root / "ccpo-runs" / "r0"
    run_dir.mkdir(parents=True)
    (run_dir / "run.json").write_text('{"run": "r0"}')
    return db_path


def damaged_copy(db_path: Path, root: Path) -> Path:
    target = root / "damaged" / "runs.db"
    target.parent.mkdir()
    target.write_bytes(db_path.read_bytes())
    with sqlite3.connect(target) as connection:
        page = connection.execute("PRAGMA page_size").fetchone()[0]
        (rootpage,) = connection.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'evaluations_run_step'"
        ).fetchone()
    with open(target, "r+b") as handle:
        handle.seek((rootpage - 1) * page)
        handle.write(b"\xa5" * page)
    return target


def main() -> None:
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory(prefix="ccpo-hostile-") as scratch:
        root = Path(scratch)
        db = build(root)
        damaged = damaged_copy(db, root)
        (root / "afile").write_text("x")
        cases = [
            ("export", "--to tensorboard into the run folders' parent", 3,
             ["--db", db, "export", "--to", "tensorboard", "r0", "--out", root / "ccpo-runs"], None),
            ("export", "--out a regular file", 3,
             ["--db", db, "export", "--to", "csv", "r0", "--out", root / "afile"], None),
            ("export", "full disk (RLIMIT_FSIZE 40 KB), tensorboard", 1,
             ["--db", db, "export", "--to", "tensorboard", "r0", "--out", root / "full-tb"], 40_960),
            ("export", "full disk (RLIMIT_FSIZE 40 KB), csv", 1,
             ["--db", db, "export", "--to", "csv", "r0", "--out", root / "full-csv"], 40_960),
            ("database", "runs show on a damaged index page", 3,
             ["--db", damaged, "runs", "show", "r0"], None),
            ("database", "compare on a damaged index page", 3,
             ["--db", damaged, "compare", "r0"], None),
            ("CLI input", "runs show with screen clear, title set, RLO", 0,
             ["--db", db, "runs", "show", "r0"], None),
            ("CLI input", "runs list with screen clear, title set, RLO", 0,
             ["--db", db, "runs", "list"], None),
            ("CLI input", "--seeds 0-2,,3", 3,
             ["--db", db, "train", "--arm", "grpo", "--seeds", "0-2,,3", "--dry-run"], None),
            ("CLI input", "--seeds of 100 000 digits", 3,
             ["--db", db, "train", "--arm", "grpo", "--seeds", "9" * 100_000, "--dry-run"], None),
            ("CLI input", "--set rho=1e-400", 3,
             ["--db", db, "arms", "show", "grpo", "--set", "rho=1e-400"], None),
            ("CLI input", "--report-to bogus --dry-run", 2,
             ["--db", db, "train", "--arm", "grpo", "--run", "x", "--report-to", "bogus",
              "--dry-run"], None),
        ]  # fmt: skip
        print("| category | case | exit (expected) | peak MB | seconds | last line |")
        print("|---|---|---|---|---|---|")
        failures = 0
        for category, case, expected, args, fsize in cases:
            code, peak, seconds, line = run_case([str(a) for a in args], root, fsize)
            ok = code == expected and peak * 1e6 < BAR_BYTES and seconds < DEADLINE_S
            failures += not ok
            shown = line.encode("unicode_escape").decode()[:90]
            print(
                f"| {category} | {case} | {code} ({expected}) | {peak:.0f} | {seconds:.1f} | {shown} |"
            )
        print(f"\n{len(cases) - failures} of {len(cases)} within {BAR_BYTES / 1e6:.0f} MB, {DEADLINE_S} s and "
              "their exit code")  # fmt: skip
        sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
