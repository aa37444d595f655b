"""The pre-registered confirmation of docs/testbed-preregistration.md, analysed as committed.

Reads the parameters from the YAML block of the pre-registration (design, endpoint arms, alpha,
budget, seed blocks), reads each block's runs back from runs.db, and reports per block:

- the seeds the budget buys (the (gigpo, grpo) blocks with their warm-ups, charged by the
  trainer's own CPU counts, in seed order, by the matrix's rule: `seeds_within_budget`);
- the primary endpoint on exactly those seeds: mean, sd, paired t, two-sided p, MDD, and whether
  it meets the pre-registered criterion (positive, p < alpha);
- the step-information control where the block has one (gigpo − control, its own alpha);
- the home advantage of the warm-up arm, and every seed's difference.

    python scripts/testbed_confirm.py --db conf.db --db conf2.db --preregistration docs/testbed-preregistration.md
    python scripts/testbed_confirm.py --db conf.db --preregistration docs/testbed-preregistration.md --json

Nothing is trained here; a block with no runs yet is reported as not run.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def read_preregistration(path: Path) -> dict:
    from ccpo_cli.bounded_yaml import load_yaml

    text = path.read_text(encoding="utf-8")
    found = re.search(r"```yaml\n(.*?)```", text, flags=re.S)
    if found is None:
        raise SystemExit(f"error: {path}: no ```yaml block with the pre-registered parameters")
    return load_yaml(found.group(1), str(path))


def analyse_block(db, plan: dict, block: dict) -> dict:
    from ccpo_cli.experiments.designs import load_design
    from ccpo_cli.experiments.testbed import differences, home_advantage, paired_stats
    from ccpo_cli.experiments.testbed_cost import SubDesign, fit_cost_model, seeds_within_budget
    from ccpo_cli.experiments.testbed_runs import load_matrix
    from ccpo_cli.seeds import parse_seeds

    design = load_design(plan["design"])
    offsets = tuple(step - design.warm_start for step in design.compared_evaluations)
    sub = SubDesign(design.warm_start, design.steps - design.warm_start, offsets)
    labels = list(block["arms"])
    seeds = parse_seeds(str(block["seeds"]))
    data = load_matrix(db, block["prefix"], labels, seeds)
    runs = [run for by_seed in data.runs.values() for run in by_seed.values()] + list(
        data.warmups.values()
    )
    model = fit_cost_model(runs)
    arm_a, arm_b = plan["primary_arms"]
    budget = float(plan["budget_cpu_minutes"])
    kept, spent = seeds_within_budget(data, [arm_a, arm_b], sub, model, budget)
    found = differences(data, arm_a, arm_b, offsets)
    primary = paired_stats([found[seed] for seed in kept if seed in found])
    alpha = float(plan["alpha"])
    reproduced = primary["p"] is not None and primary["mean"] > 0 and primary["p"] < alpha
    report = {
        "block": block["name"],
        "prefix": block["prefix"],
        "design": design.name,
        "seeds_trained": data.seeds(arm_a, arm_b),
        "seeds_in_budget": kept,
        "cpu_minutes_in_budget": spent,
        "budget_cpu_minutes": budget,
        "primary": {
            "arms": [arm_a, arm_b],
            **primary,
            "alpha": alpha,
            "meets_criterion": reproduced,
        },
        "per_seed": {str(seed): found[seed] for seed in kept if seed in found},
    }
    control = block.get("control")
    if control:
        against = differences(data, arm_a, control["arm"], offsets)
        stats = paired_stats([against[seed] for seed in kept if seed in against])
        report["step_information_control"] = {
            "arms": [arm_a, control["arm"]],
            **stats,
            "alpha": float(control["alpha"]),
            "beats_control": stats["p"] is not None
            and stats["mean"] > 0
            and stats["p"] < float(control["alpha"]),
        }
    # The arm that trained each seed's warm-up, as the fork recorded it (config "start").
    warmed = {
        seed: data.runs[arm_a][seed].start_arm for seed in kept if seed in data.runs.get(arm_a, {})
    }
    report["warm_start"] = home_advantage(
        {seed: found[seed] for seed in kept if seed in found}, warmed, arm_a, arm_b
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--db",
        type=Path,
        action="append",
        required=True,
        help="runs.db holding the blocks (repeatable: a block is read from the first that holds it)",
    )
    parser.add_argument(
        "--preregistration", type=Path, default=Path("docs/testbed-preregistration.md")
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from ccpo_cli.store import open_db

    plan = read_preregistration(args.preregistration)
    databases = [open_db(path, must_exist=True) for path in args.db]
    reports = []
    for block in plan["blocks"]:
        holding = [
            db
            for db in databases
            if db.execute(
                "select 1 from runs where name like ? limit 1", [f"{block['prefix']}-%"]
            ).fetchone()
        ]
        reports.append(analyse_block((holding or databases)[0], plan, block))
    document = {
        "preregistration": str(args.preregistration),
        "design": plan["design"],
        "endpoint": plan["endpoint"],
        "blocks": reports,
        "reproduced": all(report["primary"]["meets_criterion"] for report in reports),
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(
        f"pre-registration {args.preregistration}: design {plan['design']}, {plan['endpoint']}, "
        f"alpha {plan['alpha']}, budget {plan['budget_cpu_minutes']} CPU-min"
    )
    for report in reports:
        primary = report["primary"]
        if not report["seeds_in_budget"]:
            print(f"  {report['block']}: not run")
            continue
        fmt = lambda value, spec: "n/a" if value is None else format(value, spec)  # noqa: E731
        print(
            f"  {report['block']}: {len(report['seeds_in_budget'])} seeds in {report['cpu_minutes_in_budget']:.1f} "
            f"CPU-min; {primary['arms'][0]} - {primary['arms'][1]} = {fmt(primary['mean'], '+.2f')} points, "
            f"sd {fmt(primary['sd'], '.2f')}, t {fmt(primary['t'], '.2f')}, p {fmt(primary['p'], '.2g')}, "
            f"MDD {fmt(primary['mdd'], '.1f')}: {'meets' if primary['meets_criterion'] else 'does not meet'} "
            "the criterion"
        )
        control = report.get("step_information_control")
        if control:
            print(
                f"    step-information control: {control['arms'][0]} - {control['arms'][1]} = "
                f"{fmt(control['mean'], '+.2f')}, p {fmt(control['p'], '.2g')}: "
                f"{'beaten' if control['beats_control'] else 'not beaten'} at alpha {control['alpha']}"
            )
        warm = report["warm_start"]
        if warm.get("home_advantage") is not None:
            print(f"    warm-up arm: home advantage {warm['home_advantage']:+.2f} points")
    print(
        "reproduced"
        if document["reproduced"]
        else "not reproduced (every block must meet the criterion)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
