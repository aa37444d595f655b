"""The oracle-credit pilot of docs/testbed-oracle-pilot.md, analysed as its plan fixes.

Reads the pilot's runs back from runs.db (prefix, arms and seeds from the plan) and prints, for
the three paired differences (gigpo-oracle − grpo: the ceiling; gigpo − grpo; gigpo-oracle −
gigpo) at the design's compared evaluation: each seed's difference, the mean, sd, effect/sd, and
the pairs a paired t at p < 0.01 with 80 % power would need at that effect/sd; then the plan's
rule applied to the ceiling. Nothing is trained here.

    python scripts/testbed_oracle_pilot.py --db oracle-pilot.db [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PREFIX = "orp"
DESIGN = "early-fork-tight-eval"
SEEDS = "620-624"
ARMS = ("gigpo", "grpo", "gigpo-oracle")
# The plan's rule: at most this ceiling (points) and the design is dropped.
DROP_AT_OR_BELOW = 2.0
ALPHA = 0.01
COMPARISONS = (("gigpo-oracle", "grpo"), ("gigpo", "grpo"), ("gigpo-oracle", "gigpo"))


def analyse(db_path: Path) -> dict:
    from ccpo_cli.experiments.designs import load_design
    from ccpo_cli.experiments.testbed import differences, paired_stats
    from ccpo_cli.experiments.testbed_runs import load_matrix
    from ccpo_cli.report.power import paired_seeds_needed
    from ccpo_cli.seeds import parse_seeds
    from ccpo_cli.store import open_db

    design = load_design(DESIGN)
    offsets = tuple(step - design.warm_start for step in design.compared_evaluations)
    data = load_matrix(open_db(db_path), PREFIX, list(ARMS), parse_seeds(SEEDS))
    rows = []
    for arm_a, arm_b in COMPARISONS:
        found = differences(data, arm_a, arm_b, offsets)
        stats = paired_stats(list(found.values())) if len(found) >= 2 else {"n": len(found)}
        mean, sd = stats.get("mean"), stats.get("sd")
        needed = (
            paired_seeds_needed(mean, sd, alpha=ALPHA)
            if mean is not None and sd and mean > 0
            else None
        )
        rows.append(
            {
                "comparison": f"{arm_a} − {arm_b}",
                "per_seed": {str(seed): round(value, 2) for seed, value in sorted(found.items())},
                **{key: stats.get(key) for key in ("n", "mean", "sd", "p")},
                "effect_over_sd": None if not sd or mean is None else mean / sd,
                "pairs_for_p01_at_80pct_power": needed,
            }
        )
    ceiling = rows[0]
    if ceiling["mean"] is None:
        verdict = "not enough seeds finished to apply the rule"
    elif ceiling["mean"] <= DROP_AT_OR_BELOW:
        verdict = (
            f"dropped: the ceiling {ceiling['mean']:+.2f} is at most +{DROP_AT_OR_BELOW:g} points"
        )
    else:
        verdict = (
            f"kept: the ceiling {ceiling['mean']:+.2f} is above +{DROP_AT_OR_BELOW:g} points "
            "(a pilot; it says nothing about gigpo − grpo)"
        )
    return {"design": DESIGN, "seeds": SEEDS, "comparisons": rows, "rule": verdict}


def _number(value, form: str) -> str:
    return "—" if value is None else format(value, form)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not args.db.is_file():
        print(f"error: {args.db}: no such runs.db", file=sys.stderr)
        return 3
    report = analyse(args.db)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"oracle-credit pilot: design {report['design']}, seeds {report['seeds']}")
    print("| comparison | per seed | n | mean | sd | effect/sd | p | pairs for p<0.01 |")
    print("|---|---|---|---|---|---|---|---|")
    for row in report["comparisons"]:
        per_seed = ", ".join(f"{seed}: {value:+.1f}" for seed, value in row["per_seed"].items())
        print(
            f"| {row['comparison']} | {per_seed} | {row['n']} | {_number(row['mean'], '+.2f')} | "
            f"{_number(row['sd'], '.2f')} | {_number(row['effect_over_sd'], '.2f')} | "
            f"{_number(row['p'], '.3g')} | {_number(row['pairs_for_p01_at_80pct_power'], 'd')} |"
        )
    print(f"rule: {report['rule']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
