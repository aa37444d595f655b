"""Does the CPU testbed find the differences that are there, and only those? Both controls, one run.

One matrix (`ccpo matrix` underneath, the matrix defaults unless options say otherwise) trains,
on every seed, three arms forked from one warm-up trained by the base arm:

* BASE (default gigpo);
* BASE-aa, the same arm on rollout stream 1 (`--variant BASE-aa=BASE:stream=1`): identical
  flags, independent training noise after the fork. The **A/A control**: whatever the testbed
  says about BASE − BASE-aa is a false positive. Each seed's pair is tested on its own against
  the spread of the other pairs (t with N − 2 df, ccpo_cli/experiments/testbed.py), so N seeds
  give N tests, and the share at p < 0.05 is judged against Binomial(N, 0.05)'s 95 % range;
* the **positive control** (default gigpo with the step term's sign flipped,
  `--variant gigpo-flip=gigpo:step_advantage_w=-1`): a variant known to hurt credit
  assignment, which the testbed must detect.

Reported, as a table and with --json as one document: the A/A false-positive rate with its
interval and null ranges, the per-pair p-values (uniform under the null; --plot draws their
histogram), the positive control's paired effect, sd and p over all seeds and over the seeds a
30-minute matrix of (BASE, control) completes (`--budget-cpu-minutes`, default 60 = this
project's 2 cores × 30 min; the same runs `ccpo matrix --arms BASE,CONTROL --warm-start-arms
BASE --cpu-minutes 60` would train, seed for seed), and effect-to-sd per CPU-minute.

    python scripts/testbed_validity.py --db exp/validity.db                 # 40 seeds, ~3 h on 2 cores
    python scripts/testbed_validity.py --db exp/validity.db --analyze-only  # the report of what is there
    python scripts/testbed_validity.py --quick --db /tmp/tv.db              # CI: a tiny design, < 1 CPU-min

--quick trains a tiny design (4 seeds, 3 steps of 2 games × 2 rollouts, 4-game evaluations) to
check that the whole path runs and reports; its numbers mean nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

QUICK = {
    "steps": 3,
    "tasks": 2,
    "group": 2,
    "max_steps": 6,
    "eval_max_steps": 6,
    "eval_every": 1,
    "eval_games": 4,
    "workers": 0,
}
QUICK_WARM_START = 1
QUICK_PAIRS = 4
CONTROL_P = 0.01  # the positive control must be detected at p below this


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", type=Path, default=Path("validity.db"))
    parser.add_argument("--prefix", default="tv")
    parser.add_argument(
        "--base", default="gigpo", help="the arm of the A/A pair and the control's reference"
    )
    parser.add_argument(
        "--aa-arms",
        default=None,
        help="arms that each get an A/A twin (default: the base); the first is the base; the "
        "others are also compared with it",
    )
    parser.add_argument(
        "--warm-start-arms",
        default=None,
        help="arms that train the warm-ups in turn (default: the base)",
    )
    parser.add_argument(
        "--control",
        default="gigpo-flip=gigpo:step_advantage_w=-1",
        help="the positive control, as a --variant of ccpo matrix",
    )
    parser.add_argument("--pairs", type=int, default=40, help="seeds (A/A pairs), 0..N-1")
    parser.add_argument(
        "--budget-cpu-minutes",
        type=float,
        default=60.0,
        help="the 30-minute matrix the control must be detected in, in CPU minutes",
    )
    parser.add_argument(
        "--minutes", type=float, default=10_000.0, help="wall-time budget of the training"
    )
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--warm-start", type=int, default=None)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument(
        "--eval-from", type=int, default=None, help="first evaluated step (default: the matrix's)"
    )
    parser.add_argument("--eval-games", type=int, default=None)
    parser.add_argument("--tasks", type=int, default=None)
    parser.add_argument("--group", type=int, default=None)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument(
        "--train-games-dir", default=None, help="game folders instead of the shipped pool / panel"
    )
    parser.add_argument("--eval-games-dir", default=None)
    parser.add_argument(
        "--analyze-only", action="store_true", help="report the runs already in --db; train nothing"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a tiny design for CI (numbers mean nothing)"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--plot", type=Path, default=None, help="PNG of the A/A p-values and the control"
    )
    return parser.parse_args(argv)


def design_of(args: argparse.Namespace):
    from ccpo_cli.experiments.blocks import MatrixArm
    from ccpo_cli.experiments.matrix import (
        DEFAULT_WARM_START,
        MatrixDesign,
        default_recipe,
        parse_variant,
    )

    given = {
        "steps": args.steps,
        "eval_every": args.eval_every,
        "eval_games": args.eval_games,
        "tasks": args.tasks,
        "group": args.group,
        "workers": args.workers,
        "train_games_dir": args.train_games_dir,
        "eval_games_dir": args.eval_games_dir,
    }
    fields = {key: value for key, value in given.items() if value is not None}
    warm_start = DEFAULT_WARM_START if args.warm_start is None else args.warm_start
    pairs = args.pairs
    if args.quick:
        fields = {**QUICK, **fields}
        warm_start = QUICK_WARM_START if args.warm_start is None else args.warm_start
        pairs = min(args.pairs, QUICK_PAIRS)
    from ccpo_cli.arms import load_arm

    names = [args.base] + [
        name.strip()
        for name in (args.aa_arms or "").split(",")
        if name.strip() and name.strip() != args.base
    ]
    arms = []
    for name in names:
        arm = MatrixArm(name, load_arm(name))
        arms += [arm, MatrixArm(f"{name}-aa", arm.arm, 1)]
    control = parse_variant(args.control)
    warm = tuple(
        name.strip() for name in (args.warm_start_arms or args.base).split(",") if name.strip()
    )
    return MatrixDesign(
        (*arms, control),
        tuple(range(pairs)),
        args.minutes,
        recipe=default_recipe(**fields),
        prefix=args.prefix,
        warm_start=warm_start,
        warm_start_arms=warm,
        eval_from=args.eval_from,
    )


def window_of(design):
    """The design's window (evaluations after the fork) as a SubDesign of itself."""
    from dataclasses import replace

    from ccpo_cli.experiments import testbed_cost

    recipe, warm = design.recipe, design.warm_start
    window = design.window_first_step
    first = window if design.eval_from is None else design.eval_from
    schedule = replace(recipe, eval_from=first)
    # A fork trains (and evaluates after) its own steps only: warm + 1 onwards.
    steps = [
        step
        for step in range(warm + 1, recipe.steps + 1)
        if step >= window and schedule.evaluates_after(step, last=step == recipe.steps)
    ]
    return testbed_cost.SubDesign(warm, recipe.steps - warm, tuple(step - warm for step in steps))


def analyze(db_path: Path, design, budget_cpu_minutes: float) -> dict:
    from ccpo_cli.experiments import testbed, testbed_cost, testbed_runs
    from ccpo_cli.store import open_db

    labels = [arm.label for arm in design.arms]
    base, control = labels[0], labels[-1]
    aa_arms = labels[0:-1:2]
    data = testbed_runs.load_matrix(open_db(db_path), design.prefix, labels, design.seeds)
    sub = window_of(design)
    offsets = sub.eval_offsets
    model = testbed_cost.fit_cost_model(
        [run for runs in data.runs.values() for run in runs.values()] + list(data.warmups.values())
    )
    aa = testbed.aa_false_positive_rate(
        {arm: testbed.differences(data, arm, f"{arm}-aa", offsets) for arm in aa_arms}
    )

    def comparison(arm_a: str, arm_b: str) -> dict:
        """a − b over every seed, and over the seeds a 2-arm matrix of them completes in the budget."""
        point = testbed_cost.design_point(
            data, arm_a, arm_b, sub, model, budget_cpu_minutes=budget_cpu_minutes
        )
        seeds, spent = testbed_cost.seeds_within_budget(
            data, [arm_a, arm_b], sub, model, budget_cpu_minutes
        )
        found = testbed.differences(data, arm_a, arm_b, offsets)
        within = testbed.paired_stats([found[seed] for seed in seeds if seed in found])
        warmed = {seed: data.runs[arm_a][seed].start_arm for seed in found}
        return {
            "all_seeds": point,
            "within_budget": {
                "budget_cpu_minutes": budget_cpu_minutes,
                "seeds": seeds,
                "cpu_minutes": spent,
                **within,
            },
            "warm_start": testbed.home_advantage(found, warmed, arm_a, arm_b),
            "differences": sorted(found.items()),
        }

    control_report = comparison(control, base)
    within = control_report["within_budget"]
    within["detected"] = within["p"] is not None and within["p"] < CONTROL_P and within["mean"] < 0
    return {
        "design": {
            "arms": [arm.described for arm in design.arms],
            "seeds": list(design.seeds),
            "window_steps": [sub.warm_start + offset for offset in offsets],
            "warm_start": sub.warm_start,
            "warm_start_arms": list(design.warm_start_arms),
            "recipe": {
                key: value
                for key, value in design.recipe.as_dict().items()
                if key not in ("update", "model")
            },
        },
        "aa": aa,
        "aa_design_points": {
            arm: testbed_cost.design_point(
                data, arm, f"{arm}-aa", sub, model, budget_cpu_minutes=budget_cpu_minutes
            )
            for arm in aa_arms
        },
        "control": control_report,
        "comparisons": {f"{arm} - {base}": comparison(arm, base) for arm in aa_arms[1:]},
        "cost_model": {
            "cpu_s_per_training_decision": model.per_decision_s,
            "cpu_s_per_evaluation_turn": model.per_eval_turn_s,
            "runs_that_recorded_cpu": model.fitted_on,
        },
    }


def _number(value, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def print_report(report: dict) -> None:
    design, aa, control = report["design"], report["aa"], report["control"]
    print(
        f"arms: {'; '.join(design['arms'])}; warm start {design['warm_start']} steps by "
        f"{', '.join(design['warm_start_arms'])} in turn; window steps {design['window_steps']}"
    )
    if aa.get("rate") is None:
        print(f"A/A: {aa.get('note')}")
    else:
        low, high = aa["binomial_range_95"]
        print(
            f"A/A (each arm against its twin: {', '.join(f'{k} {v}' for k, v in aa['sets'].items())}), "
            f"{aa['pairs']} pairs: {aa['false_positives']} at p < "
            f"{aa['alpha']} = {100 * aa['rate']:.1f} % (95 % interval {100 * aa['rate_interval_95'][0]:.1f}–"
            f"{100 * aa['rate_interval_95'][1]:.1f} %); Binomial({aa['pairs']}, {aa['alpha']}) range {low}–{high} "
            f"(simulated leave-one-out null {aa['simulated_null_range_95'][0]}–{aa['simulated_null_range_95'][1]}): "
            f"{'within' if aa['within_binomial_range'] else 'OUTSIDE'}; KS uniformity p = {aa['ks_uniform_p']:.2f}"
        )
        for name, whole in aa["whole_matrix"].items():
            print(
                f"    {name} vs its twin, whole matrix: difference {_number(whole['mean'])}, sd {_number(whole['sd'])}, "
                f"p {_number(whole['p'], 3)}"
            )
    print(
        f"{'comparison':34}{'seeds':>6}{'effect':>9}{'sd':>7}{'p':>10}{'MDD':>7}{'eff/sd':>8}{'CPU-min':>9}"
    )
    named = [(f"control − {design['arms'][0]}", control), *report["comparisons"].items()]
    for name, found in named:
        rows = [
            (f"{name}, all seeds", found["all_seeds"], None),
            (
                f"{name}, in {found['within_budget']['budget_cpu_minutes']:g} CPU-min",
                found["within_budget"],
                found["within_budget"]["cpu_minutes"],
            ),
        ]
        for label, row, minutes in rows:
            p = "–" if row["p"] is None else f"{row['p']:.1e}"
            print(
                f"{label:34}{row['n']:>6}{_number(row['mean']):>9}{_number(row['sd']):>7}{p:>10}"
                f"{_number(row['mdd']):>7}{_number(row['effect_to_sd']):>8}{_number(minutes, 1):>9}"
            )
        home = found["warm_start"]
        if home.get("home_advantage") is not None:
            print(
                f"    warm-start arm: {home['n_warmup_a']} seed(s) warmed by the first arm, {home['n_warmup_b']} by "
                f"the second: home advantage {_number(home['home_advantage'])} ± {_number(home.get('home_advantage_se'))}"
                f" (p {_number(home.get('p_home_advantage'), 3)}), balanced difference "
                f"{_number(home['balanced_difference'])}"
            )
    point = control["all_seeds"]
    print(
        f"block (warm-up + 2 forks): {_number(point['block_cpu_minutes'])} CPU-min; (effect/sd)^2 per CPU-min "
        f"{_number(point['effect_to_sd_squared_per_cpu_minute'], 3)}; control detected within budget: "
        f"{control['within_budget']['detected']}"
    )


def plot_report(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    aa = report["aa"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    p_values = [row["p"] for row in aa.get("per_pair", [])]
    bins = 10
    left.hist(p_values, bins=bins, range=(0, 1), color="#7a9cc6", edgecolor="white")
    expected = len(p_values) / bins
    left.axhline(expected, color="black", linestyle="--", linewidth=1, label="uniform (the null)")
    left.set_xlabel("per-pair p (A/A, leave-one-out t)")
    left.set_ylabel("pairs")
    if p_values:
        low, high = aa["rate_interval_95"]
        left.set_title(
            f"A/A: {aa['false_positives']}/{aa['pairs']} at p < 0.05 = {100 * aa['rate']:.1f} % "
            f"[{100 * low:.0f}, {100 * high:.0f}]",
            fontsize=9,
        )
    left.legend(fontsize=8)
    right.axhline(0, color="black", linewidth=0.8)
    for name, marker in zip(aa.get("sets", {}), "o^v<>"):
        differences = sorted(
            (row["seed"], row["difference"])
            for row in aa.get("per_pair", [])
            if row.get("set", "pairs") == name
        )
        right.plot(
            [seed for seed, _ in differences],
            [value for _, value in differences],
            marker,
            color="#7a9cc6",
            label=f"A/A: {name} − its twin",
        )
    control = report["control"]["differences"]
    right.plot(
        [seed for seed, _ in control],
        [value for _, value in control],
        "s",
        color="#c66a5a",
        label="control − base",
    )
    right.set_xlabel("seed")
    right.set_ylabel("window-mean difference (points)")
    right.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from ccpo_cli.errors import CcpoError

    try:
        design = design_of(args)
        if not args.analyze_only:
            from ccpo_cli.experiments.matrix import run_matrix

            result = run_matrix(
                args.db,
                design,
                progress=lambda line: print(f"[validity] {line}", file=sys.stderr, flush=True),
            )
            print(
                f"[validity] {result.stopped_reason}; {len(result.seeds_compared)} seeds in "
                f"{result.elapsed_s / 60:.1f} min, {sum(result.block_cpu_seconds) / 60:.1f} CPU-min trained now",
                file=sys.stderr,
            )
        report = analyze(args.db, design, args.budget_cpu_minutes)
    except CcpoError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    if args.plot is not None:
        plot_report(report, args.plot)
    if args.json:
        json.dump(report, sys.stdout, indent=2, default=str)
        print()
    else:
        print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
