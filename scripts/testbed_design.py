"""The design curve: signal per CPU-minute of a matrix design, read out of dense matrices.

A dense matrix trains each fork further and evaluates it more often than a design needs, so
every shorter design (fewer steps after the fork, fewer evaluations in the window, a smaller
panel) can be read out of the same runs: its training is exactly the same, its evaluations are
the ones it would take (a panel subset's sampling draws differ, the panel index seeds them),
and its CPU cost is the sum of the steps and evaluations it keeps, as the trainer recorded
them (ccpo_cli/experiments/testbed_cost.py). Matrices with other warm-start lengths (including
none) give the third axis.

For each design and pair of arms the table gives the paired effect, its sd over seeds,
effect/sd, the CPU minutes of one block (warm-up + the two forks), (effect/sd)² per CPU-minute
(what a design earns: a paired t grows as effect/sd × √pairs, and a budget buys pairs in
proportion to 1/cost), and the t expected from a 60-CPU-minute matrix (2 cores × 30 min).

    python scripts/testbed_design.py --db exp/dense.db --matrix d10:10 --matrix d20:20 --matrix d0:0 \\
        --pair gigpo-flip50,gigpo --pair gigpo,grpo --json > docs/testbed-design.json

`--tried FILE` prints instead the table of every design tried for issue 28, nulls included, from
its record (docs/testbed-designs-tried.json): the criteria the designs were ranked by without
looking at gigpo − grpo (the positive control's (effect/sd)² per CPU-minute, gigpo against its
step-information control, the share of GiGPO's advantage variance GRPO's does not explain, sign
disagreements, step-group sizes, the A/A rate) and, for the pre-registered blocks only,
gigpo − grpo:

    python scripts/testbed_design.py --tried docs/testbed-designs-tried.json
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
    parser.add_argument(
        "--tried",
        type=Path,
        default=None,
        help="print the table of every design tried from this record, and nothing else",
    )
    parser.add_argument("--db", type=Path, action="append", help="runs.db (repeatable)")
    parser.add_argument(
        "--results",
        type=Path,
        action="append",
        default=[],
        help="a matrix's records folder, results/PREREGISTRATION (repeatable; read like a runs.db)",
    )
    parser.add_argument(
        "--matrix",
        action="append",
        metavar="PREFIX:K",
        help="a dense matrix's prefix and its warm-start length (repeatable)",
    )
    parser.add_argument("--pair", action="append", metavar="A,B", help="arms compared, a − b")
    parser.add_argument("--seeds", default="0-99")
    parser.add_argument(
        "--panels", default="128,64,32", help="panel sizes to read out (128: the whole panel)"
    )
    parser.add_argument("--budget-cpu-minutes", type=float, default=60.0)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def panel_subsets(sizes: list[int]) -> dict[int, set[str]]:
    """{N: the game ids of the type-balanced N-game subset `--eval-games N` plays}."""
    from ccpo_cli.backends.local import games

    subsets = {}
    for size in sizes:
        chosen = games.describe_panel(games.evaluation_games(size), size)["game_ids"]
        subsets[size] = set(chosen)
    return subsets


def sub_designs(warm_start: int, evaluated: list[int], panels: list[int | None]):
    """The designs a dense matrix holds: every horizon H it evaluated at, with the window of all
    its evaluations after the fork up to H (for K = 0: the second half of the run), its last two
    and its last one, on each panel size."""
    from ccpo_cli.experiments.testbed_cost import SubDesign

    offsets = sorted(step - warm_start for step in evaluated if step > warm_start)
    designs = []
    for horizon in offsets:
        upto = [offset for offset in offsets if offset <= horizon]
        if not warm_start:
            upto = [offset for offset in upto if offset >= horizon / 2]
        windows = {tuple(upto), tuple(upto[-2:]), tuple(upto[-1:])}
        for window in sorted(windows, key=len, reverse=True):
            for panel in panels:
                designs.append(SubDesign(warm_start, horizon, window, panel))
    return designs


TRIED_COLUMNS = (
    ("design", "design", None),
    ("block", "block", None),
    ("seeds", "seeds", None),
    ("control (e/sd)²/min", "positive_control_signal_per_cpu_minute", 2),
    ("gigpo − perm", "gigpo_minus_step_information_control", 1),
    ("p", "p_step_information_control", 3),
    ("unexplained var", "share_of_gigpo_variance_unexplained_by_grpo", 2),
    ("opposite signs", "share_of_rows_with_opposite_signs", 3),
    ("step group rows", "step_group_rows_median", 0),
    ("A/A at p<.05", "aa_false_positives", None),
    ("oracle − grpo", "oracle_credit_minus_grpo", 1),
    ("gigpo − grpo", "gigpo_minus_grpo", 1),
    ("p", "p_gigpo_minus_grpo", 3),
)


def print_tried(record: dict) -> None:
    """One row per design and block tried, as the record holds them ("–": not measured there)."""

    def shown(value, digits):
        if value is None:
            return "–"
        return (
            f"{value:.{digits}f}"
            if digits is not None and isinstance(value, (int, float))
            else str(value)
        )

    rows = [
        [shown(entry.get(key), digits) for _, key, digits in TRIED_COLUMNS]
        for entry in record["designs"]
    ]
    headers = [title for title, _, _ in TRIED_COLUMNS]
    widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(len(headers))]
    print(" | ".join(header.ljust(width) for header, width in zip(headers, widths)))
    print("-|-".join("-" * width for width in widths))
    for row in rows:
        print(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    for entry in record["designs"]:
        if entry.get("note"):
            print(f"{entry['design']} ({entry['block']}): {entry['note']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tried is not None:
        print_tried(json.loads(args.tried.read_text(encoding="utf-8")))
        return 0
    if not ((args.db or args.results) and args.matrix and args.pair):
        raise SystemExit(
            "error: --db or --results, --matrix and --pair are needed (or --tried FILE)"
        )
    from ccpo_cli.experiments import records, testbed_cost, testbed_runs
    from ccpo_cli.experiments.matrix import parse_seed_list
    from ccpo_cli.store import open_db

    seeds = parse_seed_list(args.seeds)
    pairs = [tuple(part.strip() for part in pair.split(",")) for pair in args.pair]
    labels = sorted({label for pair in pairs for label in pair})
    sizes = [int(size) for size in args.panels.split(",")]
    subsets = panel_subsets([size for size in sizes if size != 128])
    panels: list[int | None] = [None if size == 128 else size for size in sizes]
    points, loaded = [], []
    for spec in args.matrix:
        prefix, _, warm = spec.partition(":")
        found = [
            testbed_runs.load_matrix(open_db(path), prefix, labels, seeds) for path in args.db or []
        ]
        found += [records.load_records(folder, prefix, labels) for folder in args.results]
        loaded.extend((int(warm), data) for data in found if any(data.runs.values()))
    model = testbed_cost.fit_cost_model(
        [run for _, data in loaded for runs in data.runs.values() for run in runs.values()]
        + [run for _, data in loaded for run in data.warmups.values()]
    )
    for warm, data in loaded:
        for arm_a, arm_b in pairs:
            seeds_here = data.seeds(arm_a, arm_b)
            if len(seeds_here) < 2:
                continue
            evaluated = sorted(
                set.intersection(
                    *(
                        set(data.runs[label][seed].evaluations)
                        for label in (arm_a, arm_b)
                        for seed in seeds_here
                    )
                )
            )
            for design in sub_designs(warm, evaluated, panels):
                point = testbed_cost.design_point(
                    data, arm_a, arm_b, design, model, subsets, args.budget_cpu_minutes
                )
                points.append({"prefix": data.prefix, **point})
    report = {
        "cost_model": {
            "cpu_s_per_training_decision": model.per_decision_s,
            "cpu_s_per_evaluation_turn": model.per_eval_turn_s,
            "runs_that_recorded_cpu": model.fitted_on,
        },
        "points": points,
    }
    if args.plot is not None:
        plot(points, args.plot)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    key = f"expected_t_in_{args.budget_cpu_minutes:g}_cpu_minutes"
    print(
        f"{'pair':26}{'design':44}{'seeds':>6}{'effect':>8}{'sd':>7}{'eff/sd':>8}{'CPU-min':>8}{'(e/sd)²/min':>12}"
        f"{'t@budget':>9}"
    )
    for point in points:

        def shown(value, digits=2):
            return "–" if value is None else f"{value:.{digits}f}"

        print(
            f"{' − '.join(point['arms']):26}{point['design']:44}{point['n']:>6}{shown(point['mean'], 1):>8}"
            f"{shown(point['sd'], 1):>7}{shown(point['effect_to_sd']):>8}{shown(point['block_cpu_minutes']):>8}"
            f"{shown(point['effect_to_sd_squared_per_cpu_minute'], 3):>12}{shown(point[key], 1):>9}"
        )
    return 0


def plot(points: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pairs = sorted({tuple(point["arms"]) for point in points})
    figure, axes = plt.subplots(1, len(pairs), figsize=(5.5 * len(pairs), 4), squeeze=False)
    for axis, pair in zip(axes[0], pairs):
        for warm in sorted({point["warm_start"] for point in points}):
            chosen = [
                point
                for point in points
                if tuple(point["arms"]) == pair
                and point["warm_start"] == warm
                and point["panel"] is None
                and len(point["eval_steps"])
                == max(
                    len(other["eval_steps"])
                    for other in points
                    if tuple(other["arms"]) == pair
                    and other["warm_start"] == warm
                    and other["horizon"] == point["horizon"]
                )
            ]
            chosen.sort(key=lambda point: point["horizon"])
            values = [
                (point["horizon"], point["effect_to_sd_squared_per_cpu_minute"])
                for point in chosen
                if point["effect_to_sd_squared_per_cpu_minute"] is not None
            ]
            if values:
                axis.plot(*zip(*values), "o-", label=f"warm start {warm}")
        axis.set_title(f"{pair[0]} − {pair[1]}: signal per CPU-minute", fontsize=10)
        axis.set_xlabel("steps after the fork (whole panel, every evaluation after the fork)")
        axis.set_ylabel("(effect/sd)² per CPU-minute of a block")
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
