"""`ccpo matrix --ray-address`: seed blocks as Ray tasks, records returned to the driver, which
alone writes runs.db. On a local Ray instance and on a two-node `ray.cluster_utils.Cluster`, both
listening on 127.0.0.1 only (tests/conftest.py), the matrix records the same window means as
without Ray; a block trained twice changes nothing; without an address Ray is never touched."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from helpers_sync import table_snapshot

from ccpo_cli.errors import UsageError
from ccpo_cli.experiments.matrix import MatrixDesign, _plan, default_recipe, run_matrix
from ccpo_cli.experiments.ray_blocks import connect, run_block_task
from ccpo_cli.store import ensure_run, get_run, list_runs, open_db, run_evaluations
from ccpo_cli.store.sync_export import export_chunks
from ccpo_cli.store.sync_merge import merge_chunks

TINY = dict(
    steps=2, eval_every=1, eval_games=4, tasks=2, group=2, max_steps=6, eval_max_steps=6, workers=0
)
ARMS = ("grpo", "return-hard")


@pytest.fixture(scope="module")
def tiny_design():
    from helpers_local_train import generated_games

    games = {
        "train_games_dir": str(generated_games("train", 6)),
        "eval_games_dir": str(generated_games("heldout", 6)),
    }
    # window_start=1: two evaluations per run, so the window means compared here average two.
    return MatrixDesign(
        ARMS,
        (0, 1),
        30.0,
        recipe=default_recipe(**TINY, **games),
        prefix="r",
        warm_start=0,
        window_start=1,
    )


def window_means(result) -> dict[str, float]:
    return {entry["run"]: entry["window"]["mean"] for entry in result.comparison.as_json()["runs"]}


def evidence(db_path) -> dict[str, list]:
    """Each run's evaluations by name: step, content hash, episodes (ids differ between databases)."""
    db = open_db(db_path)
    return {
        run["name"]: [
            (row["step"], row["content_hash"], row["successes"])
            for row in run_evaluations(db, run["name"])
        ]
        for run in list_runs(db)
    }


@pytest.fixture(scope="module")
def without_ray(tiny_design, tmp_path_factory):
    db_path = tmp_path_factory.mktemp("plain") / "runs.db"
    return db_path, run_matrix(db_path, tiny_design)


def test_connect_never_guesses_a_cluster():
    for address in ("", "  ", "auto"):
        with pytest.raises(UsageError, match="--ray-address"):
            connect(address)


def test_an_address_nothing_answers_on_fails_at_once_in_one_line():
    """`matrix --ray-address 127.0.0.1:1` used to hang in ray.init; now it is exit 4 within
    ray_blocks.CONNECT_TIMEOUT_S (a refused port answers at once), before Ray is asked."""
    from ccpo_cli.errors import RemoteError

    with pytest.raises(RemoteError, match="nothing answers there"):
        connect("127.0.0.1:1")
    with pytest.raises(UsageError, match="HOST:PORT"):
        connect("127.0.0.1:port")


@pytest.mark.slow
def test_without_an_address_the_matrix_never_imports_ray(tiny_design, tmp_path, monkeypatch):
    # A cluster named by the environment, and Ray itself unimportable: neither may matter.
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    monkeypatch.setitem(sys.modules, "ray", None)
    one_seed = MatrixDesign(ARMS, (0,), 30.0, recipe=tiny_design.recipe, prefix="n", warm_start=0)
    result = run_matrix(tmp_path / "runs.db", one_seed)
    assert result.seeds_compared == [0] and result.nodes == {}


@pytest.mark.slow
def test_a_local_ray_instance_records_the_same_window_means(
    tiny_design, without_ray, tmp_path, monkeypatch
):
    plain_db, plain = without_ray
    # `local` starts its own instance: a cluster named in the environment is not attached to.
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:9")
    lines: list[str] = []
    db_path = tmp_path / "runs.db"
    result = run_matrix(db_path, tiny_design, ray_address="local", progress=lines.append)
    assert result.seeds_compared == [0, 1] and result.run_names == plain.run_names
    assert window_means(result) == window_means(plain)
    assert evidence(db_path) == evidence(plain_db)
    for seed in (0, 1):
        hashes = {
            get_run(open_db(db_path), f"r-{arm}-seed{seed}")["step1_rollout_hash"] for arm in ARMS
        }
        assert len(hashes) == 1 and None not in hashes
    assert all(run["status"] == "finished" for run in list_runs(open_db(db_path)))

    # The checkpoint rows came back too, naming the same files as without Ray.
    def checkpoints(path):
        db = open_db(path)
        names = {run["id"]: run["name"] for run in db["runs"].rows}
        return sorted(
            (
                names[row["run_id"]],
                row["step"],
                Path(row["path"]).relative_to(path.parent).as_posix(),
            )
            for row in db["checkpoints"].rows
        )

    assert checkpoints(db_path) == checkpoints(plain_db) != []
    assert sum(result.nodes.values()) == 2 and lines[-1].startswith("runs 4/4 on 1 node ·")
    # The runs' folders are where the matrix without Ray puts them, next to the runs database.
    assert (tmp_path / "ccpo-runs" / "r-grpo-seed0" / "metrics.jsonl").is_file()
    assert result.comparison.isolation["estimator_only"]


@pytest.mark.slow
def test_two_nodes_of_a_cluster_record_the_same_window_means(tiny_design, without_ray, tmp_path):
    from ray.cluster_utils import Cluster

    _, plain = without_ray
    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        assert {node.node_ip_address for node in cluster.list_all_nodes()} == {"127.0.0.1"}
        result = run_matrix(tmp_path / "runs.db", tiny_design, ray_address=cluster.address)
    finally:
        cluster.shutdown()
    # One CPU per node and one per block: the two blocks ran at once, one on each node.
    assert len(result.nodes) == 2 and sorted(result.nodes.values()) == [1, 1]
    assert result.seeds_compared == [0, 1]
    assert window_means(result) == window_means(plain)


@pytest.mark.slow
def test_a_block_trained_twice_changes_nothing(tiny_design, tmp_path):
    """Ray runs a task again when its worker dies; the second attempt may land on a node without
    the first one's files. Its rows, merged after the first attempt's, change nothing."""
    db_path = tmp_path / "runs.db"
    block = _plan(tiny_design, db_path).blocks[0]
    db = open_db(db_path)
    ids = [ensure_run(db, run.name) for run in block.runs()]
    driver_rows = list(export_chunks(db, ids))
    first = run_block_task(block, driver_rows, str(tmp_path / "node-a" / "block.db"))
    merged = merge_chunks(open_db(db_path), first.chunks, where="first attempt")
    assert merged.by_table["evaluations"]["new"] == 2 * len(ARMS)
    before = table_snapshot(db_path), evidence(db_path)
    checkpoints_before = [dict(row) for row in open_db(db_path)["checkpoints"].rows]
    runs_before = {
        run["uid"]: {k: v for k, v in run.items() if k != "updated_at"}
        for run in open_db(db_path)["runs"].rows
    }
    for run in block.runs():
        shutil.rmtree(block.run_dir(run.name))  # the second node has none of the first one's files
    second = run_block_task(block, driver_rows, str(tmp_path / "node-b" / "block.db"))
    again = merge_chunks(open_db(db_path), second.chunks, where="second attempt")
    assert again.total("new") == 0 and again.total("conflict") == 0
    assert again.by_table["evaluations"]["duplicate"] == 2 * len(ARMS)
    # The second attempt wrote its checkpoints again (the files record the wall time): the rows
    # of the first stand.
    assert sum(again.by_table["checkpoints"].values()) == merged.by_table["checkpoints"]["new"] > 0
    assert (table_snapshot(db_path), evidence(db_path)) == before
    assert [dict(row) for row in open_db(db_path)["checkpoints"].rows] == checkpoints_before
    runs_after = {
        run["uid"]: {k: v for k, v in run.items() if k != "updated_at"}
        for run in open_db(db_path)["runs"].rows
    }
    assert runs_after == runs_before


@pytest.mark.slow
def test_a_budget_cut_on_ray_leaves_every_arm_the_same_seeds(tiny_design, tmp_path):
    import os

    # A budget shorter than any block: the first block of each slot starts, no further one does.
    seeds = tuple(range(4))
    short = MatrixDesign(ARMS, seeds, 0.001, recipe=tiny_design.recipe, prefix="cut", warm_start=0)
    result = run_matrix(tmp_path / "runs.db", short, ray_address="local")
    slots = min(
        len(seeds), os.cpu_count() or 1
    )  # a local instance has a CPU per core, a block asks for one
    assert result.seeds_compared == list(seeds[:slots])
    assert result.seeds_not_started == list(seeds[slots:])
    if slots < len(seeds):
        assert result.stopped_reason.startswith(f"stopped before seed {slots}:")
    compared = {
        arm: sorted(
            entry["seed"] for entry in result.comparison.as_json()["runs"] if entry["arm"] == arm
        )
        for arm in ARMS
    }
    assert compared == {arm: list(seeds[:slots]) for arm in ARMS}
    # Nothing of the blocks that did not start was created.
    assert not [
        run
        for run in list_runs(open_db(tmp_path / "runs.db"))
        if run["seed"] is not None and run["seed"] >= slots
    ]
