"""The cost of runs.db's `metrics` table: ingest time and database size of the largest real log,
as ratios to a baseline checkout without the table (today's main), measured side by side.

    python scripts/bench_metrics.py [--baseline MAIN_CHECKOUT] [--logs REAL_LOGS_DIR] [--repeats 3]

The baseline is a checkout from before the table (main before it was merged, e.g.
`git archive 6820f94 ccpo_cli configs templates | tar -x -C /tmp/base`, then
`--baseline /tmp/base`); a baseline that has the table too is said so.

Each measurement is a fresh process (this checkout, or the baseline on PYTHONPATH) that ingests
the file into a new runs.db in a temporary folder, timing `ingest_file` alone (imports and the
database's creation left out), then checkpoints the WAL and reports the file's size. Runs of the
two checkouts alternate; the median of each is compared. The largest log is the largest file
under `--logs` (all rounds) that ingest reads. Nothing is left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SKIPPED_SUFFIXES = (".md", ".json", ".yaml", ".yml", ".py", ".sh")

CHILD = """
import json, os, sys, time
import ccpo_cli
from ccpo_cli.store import open_db
from ccpo_cli.store.ingest import ingest_file
log, db_path = sys.argv[1], sys.argv[2]
db = open_db(db_path)
started = time.perf_counter()
report = ingest_file(db, log, "bench")
seconds = time.perf_counter() - started
db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
tables = set(db.table_names())
scalars = db.execute("SELECT COUNT(*) FROM metrics").fetchone()[0] if "metrics" in tables else 0
db.conn.close()
print(json.dumps({"package": os.path.dirname(ccpo_cli.__file__), "seconds": seconds, "bytes": os.path.getsize(db_path),
                  "evaluations": report.evaluations_found, "scalars": scalars}))
"""


def largest_log(folder: Path) -> Path:
    files = sorted(
        (
            path
            for path in folder.rglob("*")
            if path.is_file() and not path.name.endswith(SKIPPED_SUFFIXES)
        ),
        key=lambda path: path.stat().st_size,
        reverse=True,
    )
    if not files:
        sys.exit(f"bench_metrics: no log under {folder}")
    return files[0]


def measure(checkout: Path, log: Path, folder: Path, index: int) -> dict:
    db_path = folder / f"runs-{checkout.name}-{index}.db"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(log), str(db_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(checkout)},
        cwd=folder,  # `python -c` puts the working folder first on sys.path: not a checkout
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"bench_metrics: ingest with {checkout} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, default=Path("/work/main"))
    parser.add_argument("--logs", type=Path, default=REPO.parent / "shared" / "real-logs")
    parser.add_argument("--log", type=Path, default=None, help="this file instead of the largest")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    log = (args.log or largest_log(args.logs)).resolve()
    results: dict[str, list[dict]] = {"this": [], "baseline": []}
    with tempfile.TemporaryDirectory() as folder:
        for index in range(args.repeats):
            order = [("this", REPO), ("baseline", args.baseline)]
            for label, checkout in order if index % 2 == 0 else order[::-1]:
                results[label].append(measure(checkout, log, Path(folder), index))
    this, base = results["this"], results["baseline"]
    seconds = {
        label: statistics.median(r["seconds"] for r in rows) for label, rows in results.items()
    }
    size = {label: statistics.median(r["bytes"] for r in rows) for label, rows in results.items()}
    print(f"log: {log} ({log.stat().st_size / 1e6:.2f} MB)")
    print(f"this: {this[0]['package']}; baseline: {base[0]['package']}")
    print(
        f"evaluations: {this[0]['evaluations']} (baseline {base[0]['evaluations']}); "
        f"scalars in metrics: {this[0]['scalars']}"
    )
    print(
        f"ingest time: {seconds['this']:.2f} s vs {seconds['baseline']:.2f} s baseline "
        f"(median of {args.repeats}): ratio {seconds['this'] / seconds['baseline']:.2f}"
    )
    print(
        f"runs.db size: {size['this'] / 1e6:.2f} MB vs {size['baseline'] / 1e6:.3f} MB baseline: "
        f"ratio {size['this'] / size['baseline']:.1f}"
    )
    if base[0]["scalars"]:
        print(
            "note: the baseline has a metrics table too; pass --baseline a checkout from before it"
        )
    if this[0]["scalars"]:
        print(
            f"the table's cost per scalar: {(size['this'] - size['baseline']) / this[0]['scalars']:.0f} bytes"
        )


if __name__ == "__main__":
    main()
