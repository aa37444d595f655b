"""Where the variance of a paired arm comparison comes from: evaluation noise against training.

For two arms trained on the same seeds (a `ccpo matrix`), each seed's window mean is split into

* evaluation noise: each evaluation of n games is a binomial draw around the policy's rate p,
  so a window of k evaluations has variance (1/k²) Σ p(1-p)/n (evaluations taken as independent);
* training noise: what is left of the observed variance over seeds.

It prints both for each arm's seed means and for the per-seed difference (the unit of the paired
test), the correlation of the two arms within a seed, the minimum detectable difference (MDD,
ccpo_cli.report.power) at the observed sd, and what the MDD would be with more pairs or with the
evaluation noise divided by a factor (a larger panel or more evaluations in the window).

A second table asks what the window itself does: the sd of the paired difference, and its
evaluation part, when the window keeps only some of the evaluations (later starts, a single
step, every other one). If the training part shrinks as evaluations are added over the same
span, the policy's step-to-step jitter is what averaging removes; if it does not, the seeds
differ in how fast they learn and only more pairs help.

    python scripts/matrix_variance.py --db runs.db --arms grpo,return-hard --prefix matrix --window-start 10
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db", default="runs.db")
    parser.add_argument("--arms", required=True, help="two arms, e.g. grpo,return-hard")
    parser.add_argument("--prefix", default="matrix", help="run names are PREFIX-ARM-seedN")
    parser.add_argument("--window-start", type=int, required=True)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def window_of(
    evaluations: list[dict], start: int, steps: set[int] | None = None
) -> tuple[float, float]:
    """(window mean in points, its binomial variance in points²) over the evaluations from
    `start` on, or only those at `steps`."""
    window = [
        e for e in evaluations if e["step"] >= start and (steps is None or e["step"] in steps)
    ]
    if not window:
        raise SystemExit(f"no evaluation at or after step {start}")
    k = len(window)
    mean = sum(e["success_rate"] for e in window) / k
    variance = (
        sum(
            (e["success_rate"] / 100) * (1 - e["success_rate"] / 100) / e["episodes"]
            for e in window
        )
        * 1e4
        / k**2
    )
    return mean, variance


def split_variance(values: list[float], eval_variances: list[float]) -> dict:
    observed = statistics.variance(values)
    evaluation = statistics.fmean(eval_variances)
    return {
        "observed_sd": math.sqrt(observed),
        "evaluation_sd": math.sqrt(evaluation),
        "training_sd": math.sqrt(max(observed - evaluation, 0.0)),
        "evaluation_share": evaluation / observed if observed > 0 else None,
    }


def decompose(db_path: str, arm_a: str, arm_b: str, prefix: str, window_start: int) -> dict:
    from ccpo_cli.errors import InvalidInput
    from ccpo_cli.experiments.matrix import run_name
    from ccpo_cli.report.power import paired_mdd, paired_seeds_needed
    from ccpo_cli.store import open_db, run_evaluations

    db = open_db(db_path)
    evaluations: dict[int, dict[str, list[dict]]] = {}
    for seed in range(10_000):
        found = {}
        for arm in (arm_a, arm_b):
            try:
                found[arm] = run_evaluations(db, run_name(prefix, arm, seed))
            except InvalidInput:
                break
        if len(found) == 2:
            evaluations[seed] = found
        elif seed > 50 and not found:
            break
    if len(evaluations) < 3:
        raise SystemExit(f"need at least 3 seeds with both arms; found {sorted(evaluations)}")
    seeds = sorted(evaluations)
    per_seed = {
        s: {arm: window_of(evaluations[s][arm], window_start) for arm in (arm_a, arm_b)}
        for s in seeds
    }
    means = {arm: [per_seed[s][arm][0] for s in seeds] for arm in (arm_a, arm_b)}
    eval_vars = {arm: [per_seed[s][arm][1] for s in seeds] for arm in (arm_a, arm_b)}
    differences = [a - b for a, b in zip(means[arm_a], means[arm_b])]
    difference = split_variance(
        differences, [va + vb for va, vb in zip(eval_vars[arm_a], eval_vars[arm_b])]
    )
    n = len(seeds)
    sd = difference["observed_sd"]
    training_sd = difference["training_sd"]
    projections = {
        "mdd_observed": paired_mdd(sd, n),
        "pairs_for_5_points": paired_seeds_needed(5.0, sd),
        # the same pairs with the evaluation noise divided by a factor (panel × evaluations)
        **{
            f"mdd_eval_noise_divided_by_{f}": paired_mdd(
                math.sqrt(training_sd**2 + difference["evaluation_sd"] ** 2 / f), n
            )
            for f in (2, 4)
        },
        "mdd_without_evaluation_noise": paired_mdd(training_sd, n) if training_sd > 0 else None,
        "pairs_for_5_points_without_evaluation_noise": paired_seeds_needed(5.0, training_sd)
        if training_sd > 0
        else None,
    }
    return {
        "seeds": seeds,
        "window_start": window_start,
        "windows": window_variants(evaluations, seeds, (arm_a, arm_b), window_start),
        "arms": {
            arm: {
                "mean": statistics.fmean(means[arm]),
                "seed_means": means[arm],
                **split_variance(means[arm], eval_vars[arm]),
            }
            for arm in (arm_a, arm_b)
        },
        "correlation_within_seed": statistics.correlation(means[arm_a], means[arm_b]),
        "difference": {
            "mean": statistics.fmean(differences),
            "per_seed": differences,
            **difference,
        },
        "projections": projections,
    }


def window_variants(
    evaluations: dict, seeds: list[int], arms: tuple[str, str], window_start: int
) -> list[dict]:
    """The paired difference's sd (and its evaluation part) for sub-windows of the evaluated steps
    every run shares from `window_start` on."""
    shared = sorted(
        set.intersection(
            *(
                {e["step"] for e in evaluations[s][arm] if e["step"] >= window_start}
                for s in seeds
                for arm in arms
            )
        )
    )
    choices = [shared[i:] for i in range(len(shared))] + [[step] for step in shared[:-1]]
    if len(shared) > 2:
        choices += [shared[::-2][::-1], shared[-2::-2][::-1]]
    rows = []
    for steps in choices:
        differences, eval_variances = [], []
        for seed in seeds:
            (mean_a, var_a), (mean_b, var_b) = (
                window_of(evaluations[seed][arm], window_start, set(steps)) for arm in arms
            )
            differences.append(mean_a - mean_b)
            eval_variances.append(var_a + var_b)
        rows.append(
            {
                "steps": steps,
                "mean": statistics.fmean(differences),
                **split_variance(differences, eval_variances),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    arms = [arm.strip() for arm in args.arms.split(",")]
    if len(arms) != 2:
        raise SystemExit("--arms: exactly two arms")
    report = decompose(args.db, arms[0], arms[1], args.prefix, args.window_start)
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
        return 0
    print(
        f"seeds {report['seeds']} (n = {len(report['seeds'])}), window from step {args.window_start}"
    )
    print(f"{'':28s}{'mean':>8s}{'sd':>8s}{'eval sd':>9s}{'train sd':>9s}{'eval share':>11s}")
    rows = [(arm, values) for arm, values in report["arms"].items()] + [
        (f"{arms[0]} - {arms[1]}", report["difference"])
    ]
    for label, values in rows:
        share = values["evaluation_share"]
        print(
            f"{label:28s}{values['mean']:8.1f}{values['observed_sd']:8.2f}{values['evaluation_sd']:9.2f}"
            f"{values['training_sd']:9.2f}{'' if share is None else f'{100 * share:10.0f}%':>11s}"
        )
    print(f"correlation of the two arms within a seed: {report['correlation_within_seed']:.2f}")
    print("\nthe paired difference over sub-windows (evaluated steps kept):")
    print(f"{'steps':28s}{'mean':>8s}{'sd':>8s}{'eval sd':>9s}{'train sd':>9s}")
    for row in report["windows"]:
        label = ",".join(str(step) for step in row["steps"])
        print(
            f"{label[:27]:28s}{row['mean']:8.1f}{row['observed_sd']:8.2f}{row['evaluation_sd']:9.2f}{row['training_sd']:9.2f}"
        )
    print()
    for key, value in report["projections"].items():
        print(
            f"{key:44s} {'n/a' if value is None else (f'{value:.1f}' if isinstance(value, float) else value)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
