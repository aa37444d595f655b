"""Peak memory of `ccpo ingest` against the size of the file it reads (issue 12: ingest must
stream; target: a 200 MB file ingests in under 200 MB of peak RSS), and against the width of a
CSV export (issue 21 item 8: a 10^6-column CSV of 12 MB used 550 MB; target: memory does not
grow with the width, and a CSV wider than the bound is refused).

    python scripts/bench_ingest_memory.py [--mb 200] [--csv-mb 12] [--only streams|csv] [--keep]

Streams: writes a verl console log and a verl file-logger JSONL of about `--mb` MB each into a
temporary folder (a verl-agent-like step: ~120 training metrics, a validation with six
per-type rates every 5 steps). CSV width: writes three CSV exports of about `--csv-mb` MB each,
one of 11 columns (many rows), one at the column bound (MAX_CSV_COLUMNS, a few rows) and one of
10^6 columns (a header and one row), and prints each one's peak RSS above the baseline and its
ratio to the narrow file's. Each file is ingested with `python -m ccpo_cli` in a child process;
the child's peak RSS comes from wait4. A `--help` run gives the interpreter-plus-imports
baseline. IO-heavy; run it on purpose, never from the tests.
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
sys.path.insert(0, str(REPO))

from ccpo_cli.store.readers.metric_names import (  # noqa: E402
    MEAN_TURNS_KEY,
    OVERALL_KEY,
    TRAIN_SUCCESS_KEY,
)
from ccpo_cli.task_types import VERL_METRIC_NAMES  # noqa: E402

TYPES = tuple(VERL_METRIC_NAMES.values())  # the names verl-agent logs per task type
TRAINING_KEYS = [
    f"{group}/{name}_{i}"
    for group in ("actor", "critic", "timing_s", "response_length", "perf")
    for name in ("mean", "max", "min")
    for i in range(8)
]


def step_metrics(step: int, rng: random.Random) -> dict[str, float]:
    metrics = {key: rng.uniform(-10, 1000) for key in TRAINING_KEYS}
    metrics[TRAIN_SUCCESS_KEY] = rng.random()
    if step % 5 == 0:
        metrics[OVERALL_KEY] = rng.random()
        metrics[MEAN_TURNS_KEY] = rng.uniform(10, 50)
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


def write_csv_files(folder: Path, megabytes: int) -> dict[str, Path]:
    """Three CSV exports of about `megabytes` MB: 11 columns, MAX_CSV_COLUMNS columns, 10^6 columns."""
    from ccpo_cli.store.readers.csv_table import MAX_CSV_COLUMNS

    target = megabytes * 1024 * 1024
    files = {}
    for label, columns in (
        ("11 cols", 11),
        (f"{MAX_CSV_COLUMNS} cols", MAX_CSV_COLUMNS),
        ("10^6 cols", 10**6),
    ):
        path = folder / f"width-{columns}.csv"
        names = [OVERALL_KEY, *(f"custom/m{i}" for i in range(1, columns - 1))]
        with path.open("w") as handle:
            handle.write(",".join(["step", *names]) + "\n")
            step = 0
            while handle.tell() < target:
                rate = "0.5" if step % 500 == 0 else ""  # a validation every 100 rows, as a log has
                handle.write(",".join([str(step), rate, *("0.5" for _ in names[1:])]) + "\n")
                step += 5
        files[label] = path
    return files


def peak_rss_mb(args: list[str], folder: Path, code_root: Path = REPO) -> tuple[float, float, int]:
    """(peak RSS in MiB, seconds, exit code) of one child process running ccpo from `code_root`."""
    started = time.perf_counter()
    with (folder / "stdout.txt").open("w") as out, (folder / "stderr.txt").open("w") as err:
        # cwd is the scratch folder: `-m` puts the working directory first on sys.path.
        child = subprocess.Popen(
            [sys.executable, "-m", "ccpo_cli", *args],
            stdout=out,
            stderr=err,
            cwd=folder,
            env={**os.environ, "PYTHONPATH": str(code_root)},
        )
        _, status, usage = os.wait4(child.pid, 0)
    return usage.ru_maxrss / 1024, time.perf_counter() - started, os.waitstatus_to_exitcode(status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200, help="size of each generated file in MB")
    parser.add_argument("--csv-mb", type=int, default=12, help="size of each generated CSV in MB")
    parser.add_argument("--only", choices=("streams", "csv"), help="run one half only")
    parser.add_argument(
        "--compare-with",
        type=Path,
        action="append",
        default=[],
        metavar="CHECKOUT",
        help="also read the CSVs with the ccpo of another checkout (e.g. the previous release)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    options = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    try:
        baseline, _, _ = peak_rss_mb(["ingest", "--help"], folder)
        print(f"baseline (python + ccpo imports, `ingest --help`): peak RSS {baseline:.0f} MiB")
        if options.only != "streams":
            csv_width(
                folder, options.csv_mb, baseline, [path.resolve() for path in options.compare_with]
            )
        if options.only == "csv":
            return
        files = write_files(folder, options.mb)
        print(
            f"{'format':<10} {'file MiB':>9} {'peak RSS MiB':>13} {'RSS/file':>9} {'above baseline':>15} {'seconds':>8}  result"
        )
        for fmt, path in files.items():
            size = path.stat().st_size / 2**20
            rss, seconds, code = peak_rss_mb(
                ["--db", str(folder / f"{fmt}.db"), "ingest", str(path), "--run", fmt, "--json"],
                folder,
            )
            result = json.loads((folder / "stdout.txt").read_text()) if code == 0 else {}
            summary = (
                (
                    f"exit {code}: {result.get('new')} evaluations, {result.get('steps')} steps, "
                    f"{result.get('skipped')} skipped"
                )
                if code == 0
                else f"exit {code}: {(folder / 'stderr.txt').read_text()[-300:]}"
            )
            print(
                f"{fmt:<10} {size:>9.0f} {rss:>13.0f} {rss / size:>9.2f} {rss - baseline:>15.0f} {seconds:>8.0f}  {summary}"
            )
    finally:
        if options.keep:
            print(f"files kept in {folder}")
        else:
            for path in sorted(folder.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            folder.rmdir()


def csv_width(folder: Path, megabytes: int, baseline: float, others: list[Path]) -> None:
    """Peak RSS above the baseline, per MiB of file, of three CSVs of one size and growing
    width; with `others` (checkouts of another ccpo version), the same files read by each."""
    files = write_csv_files(folder, megabytes)
    print(
        f"{'code':<14} {'CSV width':<12} {'file MiB':>9} {'above baseline MiB':>19} {'per file MiB':>13} "
        f"{'seconds':>8}  result"
    )
    for code_root in [REPO, *others]:
        base = (
            baseline
            if code_root == REPO
            else peak_rss_mb(["ingest", "--help"], folder, code_root)[0]
        )
        for label, path in files.items():
            size = path.stat().st_size / 2**20
            database = folder / f"{path.stem}-{abs(hash(code_root))}.db"
            rss, seconds, code = peak_rss_mb(
                ["--db", str(database), "ingest", str(path), "--run", "w", "--json"],
                folder,
                code_root,
            )
            above = max(rss - base, 0.0)
            if code == 0:
                result = json.loads((folder / "stdout.txt").read_text())
                summary = f"exit 0: {result.get('new')} evaluations"
            else:
                summary = f"exit {code}: {(folder / 'stderr.txt').read_text().strip().split(': ', 2)[-1][:90]}"
            name = "this checkout" if code_root == REPO else code_root.name
            print(
                f"{name:<14} {label:<12} {size:>9.1f} {above:>19.1f} {above / size:>13.2f} {seconds:>8.1f}  {summary}"
            )


if __name__ == "__main__":
    main()
