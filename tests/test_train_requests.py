"""`ccpo train` hands each backend one typed request; the dry runs show what it carries."""

from __future__ import annotations

import dataclasses
import json

from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.local.config import TrainConfig
from ccpo_cli.backends.local.request import LocalTrainRequest, train_local
from ccpo_cli.backends.verl.request import VerlTrainRequest
from ccpo_cli.cli.app import app


def test_local_dry_run_json_with_resume_is_one_document(tmp_path):
    # --resume is a path; the JSON document used to fail on it (Path is not JSON).
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--seed",
            "1",
            "--run",
            "a",
            "--steps",
            "3",
            "--resume",
            str(tmp_path),
            "--dry-run",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert [(r["run"], r["seed"], r["options"], r["resume"]) for r in runs] == [
        ("a", 1, {"steps": 3}, str(tmp_path))
    ]
    assert (
        runs[0]["config"]["steps"] == 3 and runs[0]["config"]["seed"] == 1
    )  # the TrainConfig it would train
    assert not (tmp_path / "runs.db").exists()  # a dry run opens no database
    # One folder continues one run: several seeds cannot resume it.
    several = CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "train",
            "--arm",
            "grpo",
            "--backend",
            "local",
            "--seeds",
            "0,1",
            "--resume",
            str(tmp_path),
            "--dry-run",
        ],
    )
    assert several.exit_code == 2 and "--resume continues one run" in several.stderr


def test_requests_are_typed_and_carry_the_arm(tmp_path):
    arm = load_arm("return-hard", {"edge_w": "0"})
    local = LocalTrainRequest(
        arm=arm, seeds=(4,), db_path=tmp_path / "runs.db", dry_run=True, workers=0
    )
    assert [field.name for field in dataclasses.fields(local)][:3] == ["arm", "seeds", "db_path"]
    (planned,) = train_local(local, log=print)
    assert planned.pop("config") == TrainConfig(seed=4, workers=0).as_dict()
    assert planned == {
        "run": "return-hard-seed4",
        "backend": "local",
        "arm": "return-hard",
        "fingerprint": arm.fingerprint,
        "seed": 4,
        "options": {"workers": 0},
        "resume": None,
    }
    assert local.train_config(4) == TrainConfig(seed=4, workers=0)
    verl = VerlTrainRequest(
        arm=arm, seeds=(0, 1), db_path=tmp_path / "runs.db", model="m", gpus=2, run="x"
    )
    launch_request = verl.launch_request(1)
    # The arm travels typed, overrides inside it: never a name with a side dictionary of flags.
    assert (launch_request.run, launch_request.seed, launch_request.arm) == ("x-seed1", 1, arm)
    assert dict(launch_request.arm.overrides) == {"edge_w": 0.0}
    assert launch_request.runs_root == (tmp_path / "ccpo-runs").resolve()
