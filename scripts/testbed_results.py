"""Re-analyse a matrix from its committed records (results/<preregistration>/), no retraining.

Each record is one finished seed block (ccpo_cli/experiments/records.py): the design, each arm's
evaluations game by game, the CPU seconds the trainer counted. For every pair of arms asked,
this prints the per-seed differences of the compared window, the paired t (mean, sd, its CI, p,
MDD at 80 % power), the pairs done against a budget of pairs, and the CPU-minutes the blocks took:

    python scripts/testbed_results.py results/issue-40-research-matrix --prefix rm1 \\
        --pair return-hard,gigpo --pair return-hard,grpo --alpha 0.01 --budget-pairs 37

`--export DB --prefix P --arms A,B,... --seeds S` writes instead the records of the complete
blocks a runs.db holds (a matrix started without --results, or one whose records are behind):

    python scripts/testbed_results.py results/pilot-3-issue-40 --export exp/p3a.db --prefix p3a \\
        --arms gigpo,gigpo-flip50,gigpo-perm --seeds 5000-5099
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path, help="the records' folder, results/PREREGISTRATION")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--pair", action="append", default=[], metavar="A,B", help="a − b")
    parser.add_argument("--alpha", type=float, default=0.01)
    parser.add_argument("--budget-pairs", type=int, default=None)
    parser.add_argument(
        "--step",
        type=int,
        action="append",
        default=None,
        help="compared step (repeatable; default: the records' window, from its start to the last evaluation)",
    )
    parser.add_argument("--export", type=Path, default=None, metavar="DB")
    parser.add_argument("--arms", default=None, help="with --export: the matrix's arms")
    parser.add_argument("--seeds", default=None, help="with --export: the seeds to look for")
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def export(args: argparse.Namespace) -> int:
    from ccpo_cli.experiments.records import block_record, write_record
    from ccpo_cli.seeds import parse_seeds
    from ccpo_cli.store import open_db

    if not (args.arms and args.seeds):
        raise SystemExit("error: --export needs --arms and --seeds")
    db = open_db(args.export)
    labels = [arm.strip() for arm in args.arms.split(",")]
    written = []
    for seed in parse_seeds(args.seeds):
        record = block_record(db, args.prefix, labels, seed, args.results.resolve().name)
        if record is not None:
            write_record(args.results, record)
            written.append(seed)
    print(f"recorded {len(written)} complete block(s) in {args.results}: seeds {written}")
    return 0


def analyse(args: argparse.Namespace) -> dict:
    from ccpo_cli.experiments.records import load_records, read_records
    from ccpo_cli.experiments.testbed import differences, paired_stats

    records = read_records(args.results, args.prefix)
    if not records:
        raise SystemExit(f"error: no records of prefix {args.prefix!r} in {args.results}")
    data = load_records(args.results, args.prefix)
    fork = int(records[0]["warm_start"] or 0)
    window_start = int(records[0]["window_start"] or 0)
    last = max(
        int(step)
        for record in records
        for run in record["runs"].values()
        for step in run["evaluations"]
    )
    steps = args.step or [
        int(step)
        for step in sorted(
            records[0]["runs"][next(iter(records[0]["runs"]))]["evaluations"], key=int
        )
        if window_start <= int(step) <= last
    ]
    offsets = tuple(step - fork for step in steps)
    rows = []
    for spec in args.pair:
        arm_a, arm_b = (part.strip() for part in spec.split(","))
        found = differences(data, arm_a, arm_b, offsets)
        values = [found[seed] for seed in sorted(found)]
        stats = paired_stats(values, confidence=1 - args.alpha)
        cpu = sum(
            record["runs"][arm]["cpu_s"]
            for record in records
            if record["seed"] in found
            for arm in (arm_a, arm_b)
        ) + sum(
            (record.get("warm_up") or {}).get("cpu_s", 0.0)
            for record in records
            if record["seed"] in found
        )
        rows.append(
            {
                "pair": f"{arm_a} − {arm_b}",
                "seeds": sorted(found),
                "pairs_done": len(found),
                "budget_pairs": args.budget_pairs,
                "per_seed": {str(seed): round(found[seed], 2) for seed in sorted(found)},
                **stats,
                "ci": [stats["ci_low"], stats["ci_high"]] if stats["sd"] else None,
                "ci_level": 1 - args.alpha,
                "significant": stats["p"] is not None and stats["p"] < args.alpha,
                "cpu_minutes": cpu / 60,
            }
        )
    return {
        "results": str(args.results),
        "preregistration": records[0]["preregistration"],
        "prefix": args.prefix,
        "design": records[0]["design"],
        "compared_steps": steps,
        "alpha": args.alpha,
        "blocks": len(records),
        "block_cpu_minutes": sum(record["cpu_s"] for record in records) / 60,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.export is not None:
        return export(args)
    report = analyse(args)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0

    def shown(value, digits=2):
        return "–" if value is None else f"{value:.{digits}f}"

    print(
        f"{report['preregistration']} · {report['prefix']} · {report['design']} · steps "
        f"{report['compared_steps']} · {report['blocks']} blocks, {report['block_cpu_minutes']:.1f} CPU-min"
    )
    print("| pair | pairs done / budget | mean | sd | CI | p | MDD | CPU-min |")
    print("|---|---|---|---|---|---|---|---|")
    for row in report["rows"]:
        ci = row["ci"] or [None, None]
        print(
            f"| {row['pair']} | {row['pairs_done']} / {row['budget_pairs'] or '–'} | "
            f"{shown(row['mean'])} | {shown(row['sd'])} | {shown(ci[0], 1)} to {shown(ci[1], 1)} | "
            f"{shown(row['p'], 4)} | {shown(row['mdd'], 1)} | {row['cpu_minutes']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
