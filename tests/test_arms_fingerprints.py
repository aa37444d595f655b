"""The five shipped arms keep the fingerprints they had before the flags were declared once.

A fingerprint names the computation an arm performs, and runs.db and published cards record it:
a refactor that moved one of these would orphan every recorded run. Adding a flag does move
them all; that change updates this table and says which flag and why in its commit.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.cli.app import app

# Moved once by the `padding` flag (docs/verl-backend.md): grpo b74ec3ee -> f47cf7e2, gigpo
# 882bd02c -> 33f91d10, return-hard 4b61f962 -> d47bb9a1, return-hard-fbjw 2c0f9f6a -> 4bea4036,
# global-successor 704130f2 -> 56f70954.
FINGERPRINTS = {
    "grpo": "f47cf7e21b8fa7d03780d6206cf8260e7e4d750643bf26670eb46a65f07338a0",
    "gigpo": "33f91d103fe5be59f2d52948c29870e1bd3b5d507906ae674cc34b303338b188",
    "return-hard": "d47bb9a1ed6dad5c410d2485552e42f12abeb3d7f1a6d622e58f178752223b70",
    "return-hard-fbjw": "4bea4036aea2a78fc62e41e0cbcf802ae61326ca04931f3001b4fefc0fa63b5f",
    "global-successor": "56f70954d694d8efaa2afc140e3a56c669964b1abf2922b9a9572b1f39ab85d2",
}


@pytest.mark.parametrize("name", sorted(FINGERPRINTS))
def test_arms_show_json_gives_the_recorded_fingerprint(name):
    result = CliRunner().invoke(app, ["arms", "show", name, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["fingerprint"] == FINGERPRINTS[name]
    assert load_arm(name).fingerprint == FINGERPRINTS[name]


def test_overrides_that_restore_the_file_values_keep_the_fingerprint():
    # `--set lam_fix=` (unset) and `--set backoff_task=1` on fbjw are no-ops: same computation, same name.
    assert load_arm("return-hard", {"lam_fix": ""}).fingerprint == FINGERPRINTS["return-hard"]
    assert (
        load_arm("return-hard-fbjw", {"backoff_task": "1"}).fingerprint
        == FINGERPRINTS["return-hard-fbjw"]
    )


def test_each_flag_is_declared_once_on_arm_with_its_type_help_and_choices():
    import dataclasses

    from ccpo_cli.arms import FLAG_NAMES, FLAG_SPECS, Arm

    declared = [field.name for field in dataclasses.fields(Arm) if field.metadata.get("flag")]
    assert list(FLAG_NAMES) == declared and len(declared) == 30
    specs = {spec.name: spec for spec in FLAG_SPECS}
    assert all(spec.help for spec in FLAG_SPECS)
    assert (specs["lk_fix"].kind, specs["lk_fix"].optional) == (float, True)
    assert specs["backoff_task"].kind is bool
    assert specs["gate"].choices == ("hard", "global") and specs["whiten"].kind is int
    arm = load_arm("return-hard-fbjw")
    assert arm.lk_fix is None and arm.backoff_task is True and isinstance(arm.rho, float)
