"""Pilot 3's decision (docs/testbed-pilot-3.md), from its records alone.

The two pilot matrices (prefix p3a: `early-fork-tight-eval` evaluated at 4, 8 and 12; p3b: the
same with 4 games per step) trained gigpo, its sign-flip control at half weight (gigpo-flip50)
and its step-information control (gigpo-perm) on pilot seeds 5000-5099. Each candidate is read
out of them (the fork's horizon, the evaluated step, the panel subset) and scored, on the seeds
complete in both families, by each control's (effect/sd)² per CPU-minute of one block (the
warm-up and the two forks with the candidate's evaluation, as the trainer counted their CPU).
The rule, fixed with the plan before any run: a candidate reaches 2× when, on at least 3 common
seeds, its sign-flip score is at least twice A12's (the baseline design on the same seeds), its
step-information control is on the expected side (gigpo ahead) and that control's score is at
least A12's; of several, the highest sign-flip score is named, ties to the cheaper block.

    python scripts/testbed_pilot_3.py results/pilot-3-issue-40 [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ARMS = ("gigpo", "gigpo-flip50", "gigpo-perm")
PILOT_PREFIXES = {"A": "p3a", "B": "p3b"}
WARM_START = 2
EVALUATED = (4, 8, 12)
PANELS = (None, 64, 32)
MIN_SEEDS = 3
BASELINE = "A12"


def candidate_name(family: str, step: int, panel: int | None) -> str:
    return f"{family}{step}" + ("" if panel is None else f"/panel{panel}")


def decide(candidates: list[dict], min_seeds: int = MIN_SEEDS) -> dict:
    """The plan's rule over scored candidates ({name, n, flip_score, perm_mean, perm_score,
    block_cpu_minutes}); the baseline is the candidate named BASELINE."""
    baseline = next((c for c in candidates if c["name"] == BASELINE), None)
    if baseline is None or baseline["n"] < min_seeds or baseline["flip_score"] is None:
        return {
            "decided": False,
            "reason": f"fewer than {min_seeds} common pilot seeds complete in both families",
            "named": None,
        }
    reaching = [
        c
        for c in candidates
        if c["name"] != BASELINE
        and c["n"] >= min_seeds
        and c["flip_score"] is not None
        and c["flip_score"] >= 2 * baseline["flip_score"]
        and c["perm_mean"] is not None
        and c["perm_mean"] < 0
        and c["perm_score"] is not None
        and baseline["perm_score"] is not None
        and c["perm_score"] >= baseline["perm_score"]
    ]
    reaching.sort(key=lambda c: (-c["flip_score"], c["block_cpu_minutes"]))
    return {
        "decided": True,
        "baseline_flip_score": baseline["flip_score"],
        "baseline_perm_score": baseline["perm_score"],
        "reaching_2x": [c["name"] for c in reaching],
        "named": reaching[0]["name"] if reaching else None,
        "reason": "the rule of docs/testbed-pilot-3.md"
        if reaching
        else "no candidate reached twice A12's sign-flip signal per CPU-minute with its step-information control held",
    }


def _only(data, seeds: set[int]):
    from ccpo_cli.experiments.testbed_runs import MatrixData

    runs = {label: {s: r for s, r in by.items() if s in seeds} for label, by in data.runs.items()}
    return MatrixData(data.prefix, runs, data.warmups)


def score(folder: Path) -> dict:
    from ccpo_cli.experiments import records, testbed_cost
    from ccpo_cli.experiments.testbed_cost import SubDesign

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from testbed_design import panel_subsets

    loaded = {
        family: records.load_records(folder, prefix, ARMS)
        for family, prefix in PILOT_PREFIXES.items()
    }
    common = set.intersection(*(set(data.seeds(*ARMS)) for data in loaded.values()))
    model = testbed_cost.fit_cost_model(
        [run for data in loaded.values() for by in data.runs.values() for run in by.values()]
        + [run for data in loaded.values() for run in data.warmups.values()]
    )
    subsets = panel_subsets([panel for panel in PANELS if panel is not None])
    candidates: list[dict] = []
    # Below two common seeds there is no sd to score: nothing is read out.
    for family, data in loaded.items() if len(common) >= 2 else ():
        kept = _only(data, common)
        for step in EVALUATED:
            for panel in PANELS:
                design = SubDesign(WARM_START, step - WARM_START, (step - WARM_START,), panel)
                flip = testbed_cost.design_point(
                    kept, "gigpo-flip50", "gigpo", design, model, subsets
                )
                perm = testbed_cost.design_point(
                    kept, "gigpo-perm", "gigpo", design, model, subsets
                )
                candidates.append(
                    {
                        "name": candidate_name(family, step, panel),
                        "n": flip["n"],
                        "seeds": flip["seeds"],
                        "flip_mean": flip["mean"],
                        "flip_sd": flip["sd"],
                        "flip_score": flip["effect_to_sd_squared_per_cpu_minute"],
                        "perm_mean": perm["mean"],
                        "perm_sd": perm["sd"],
                        "perm_score": perm["effect_to_sd_squared_per_cpu_minute"],
                        "block_cpu_minutes": flip["block_cpu_minutes"],
                    }
                )
    return {
        "common_seeds": sorted(common),
        "candidates": candidates,
        "decision": decide(candidates),
    }


def _number(value, digits=2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = score(args.results)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"common pilot seeds: {report['common_seeds']}")
    print(
        "| candidate | n | flip − gigpo (sd) | flip (e/sd)²/min | perm − gigpo (sd) | perm (e/sd)²/min | block CPU-min |"
    )
    print("|---|---|---|---|---|---|---|")
    for c in report["candidates"]:
        print(
            f"| {c['name']} | {c['n']} | {_number(c['flip_mean'], 1)} ({_number(c['flip_sd'], 1)}) | "
            f"{_number(c['flip_score'], 3)} | {_number(c['perm_mean'], 1)} ({_number(c['perm_sd'], 1)}) | "
            f"{_number(c['perm_score'], 3)} | {_number(c['block_cpu_minutes'])} |"
        )
    print(json.dumps(report["decision"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
