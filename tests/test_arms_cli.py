"""`ccpo arms` and `ccpo estimate` through the real Typer app."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from ccpo_cli.batch_io import read_result
from ccpo_cli.cli.app import app

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EX1 = EXAMPLES / "worked-example-1.json"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_arms_list_json():
    result = invoke("arms", "list", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["schema_version"] == 1
    assert [a["arm"] for a in document["arms"]] == [
        "gigpo",
        "global-successor",
        "grpo",
        "return-hard",
        "return-hard-fbjw",
    ]


def test_arms_list_table():
    result = invoke("arms", "list")
    assert result.exit_code == 0 and "return-hard-fbjw" in result.stdout


def test_arms_show_return_hard_json():
    result = invoke("arms", "show", "return-hard", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    flags = document["flags"]
    assert (flags["gate"], flags["target"], flags["rho"]) == ("hard", "return", 0.0)
    for name in (
        "backoff_task",
        "backoff_rho",
        "jweight_c",
        "prior_kappa",
        "lk_fix",
        "lam_fix",
        "phi",
        "ctx_w",
        "whiten",
        "tau",
        "wmode",
        "shrink",
        "std",
        "std_floor",
        "step_norm",
        "edge_w",
        "ep_w",
        "step_advantage_w",
        "adv_mode",
        "gamma",
        "invalid_penalty",
    ):
        assert name in flags
    assert len(document["fingerprint"]) == 64 and document["overrides"] == {}
    assert "λ ≡ 0" in document["inert"]["whiten"]


def test_arms_show_with_set_changes_fingerprint_and_inert():
    plain = json.loads(invoke("arms", "show", "return-hard", "--json").stdout)
    changed = json.loads(invoke("arms", "show", "return-hard", "--set", "rho=0.5", "--json").stdout)
    assert changed["fingerprint"] != plain["fingerprint"]
    assert changed["overrides"] == {"rho": 0.5}
    assert "whiten" not in changed["inert"]


def test_arms_show_table_marks_inert():
    result = invoke("arms", "show", "global-successor")
    assert result.exit_code == 0 and "gate = global" in result.stdout


def test_usage_and_input_errors_exit_codes():
    unknown_flag = invoke("arms", "show", "grpo", "--set", "bogus=1")
    assert unknown_flag.exit_code == 2 and "unknown flag 'bogus'" in unknown_flag.output
    bad_value = invoke("arms", "show", "grpo", "--set", "rho=abc")
    assert bad_value.exit_code == 3 and "Traceback" not in bad_value.output
    assert invoke("arms", "show", "nope").exit_code == 2
    assert (
        invoke("estimate", "--arm", "gigpo", "--input", str(EX1), "--set", "nope=1").exit_code == 2
    )


def test_estimate_gigpo_reproduces_worked_example_1():
    result = invoke("estimate", "--arm", "gigpo", "--input", str(EX1))
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (
        document["arm"] == "gigpo"
        and document["overrides"] == {}
        and len(document["fingerprint"]) == 64
    )
    expected = [2.44569, 1.99810, -1.22285, -1.35260, -1.22285, -0.64550]
    np.testing.assert_allclose(document["per_row"]["final"], expected, atol=1e-5)
    mask = np.array(json.loads(EX1.read_text())["response_mask"])
    np.testing.assert_allclose(
        document["advantages"], np.array(expected)[:, None] * mask, atol=1e-5
    )
    assert {"episode_term", "step_term", "final"} <= set(document["per_row"])


def test_estimate_with_override_records_it(tmp_path):
    out = tmp_path / "out.json"
    result = invoke(
        "estimate",
        "--arm",
        "return-hard",
        "--set",
        "edge_w=0",
        "--input",
        str(EX1),
        "--output",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    document = json.loads(out.read_text())
    assert document["overrides"] == {"edge_w": 0.0}
    np.testing.assert_allclose(
        document["per_row"]["final"],
        [2.32849, 2.38310, -1.16425, -1.73760, -1.16425, -0.64550],
        atol=1e-5,
    )
    assert document["per_row"]["baseline"][5] is None  # dead row: no baseline
    plain = json.loads(invoke("estimate", "--arm", "return-hard", "--input", str(EX1)).stdout)
    assert plain["fingerprint"] != document["fingerprint"]


def test_estimate_npz_in_and_out(tmp_path):
    data = json.loads((EXAMPLES / "worked-example-2.json").read_text())
    arrays = {k: np.array(v) for k, v in data.items()}
    order = np.random.default_rng(0).permutation(len(data["uid"]))
    np.savez(tmp_path / "batch.npz", **{k: v[order] for k, v in arrays.items()})
    result = invoke(
        "estimate",
        "--arm",
        "return-hard-fbjw",
        "--input",
        str(tmp_path / "batch.npz"),
        "--output",
        str(tmp_path / "out.npz"),
    )
    assert result.exit_code == 0, result.output
    document = read_result(tmp_path / "out.npz")
    expected = np.array(
        [
            1.48719,
            2.40952,
            1.10636,
            -2.22014,
            -1.97120,
            -1.93022,
            -1.94222,
            1.95435,
            1.10636,
            -1.18226,
            -1.77534,
            2.20087,
            2.13284,
            -1.37611,
        ]
    )
    np.testing.assert_allclose(
        document["per_row"]["final"], expected[order], atol=1e-5
    )  # rows in input order
    assert document["advantages"].shape == arrays["response_mask"].shape
    assert document["arm"] == "return-hard-fbjw"


def test_estimate_invalid_input_exits_3_with_one_line(tmp_path):
    data = json.loads(EX1.read_text())
    data["step_index"][3] = 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    result = invoke("estimate", "--arm", "gigpo", "--input", str(bad))
    assert result.exit_code == 3
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert (
        len(lines) == 1
        and "key 'step_index', row 3" in lines[0]
        and "Traceback" not in result.output
    )
    del data["phi_feats"]
    data["step_index"][3] = 1
    bad.write_text(json.dumps(data))
    result = invoke("estimate", "--arm", "global-successor", "--input", str(bad))
    assert result.exit_code == 3 and "phi_feats" in result.output
