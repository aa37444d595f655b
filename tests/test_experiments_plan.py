"""`ccpo matrix --plan` (ccpo_cli/experiments/budget.py): the pairs, CPU-minutes and wall time
of a matrix before it starts, reproducing the pair counts the pre-registrations state."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app

runner = CliRunner()


def plan(*options: str) -> dict:
    result = runner.invoke(
        app, ["matrix", "--plan", "--design", "early-fork-tight-eval", *options, "--json"]
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize(
    ("effect", "sd", "pairs", "where"),
    [
        # docs/testbed-oracle-pilot.md's table: "pairs for p < 0.01" at 80 % power
        (18.59, 12.84, 9, "oracle pilot: gigpo-oracle - grpo"),
        (23.91, 7.09, 5, "oracle pilot: gigpo-oracle - gigpo"),
        # issue 40: the pooled +3.9 at block 5's sd 6.6 (the research matrix's budget)
        (3.9, 6.6, 37, "pre-registration 3 (issue 40)"),
    ],
)
def test_plan_reproduces_the_pair_counts_of_the_preregistrations(effect, sd, pairs, where):
    found = plan("--arms", "gigpo,grpo", "--effect", str(effect), "--sd", str(sd))
    assert found["pairs"] == pairs, where
    assert found["alpha"] == 0.01 and found["power"] == 0.8
    assert found["power_at_pairs"] >= 0.8


def test_plan_prices_the_arms_and_the_cores_and_reads_the_designs_measured_sd():
    two = plan("--arms", "gigpo,grpo", "--effect", "3.9", "--cores", "2")
    assert two["sd"] == 6.6 and two["sd_source"] == "the design's measured sd"
    assert two["block_cpu_minutes"] == pytest.approx(0.235 + 2 * 1.173)
    assert two["cpu_minutes"] == pytest.approx(37 * two["block_cpu_minutes"])
    assert two["wall_minutes"] == pytest.approx(two["cpu_minutes"] / 2)
    five = plan(
        "--arms",
        "grpo,gigpo,return-hard,return-hard-fbjw,global-successor",
        "--effect",
        "3.9",
        "--cores",
        "16",
        "--ray-address",
        "local",
    )
    assert five["pairs"] == 37 and len(five["comparisons"]) == 10
    assert five["cpu_minutes"] == pytest.approx(37 * (0.235 + 5 * 1.173))
    assert five["blocks_side_by_side"] == 8
    assert five["wall_minutes"] < two["wall_minutes"]
    # The measured sd belongs to the design as measured: a changed design needs --sd.
    result = runner.invoke(
        app,
        ["matrix", "--plan", "--design", "early-fork-tight-eval", "--tasks", "4"]
        + ["--arms", "gigpo,grpo", "--effect", "3.9"],
    )
    assert result.exit_code == 2 and "no measured sd" in result.output


def test_plan_refuses_nonsense_in_one_line():
    for options, exit_code in (
        (["--effect", "0"], 2),
        (["--effect", "3.9", "--sd", "-1"], 2),
        (["--effect", "3.9", "--alpha", "1.5"], 2),
        ([], 2),
    ):
        result = runner.invoke(
            app,
            ["matrix", "--plan", "--design", "early-fork-tight-eval", "--arms", "gigpo,grpo"]
            + options,
        )
        assert result.exit_code == exit_code, (options, result.output)
        assert "Traceback" not in result.output
