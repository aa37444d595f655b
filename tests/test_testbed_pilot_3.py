"""Pilot 3's rule (scripts/testbed_pilot_3.py, docs/testbed-pilot-3.md): a candidate is named
only with twice A12's sign-flip signal per CPU-minute, its step-information control held, on at
least three common pilot seeds."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def pilot():
    path = Path(__file__).resolve().parents[1] / "scripts" / "testbed_pilot_3.py"
    spec = importlib.util.spec_from_file_location("testbed_pilot_3", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["testbed_pilot_3"] = module
    spec.loader.exec_module(module)
    return module


def candidate(name, n=3, flip=1.0, perm_mean=-5.0, perm=0.2, cpu=5.0):
    return {
        "name": name,
        "n": n,
        "flip_score": flip,
        "perm_mean": perm_mean,
        "perm_score": perm,
        "block_cpu_minutes": cpu,
    }


def test_the_rule_names_the_strongest_candidate_that_holds_both_controls(pilot):
    found = pilot.decide(
        [
            candidate("A12"),
            candidate("A8", flip=2.5, cpu=4.0),  # reaches
            candidate("B8", flip=3.0, cpu=2.0),  # reaches, stronger
            candidate("B4", flip=9.0, perm_mean=+2.0),  # the step-information control reversed
            candidate("A4", flip=9.0, perm=0.1),  # the step-information signal lost
            candidate("B12", flip=1.9),  # under 2x
        ]
    )
    assert found["decided"] and found["named"] == "B8"
    assert found["reaching_2x"] == ["B8", "A8"]


def test_ties_go_to_the_cheaper_block_and_nulls_are_said(pilot):
    tie = pilot.decide(
        [candidate("A12"), candidate("A8", flip=2.0, cpu=4.0), candidate("B8", flip=2.0, cpu=2.0)]
    )
    assert tie["named"] == "B8"
    none = pilot.decide([candidate("A12"), candidate("B12", flip=1.5)])
    assert none["decided"] and none["named"] is None and "no candidate" in none["reason"]
    few = pilot.decide([candidate("A12", n=2), candidate("B8", n=2, flip=5.0)])
    assert not few["decided"] and few["named"] is None


def test_no_records_decide_nothing(pilot, tmp_path):
    report = pilot.score(tmp_path)
    assert report["common_seeds"] == [] and not report["decision"]["decided"]


def _records(folder: Path, rng) -> dict:
    """Pilot records as `ccpo matrix --results` writes them, with known outcomes: the sign-flip
    control loses about 20 points, the step-information control about 8."""
    from ccpo_cli.backends.local import games
    from ccpo_cli.experiments.records import SCHEMA, write_record

    ids = games.describe_panel(games.evaluation_games(None), None)["game_ids"]
    rates = {"gigpo": 0.5, "gigpo-flip50": 0.3, "gigpo-perm": 0.42}
    truth = {}
    for prefix, cost in (("p3a", 9.0), ("p3b", 4.0)):
        for seed in (5000, 5001, 5002):
            runs = {}
            for label, rate in rates.items():
                evaluations = {}
                for step in (4, 8, 12):
                    won = "".join("1" if rng.random() < rate else "0" for _ in ids)
                    evaluations[str(step)] = {
                        "success": 100.0 * won.count("1") / len(ids),
                        "won": won,
                        "turns": 2000,
                    }
                    truth[(prefix, seed, label, step)] = evaluations[str(step)]["success"]
                runs[label] = {
                    "run": f"{prefix}-{label}-seed{seed}",
                    "stream": 0,
                    "start_step": 2,
                    "evaluations": evaluations,
                    "step_cpu_s": {str(step): cost for step in range(3, 13)},
                    "eval_cpu_s": {"4": 20.0, "8": 20.0, "12": 20.0},
                    "step_decisions": {str(step): 2000 for step in range(3, 13)},
                    "cpu_s": 10 * cost + 60.0,
                }
            warm = {
                "run": f"{prefix}-warmup-gigpo-seed{seed}",
                "stream": 0,
                "start_step": 0,
                "evaluations": {},
                "step_cpu_s": {"1": cost, "2": cost},
                "eval_cpu_s": {},
                "step_decisions": {"1": 2000, "2": 2000},
                "cpu_s": 2 * cost,
                "trained_by": "gigpo",
            }
            write_record(
                folder,
                {
                    "schema": SCHEMA,
                    "preregistration": folder.name,
                    "prefix": prefix,
                    "seed": seed,
                    "design": "early-fork-tight-eval+eval_from=4,eval_every=4",
                    "window_start": 12,
                    "warm_start": 2,
                    "games": ids,
                    "warm_up": warm,
                    "runs": runs,
                    "cpu_s": 3 * (10 * cost + 60.0) + 2 * cost,
                },
            )
    return truth


def test_candidates_are_scored_from_the_records(pilot, tmp_path):
    import random
    import statistics

    folder = tmp_path / "pilot-3-issue-40"
    truth = _records(folder, random.Random(7))
    report = pilot.score(folder)
    assert report["common_seeds"] == [5000, 5001, 5002]
    by_name = {c["name"]: c for c in report["candidates"]}
    assert len(by_name) == 18  # 2 families x 3 evaluated steps x 3 panels
    a12 = by_name["A12"]
    flips = [
        truth[("p3a", s, "gigpo-flip50", 12)] - truth[("p3a", s, "gigpo", 12)]
        for s in (5000, 5001, 5002)
    ]
    assert a12["flip_mean"] == pytest.approx(statistics.fmean(flips))
    # One block: the warm-up's 2 steps, two forks of 10 steps and one evaluation each.
    assert a12["block_cpu_minutes"] == pytest.approx((2 * 9 + 2 * (10 * 9 + 20)) / 60)
    assert by_name["B4"]["block_cpu_minutes"] == pytest.approx((2 * 4 + 2 * (2 * 4 + 20)) / 60)
    expected = (a12["flip_mean"] / a12["flip_sd"]) ** 2 / a12["block_cpu_minutes"]
    assert a12["flip_score"] == pytest.approx(expected)
    assert report["decision"]["decided"]
