"""The pre-registration (docs/testbed-preregistration.md) is what scripts/testbed_confirm.py
analyses: its fixed parameters parse, name a shipped design, and its seed blocks are fresh."""

from __future__ import annotations

from helpers_scripts import ROOT, load_script

from ccpo_cli.experiments.designs import load_design
from ccpo_cli.seeds import parse_seeds

# Seeds earlier testbed matrices and the issue-28 pilots trained (docs/local-backend.md).
PILOTED = set(range(0, 64)) | set(range(300, 304))


def _confirm_script():
    return load_script("testbed_confirm")


def test_the_preregistered_parameters_parse_and_name_fresh_seed_blocks():
    plan = _confirm_script().read_preregistration(ROOT / "docs" / "testbed-preregistration.md")
    design = load_design(plan["design"])
    assert design.compared_evaluations == (12,) and design.warm_start == 2
    assert plan["alpha"] == 0.01 and plan["budget_cpu_minutes"] == 60
    assert plan["primary_arms"] == ["gigpo", "grpo"]
    blocks = [set(parse_seeds(str(block["seeds"]))) for block in plan["blocks"]]
    assert len(blocks) == 2 and not blocks[0] & blocks[1]
    assert not (blocks[0] | blocks[1]) & PILOTED
    rotations = [tuple(block["warm_start_arms"]) for block in plan["blocks"]]
    assert rotations == [
        ("gigpo", "grpo"),
        ("grpo", "gigpo"),
    ]  # the second block swaps the rotation


def test_a_block_without_runs_is_reported_as_not_run(tmp_path, capsys):
    from ccpo_cli.store import open_db

    open_db(tmp_path / "runs.db")
    assert (
        _confirm_script().main(
            [
                "--db",
                str(tmp_path / "runs.db"),
                "--preregistration",
                str(ROOT / "docs" / "testbed-preregistration.md"),
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "block-1: not run" in printed and "not reproduced" in printed
