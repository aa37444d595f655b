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

FINGERPRINTS = {
    "grpo": "b74ec3ee4f75d3e7c82b9e914dcee6c68e300e09984d8f1ebf35929da2d4ecfa",
    "gigpo": "882bd02cb23562a4875dcfad3b71fb0e0bbdcadb8ad5df28d12baf4c6a5f41eb",
    "return-hard": "4b61f962a6c98ddad5479bfed020d351fedbaac16896720b41fd331e3432f444",
    "return-hard-fbjw": "2c0f9f6af00b9135ff485ee50de560d62be7dfb5125e04b06e6f237c6086a812",
    "global-successor": "704130f2667a67d4a318bef1894c08b8425da7376d0bae97f928567cc8a69594",
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
    assert load_arm("return-hard-fbjw", {"backoff_task": "1"}).fingerprint == FINGERPRINTS["return-hard-fbjw"]


def test_each_flag_is_declared_once_on_arm_with_its_type_help_and_choices():
    import dataclasses

    from ccpo_cli.arms import FLAG_NAMES, FLAG_SPECS, Arm

    declared = [field.name for field in dataclasses.fields(Arm) if field.metadata.get("flag")]
    assert list(FLAG_NAMES) == declared and len(declared) == 27
    specs = {spec.name: spec for spec in FLAG_SPECS}
    assert all(spec.help for spec in FLAG_SPECS)
    assert (specs["lk_fix"].kind, specs["lk_fix"].optional) == (float, True)
    assert specs["backoff_task"].kind is bool
    assert specs["gate"].choices == ("hard", "global") and specs["whiten"].kind is int
    arm = load_arm("return-hard-fbjw")
    assert arm.lk_fix is None and arm.backoff_task is True and isinstance(arm.rho, float)
