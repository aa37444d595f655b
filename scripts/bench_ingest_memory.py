"""Peak memory of `ccpo ingest` against the size of the file it reads (issue 12: ingest must
stream; target: a 200 MB file ingests in under 200 MB of peak RSS).

    python scripts/bench_ingest_memory.py [--mb 200] [--keep]

Writes a verl console log and a verl file-logger JSONL of about `--mb` MB each into a
temporary folder (a verl-agent-like step: ~120 training metrics, a validation with six
per-type rates every 5 steps), ingests each with `python -m ccpo_cli` in a child process, and
prints the child's peak RSS (from wait4) beside the file size. A `--help` run gives the
interpreter-plus-imports baseline. IO-heavy; run it on purpose, never from the tests.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TYPES = ("pick_and_place", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
         "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
TRAINING_KEYS = [f"{group}/{name}_{i}" for group in ("actor", "critic", "timing_s", "response_length", "perf")
                 for name in ("mean", "max", "min") for i in range(8)]


def step_metrics(step: int, rng: random.Random) -> dict[str, float]:
    metrics = {key: rng.uniform(-10, 1000) for key in TRAINING_KEYS}
    metrics["episode/success_rate"] = rng.random()
    if step % 5 == 0:
        metrics["val/success_rate"] = rng.random()
        metrics["val/episode_length/mean"] = rng.uniform(10, 50)
        metrics.update({f"val/{name}_success_rate": rng.random() for name in TYPES})
    return metrics


def write_files(folder: Path, megabytes: int) -> dict[str, Path]:
    target = megabytes * 1024 * 1024
    rng = random.Random(0)
    console, jsonl = folder / "worker.log", folder / "metrics.jsonl"
    with console.open("w") as log, jsonl.open("w") as js:
        step = 0
        while log.tell() < target or js.tell() < target:
            metrics = step_metrics(step, rng)
            if log.tell() < target:
                body = " - ".join(f"{k}:{v:.3f}" for k, v in metrics.items())
                log.write(f"\x1b[36m(TaskRunner pid=4242)\x1b[0m step:{step} - {body}\n")
                log.write(f"\x1b[36m(TaskRunner pid=4242)\x1b[0m Training Progress: {step}it\n")
            if js.tell() < target:
                js.write(json.dumps({"step": step, "data": metrics}) + "\n")
            step += 1
    return {"console": console, "verl-file": jsonl}


def peak_rss_mb(args: list[str], folder: Path) -> tuple[float, float, int]:
    """(peak RSS in MiB, seconds, exit code) of one child process."""
    started = time.perf_counter()
    with (folder / "stdout.txt").open("w") as out, (folder / "stderr.txt").open("w") as err:
        child = subprocess.Popen([sys.executable, "-m", "ccpo_cli", *args], stdout=out, stderr=err,
                                 env={**os.environ, "PYTHONPATH": str(REPO)})
        _, status, usage = os.wait4(child.pid, 0)
    return usage.ru_maxrss / 1024, time.perf_counter() - started, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of each generated file in MB")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    try:
        files = write_files(folder, options.mb)
        baseline, _, _ = peak_rss_mb(["ingest", "--help"], folder)
        print(f"baseline (python + ccpo imports, `ingest --help`): peak RSS {baseline:.0f} MiB")
        print(f"{'format':<10} {'file MiB':>9} {'peak RSS MiB':>13} {'RSS/file':>9} {'above baseline':>15} {'seconds':>8}  result")
        for fmt, path in files.items():
            size = path.stat().st_size / 2**20
            rss, seconds, code = peak_rss_mb(
                ["--db", str(folder / f"{fmt}.db"), "ingest", str(path), "--run", fmt, "--json"], folder)
            result = json.loads((folder / "stdout.txt").read_text()) if code == 0 else {}
            summary = (f"exit {code}: {result.get('new')} evaluations, {result.get('steps')} steps, "
                       f"{result.get('skipped')} skipped") if code == 0 else f"exit {code}: {(folder / 'stderr.txt').read_text()[-300:]}"
            print(f"{fmt:<10} {size:>9.0f} {rss:>13.0f} {rss / size:>9.2f} {rss - baseline:>15.0f} {seconds:>8.0f}  {summary}")
    finally:
        if options.keep:
            print(f"files kept in {folder}")
        else:
            for path in sorted(folder.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            folder.rmdir()


if __name__ == "__main__":
    main()
