"""One verl run folder records one identity, whichever command followed it into runs.db.

`ccpo train --backend verl` (while it trains) and `ccpo publish --follow` (from afar) both call
`backends/verl/follow.follow_run_folder`, which rebuilds the typed arm from the folder's launch
record. Before, `publish --follow` recorded the arm as a bare name and fingerprint: overrides {}
and rho "not recorded" or the arm file's, where `train --backend verl` recorded rho 0.59.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ccpo_cli.arms import load_arm
from ccpo_cli.backends.verl.follow import follow_run_folder, ingest_metrics
from ccpo_cli.backends.verl.launcher import VerlLaunchRequest, build_launch
from ccpo_cli.backends.verl.run_folder import prepare_run_folder
from ccpo_cli.errors import InvalidInput
from ccpo_cli.publishing.follow import ingest_verl
from ccpo_cli.store import open_db
from ccpo_cli.store.identity import read_identities

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _launched_folder(tmp_path: Path):
    arm = load_arm("gigpo", {"rho": 0.59})
    launch = build_launch(
        VerlLaunchRequest(arm=arm, model=MODEL, gpus=8, seed=3, runs_root=tmp_path / "runs")
    )
    prepare_run_folder(launch)
    with launch.metrics_path.open("w") as sink:
        for step, rate in ((10, 0.40), (20, 0.55), (30, 0.61)):
            sink.write(
                json.dumps({"step": step, "wall_time": 1.7e9 + step, "val/success_rate": rate})
                + "\n"
            )
    return launch, arm


def test_one_folder_followed_both_ways_records_the_same_identity_rho_included(tmp_path):
    launch, arm = _launched_folder(tmp_path)
    by_train = open_db(tmp_path / "train.db")
    ingest_metrics(by_train, launch)  # what `ccpo train --backend verl` does while the run trains
    by_publish = open_db(tmp_path / "publish.db")
    ingest_verl(
        by_publish, launch.run, launch.run_dir, log=lambda message: None
    )  # `ccpo publish --follow`
    from ccpo_cli.store import get_run

    identities = [
        read_identities(db, [get_run(db, launch.run)])[launch.run] for db in (by_train, by_publish)
    ]
    trained, published = identities
    assert published.arm.fingerprint == trained.arm.fingerprint == arm.fingerprint
    assert dict(published.arm.overrides) == dict(trained.arm.overrides)
    assert set(published.arm.overrides) == {"rho"}
    assert published.arm.flags["rho"] == trained.arm.flags["rho"] == 0.59
    assert (
        published.seed == trained.seed == 3 and published.base_model == trained.base_model == MODEL
    )
    assert published.unit == trained.unit


def test_a_launch_record_whose_arm_does_not_rebuild_its_fingerprint_is_refused(tmp_path):
    launch, _ = _launched_folder(tmp_path)
    record_path = launch.run_dir / "config.json"
    record = json.loads(record_path.read_text())
    record["arm"]["fingerprint"] = "0" * 64
    record_path.write_text(json.dumps(record))
    with pytest.raises(InvalidInput, match="fingerprint"):
        follow_run_folder(open_db(tmp_path / "runs.db"), launch.run, launch.run_dir)
