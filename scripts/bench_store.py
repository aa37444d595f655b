"""Benchmark runs.db: `ccpo compare --json` over 200 runs x 30 evaluations x 6 task types
(target <= 1 s) and ingest throughput of the three metrics formats, measured side by side.

    python scripts/bench_store.py [--runs 200] [--evals 30] [--ingest-evals 3000]

Everything is written to a temporary folder; nothing is left behind.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from helpers_store import WRITERS, training_series  # noqa: E402

from ccpo_cli.cli.common import emit_json  # noqa: E402
from ccpo_cli.report.compare import compare_runs  # noqa: E402
from ccpo_cli.store import ensure_run, open_db, record_evaluation, write_transaction  # noqa: E402
from ccpo_cli.store.identity import ExternalArm  # noqa: E402
from ccpo_cli.store.ingest import ingest_file  # noqa: E402
from ccpo_cli.task_types import TASK_TYPES  # noqa: E402
from ccpo_cli.vocabulary import EVAL_TEMPERATURE  # noqa: E402

ARMS = ("grpo", "gigpo", "return-hard", "return-hard-fbjw", "global-successor")
COMPARE_TARGET_S = 1.0


def fill_database(path: Path, runs: int, evals: int) -> float:
    db = open_db(path)
    started = time.perf_counter()
    with write_transaction(db):
        for index in range(runs):
            arm = ARMS[index % len(ARMS)]
            name = f"{arm}-s{index // len(ARMS)}"
            ensure_run(
                db,
                name,
                arm=ExternalArm(arm, f"fp-{arm}"),
                seed=index // len(ARMS),
                base_model="Qwen/Qwen2.5-7B-Instruct",
                hardware="8xH100",
                total_steps=150,
                config={"data": {"train_batch_size": 16}},
            )
            for eval_index in range(evals):
                step = 5 * eval_index
                level = min(95.0, 30 + step / 2 + (index % 7))
                successes = round(level * 1.28)
                types = {
                    key: {
                        "episodes": 21,
                        "successes": min(21, round(level * 0.21) - i % 3),
                        "success": None,
                    }
                    for i, key in enumerate(TASK_TYPES)
                }
                for value in types.values():
                    value["success"] = 100 * value["successes"] / 21
                record_evaluation(
                    db,
                    name,
                    step,
                    episodes=128,
                    successes=successes,
                    temperature=EVAL_TEMPERATURE,
                    task_types=types,
                )
    return time.perf_counter() - started


def time_compare(path: Path, repeats: int = 3) -> tuple[float, float, int]:
    """Best wall and CPU seconds of compare_runs + emit_json over the whole database."""
    best_wall = best_cpu = float("inf")
    size = 0
    for _ in range(repeats):
        db = open_db(path)
        started, started_cpu = time.perf_counter(), time.process_time()
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            emit_json(compare_runs(db, None).as_json())
        best_wall = min(best_wall, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - started_cpu)
        size = len(buffer.getvalue())
    return best_wall, best_cpu, size


def time_cli(args: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "ccpo_cli", *args],
        cwd=REPO,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - started


def time_ingest(folder: Path, evals: int) -> dict[str, dict[str, float]]:
    rates = {step: 20 + (step % 70) for step in range(0, 5 * evals, 5)}
    rows = training_series(rates, 5 * evals - 1, decimals=3)
    results = {}
    for fmt, writer in WRITERS.items():
        path = writer(rows, folder / f"metrics.{fmt}")
        db = open_db(folder / f"ingest-{fmt}.db")
        started = time.perf_counter()
        report = ingest_file(db, path, "bench")
        first = time.perf_counter() - started
        started = time.perf_counter()
        again = ingest_file(db, path, "bench")
        second = time.perf_counter() - started
        assert report.new == evals and again.duplicates == evals
        size = path.stat().st_size
        results[fmt] = {
            "seconds": first,
            "evals_per_s": evals / first,
            "mb_per_s": size / first / 1e6,
            "lines": report.lines,
            "reingest_seconds": second,
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--evals", type=int, default=30)
    parser.add_argument("--ingest-evals", type=int, default=3000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        db_path = folder / "runs.db"
        fill_seconds = fill_database(db_path, options.runs, options.evals)
        total = options.runs * options.evals
        print(
            f"filled {options.runs} runs x {options.evals} evals x 6 types ({total} evaluations) "
            f"in {fill_seconds:.2f} s ({total / fill_seconds:,.0f} record_evaluation calls/s)"
        )
        in_process, in_process_cpu, size = time_compare(db_path)
        cli_compare = time_cli(["--db", str(db_path), "compare", "--json"])
        cli_baseline = time_cli(["--db", str(db_path), "runs", "list", "--json"])
        load = os.getloadavg()[0]
        print(
            f"compare --json, library call + JSON ({size / 1e6:.1f} MB): {in_process:.3f} s wall "
            f"= {in_process / COMPARE_TARGET_S:.2f} x the 1 s target; {in_process_cpu:.3f} s CPU "
            f"(load average {load:.1f} on {os.cpu_count()} cores)"
        )
        print(
            f"ccpo compare --json, whole process:   {cli_compare:.3f} s "
            f"= {cli_compare / COMPARE_TARGET_S:.2f} x target "
            f"(ccpo runs list --json, same startup: {cli_baseline:.3f} s; "
            f"compare costs {cli_compare - cli_baseline:+.3f} s over it)"
        )
        results = time_ingest(folder, options.ingest_evals)
        reference = results["ccpo"]["seconds"]
        print(
            f"ingest of {options.ingest_evals} evaluations (+{5 * options.ingest_evals - options.ingest_evals} "
            "training-only steps), first pass / re-ingest of the same file:"
        )
        for fmt, numbers in results.items():
            print(
                f"  {fmt:10s} {numbers['seconds']:.3f} s  {numbers['evals_per_s']:8,.0f} evals/s "
                f"{numbers['mb_per_s']:6.1f} MB/s  ({numbers['seconds'] / reference:.2f} x ccpo)  "
                f"re-ingest {numbers['reingest_seconds']:.3f} s "
                f"({numbers['reingest_seconds'] / numbers['seconds']:.2f} x first)"
            )
        verdict = "meets" if in_process <= COMPARE_TARGET_S else "MISSES"
        print(
            json.dumps(
                {
                    "compare_seconds": in_process,
                    "compare_cpu_seconds": in_process_cpu,
                    "compare_cli_seconds": cli_compare,
                    "target_seconds": COMPARE_TARGET_S,
                    "verdict": verdict,
                    "ingest": results,
                },
                indent=None,
            )
        )


if __name__ == "__main__":
    main()
