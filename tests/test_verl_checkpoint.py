"""ccpo's side of a verl checkpoint, without verl: recognising global_step folders, refusing
malformed ones (exit 3), running "the merger" and recording provenance, verifying merged weights.

verl-agent's real merger on a checkpoint written by verl's own checkpoint manager is exercised in
tests/verl_integration/test_checkpoint_merge.py. Here the merger is a stand-in script with the
same command line (it copies a prepared model folder), so that ccpo's orchestration -- command,
failure reporting, atomic rename, reuse, the record -- is tested in the main environment.
(Over 400 lines on purpose: one concern, sharing the stand-in merger and checkpoint fixtures.)
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import textwrap
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_tiny_lm import save_tiny_lm
from typer.testing import CliRunner

from ccpo_cli.agents.hf import HFAgent
from ccpo_cli.backends.verl.checkpoint import (
    DEFAULT_MERGED_NAME,
    MERGE_RECORD,
    find_verl_checkpoint,
    resolve_model_source,
)
from ccpo_cli.backends.verl.checkpoint_verify import verify_merged_model
from ccpo_cli.cli.app import app
from ccpo_cli.errors import CcpoError, InvalidInput

STAND_IN_MERGER = textwrap.dedent('''
    """Stand-in for verl's scripts/model_merger.py: same command line, copies a prepared model."""
    import argparse, json, os, shutil, sys
    parser = argparse.ArgumentParser()
    merge = parser.add_subparsers(dest="operation", required=True).add_parser("merge")
    for option in ("--backend", "--local_dir", "--target_dir", "--hf_model_path"):
        merge.add_argument(option)
    args = parser.parse_args()
    with open(os.environ["STAND_IN_CALLS"], "a") as calls:
        calls.write(json.dumps(sys.argv[1:]) + "\\n")
    if os.environ.get("STAND_IN_FAIL"):
        print("Loading 2 FSDP shards")
        raise RuntimeError(os.environ["STAND_IN_FAIL"])
    shutil.copytree(os.environ["STAND_IN_MODEL"], args.target_dir, dirs_exist_ok=True)
''')


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return save_tiny_lm(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def stand_in_home(tmp_path, tiny_model, monkeypatch) -> Path:
    home = tmp_path / "verl-agent"
    (home / "verl" / "version").mkdir(parents=True)
    (home / "verl" / "__init__.py").write_text("")
    (home / "verl" / "version" / "version").write_text("0.3.1.dev\n")
    (home / "scripts").mkdir()
    (home / "scripts" / "model_merger.py").write_text(STAND_IN_MERGER)
    monkeypatch.setenv("VERL_AGENT_HOME", str(home))
    monkeypatch.delenv("CCPO_VERL_PYTHON", raising=False)
    monkeypatch.setenv("STAND_IN_MODEL", str(tiny_model))
    monkeypatch.setenv("STAND_IN_CALLS", str(tmp_path / "merger-calls.jsonl"))
    return home


def merger_calls(tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "merger-calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def step_folder(
    root: Path,
    *,
    step: int = 115,
    world_size: int = 2,
    ranks=None,
    layout: str = "actor",
    architecture: str = "Qwen2ForCausalLM",
) -> Path:
    """A global_step folder as verl's FSDPCheckpointManager lays it out (shard bytes are opaque here)."""
    folder = root / "run" / "checkpoints" / f"global_step_{step}"
    actor = folder / "actor"
    actor.mkdir(parents=True)
    for rank in range(world_size) if ranks is None else ranks:
        (actor / f"model_world_size_{world_size}_rank_{rank}.pt").write_bytes(
            b"shard %d of step %d" % (rank, step)
        )
        (actor / f"optim_world_size_{world_size}_rank_{rank}.pt").write_bytes(b"optimizer")
    config_dir = actor / "huggingface" if layout == "huggingface" else actor
    config_dir.mkdir(exist_ok=True)
    (config_dir / "config.json").write_text(
        json.dumps({"architectures": [architecture], "model_type": "qwen2"})
    )
    (root / "run" / "config.json").write_text(json.dumps({"run": "verl-run", "backend": "verl"}))
    return folder


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    from ccpo_cli.envs import generate_games

    folder = tmp_path_factory.mktemp("ckpt-games")
    generate_games(folder, "heldout", 2, seed=5)
    return folder


def eval_cli(tmp_path: Path, games: Path, model: Path, *extra: str):
    return CliRunner().invoke(
        app,
        [
            "--db",
            str(tmp_path / "runs.db"),
            "--quiet",
            "eval",
            "--run",
            "ckpt",
            "--agent",
            "hf",
            "--model",
            str(model),
            "--games",
            str(games),
            "--workers",
            "0",
            "--max-steps",
            "1",
            "--max-new-tokens",
            "2",
            *extra,
        ],
    )


# --- recognising a checkpoint ----------------------------------------------------------


@pytest.mark.parametrize("layout", ["actor", "huggingface"])
def test_a_global_step_folder_is_found_with_step_shards_and_config(tmp_path, layout):
    folder = step_folder(tmp_path, layout=layout)
    found = find_verl_checkpoint(folder)
    assert found.step == 115 and found.world_size == 2
    assert [path.name for path in found.shards] == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    assert (
        found.config_dir
        == (folder / "actor" / ("huggingface" if layout == "huggingface" else "")).resolve()
    )
    assert (
        find_verl_checkpoint(folder / "actor") == found
    )  # the actor folder names the same checkpoint


def test_a_model_folder_or_a_hub_id_is_left_alone(tiny_model):
    assert find_verl_checkpoint(tiny_model) is None
    assert resolve_model_source(str(tiny_model)) == (str(tiny_model), None)
    assert resolve_model_source("Qwen/Qwen2.5-1.5B-Instruct") == (
        "Qwen/Qwen2.5-1.5B-Instruct",
        None,
    )
    with pytest.raises(InvalidInput, match="--merged-dir applies to a verl checkpoint"):
        resolve_model_source(str(tiny_model), merged_dir="/tmp/x")


def _no_actor(root: Path) -> Path:
    folder = root / "global_step_40"
    folder.mkdir()
    return folder


def _no_shards(root: Path) -> Path:
    folder = step_folder(root)
    for shard in (folder / "actor").glob("model_*.pt"):
        shard.unlink()
    return folder


def _checkpoint_root(root: Path) -> Path:
    step_folder(root, step=20)
    step_folder(root, step=40)
    (root / "run" / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("40")
    return root / "run" / "checkpoints"


def _empty_shard(root: Path) -> Path:
    folder = step_folder(root)
    (folder / "actor" / "model_world_size_2_rank_1.pt").write_bytes(b"")
    return folder


def _no_config(root: Path) -> Path:
    folder = step_folder(root)
    (folder / "actor" / "config.json").unlink()
    return folder


def _mixed_world_sizes(root: Path) -> Path:
    folder = step_folder(root)
    (folder / "actor" / "model_world_size_4_rank_0.pt").write_bytes(b"older save")
    return folder


def _fsdp_config_disagrees(root: Path) -> Path:
    folder = step_folder(root)
    (folder / "actor" / "fsdp_config.json").write_text('{"FSDP_version": 1, "world_size": 8}')
    return folder


MALFORMED = {
    "no actor folder": (_no_actor, "without an actor/ folder"),
    "no shards": (_no_shards, "no model shards"),
    "missing rank": (
        lambda root: step_folder(root, world_size=4, ranks=[0, 1, 3]),
        "no model shard for rank(s) 2",
    ),
    "mixed world sizes": (_mixed_world_sizes, "several world sizes (2, 4)"),
    "empty shard": (_empty_shard, "empty model shard(s): model_world_size_2_rank_1.pt"),
    "no config": (_no_config, "no config.json in actor/huggingface/ or actor/"),
    "fsdp_config disagrees": (
        _fsdp_config_disagrees,
        "world_size 8, but the shards are for world size 2",
    ),
    "a folder of checkpoints": (_checkpoint_root, "checkpoints/global_step_40)"),
    "not a causal LM": (
        lambda root: step_folder(root, architecture="Qwen2ForTokenClassification"),
        "not a causal language model",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_checkpoint_is_one_line_exit_3_and_nothing_is_written(
    tmp_path, stand_in_home, games, case
):
    make, message = MALFORMED[case]
    root = tmp_path / "checkpoints-here"
    root.mkdir()
    folder = make(root)
    before = sorted(path for path in root.rglob("*"))
    result = eval_cli(tmp_path, games, folder)
    assert result.exit_code == 3, result.output
    assert message in result.output and str(folder) in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    assert sorted(path for path in root.rglob("*")) == before
    assert merger_calls(tmp_path) == []


def test_no_verl_agent_checkout_is_exit_1_with_how_to_get_one(tmp_path, monkeypatch, games):
    monkeypatch.delenv("VERL_AGENT_HOME", raising=False)
    folder = step_folder(tmp_path)
    result = eval_cli(tmp_path, games, folder)
    assert result.exit_code == 1
    assert "--verl-agent-home" in result.output and "VERL_AGENT_HOME" in result.output
    assert "Traceback" not in result.output
    assert not (folder / DEFAULT_MERGED_NAME).exists()


def test_a_verl_agent_home_that_is_not_a_checkout_is_exit_3(tmp_path, monkeypatch, games):
    monkeypatch.delenv("VERL_AGENT_HOME", raising=False)
    folder = step_folder(tmp_path)
    result = eval_cli(tmp_path, games, folder, "--verl-agent-home", str(tmp_path))
    assert result.exit_code == 3
    assert f"verl-agent home {tmp_path.resolve()}: not a verl-agent checkout" in result.output


def test_a_failing_merger_is_exit_1_with_its_error_and_leaves_no_folder(
    tmp_path, stand_in_home, monkeypatch, games
):
    monkeypatch.setenv("STAND_IN_FAIL", "shard 1 is truncated")
    folder = step_folder(tmp_path)
    result = eval_cli(tmp_path, games, folder)
    assert result.exit_code == 1
    assert (
        "verl's model merger failed (exit 1): RuntimeError: shard 1 is truncated" in result.output
    )
    assert "Traceback" not in result.output
    assert sorted(path.name for path in folder.iterdir()) == [
        f".{DEFAULT_MERGED_NAME}.merge.log",
        "actor",
    ]
    assert (
        "Traceback" in (folder / f".{DEFAULT_MERGED_NAME}.merge.log").read_text()
    )  # kept for the user


# --- merging, reuse and the record -------------------------------------------------------


@pytest.mark.slow
def test_the_merge_is_verified_recorded_and_reused(tmp_path, stand_in_home):
    folder = step_folder(tmp_path)
    model, merged = resolve_model_source(str(folder))
    assert model == str(folder / DEFAULT_MERGED_NAME) and not merged.reused
    [call] = merger_calls(tmp_path)
    assert call[:5] == ["merge", "--backend", "fsdp", "--local_dir", str(folder / "actor")]
    assert "--hf_model_path" not in call  # the config is in actor/, where the merger looks
    record = json.loads((folder / DEFAULT_MERGED_NAME / MERGE_RECORD).read_text())
    assert record["run"] == "verl-run" and record["step"] == 115
    assert record["source"]["checkpoint"] == str(folder) and record["source"]["world_size"] == 2
    assert [shard["sha256"] for shard in record["source"]["shards"]] == [
        hashlib.sha256(
            (folder / "actor" / f"model_world_size_2_rank_{rank}.pt").read_bytes()
        ).hexdigest()
        for rank in (0, 1)
    ]
    assert record["verl_agent"]["verl_version"] == "0.3.1.dev"
    assert record["verl_agent"]["commit"].startswith("not recorded")
    assert record["verification"]["passed"] and record["verification"]["forward"]["finite"]
    assert record["verification"]["tied"] == [["model.embed_tokens.weight", "lm_head.weight"]]
    assert not list(folder.glob(".*partial*"))

    again, second = resolve_model_source(str(folder))
    assert again == model and second.reused and len(merger_calls(tmp_path)) == 1

    shard = folder / "actor" / "model_world_size_2_rank_1.pt"
    shard.write_bytes(b"a later save of the same step")
    _, third = resolve_model_source(str(folder))
    assert not third.reused and len(merger_calls(tmp_path)) == 2
    assert (
        third.record["source"]["shards"][1]["sha256"]
        == hashlib.sha256(shard.read_bytes()).hexdigest()
    )


def test_the_record_reads_the_commit_as_the_launcher_does_from_source_md(tmp_path, stand_in_home):
    """A source snapshot without .git names its commit in SOURCE.md; the merge record carries it
    (and the summary eval and publish print), read by the same reader as the launch's config.json."""
    (stand_in_home / "SOURCE.md").write_text("verl-agent source at commit `20bd331`, no history.\n")
    _, merged = resolve_model_source(str(step_folder(tmp_path)))
    assert merged.record["verl_agent"]["commit"] == "20bd331"
    assert merged.record["verl_agent"]["commit_source"] == "SOURCE.md"
    assert merged.summary()["verl_agent_commit"] == "20bd331"


def test_config_in_actor_huggingface_is_handed_to_the_merger(tmp_path, stand_in_home):
    folder = step_folder(tmp_path, layout="huggingface")
    target = tmp_path / "merged-elsewhere"
    model, merged = resolve_model_source(str(folder), merged_dir=target)
    assert model == str(target.resolve()) and not (folder / DEFAULT_MERGED_NAME).exists()
    [call] = merger_calls(tmp_path)
    assert call[-2:] == ["--hf_model_path", str(folder / "actor" / "huggingface")]


def test_a_moved_run_folder_is_merged_again_in_place(tmp_path, stand_in_home):
    folder = step_folder(tmp_path)
    resolve_model_source(str(folder))
    moved = tmp_path / "moved"
    (tmp_path / "run").rename(moved)
    new_folder = moved / "checkpoints" / folder.name
    model, merged = resolve_model_source(str(new_folder))
    assert not merged.reused and len(merger_calls(tmp_path)) == 2
    assert merged.record["source"]["checkpoint"] == str(new_folder.resolve())


def test_a_merged_dir_holding_something_else_is_refused(tmp_path, stand_in_home):
    folder = step_folder(tmp_path)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInput, match="holds something other than a ccpo merge"):
        resolve_model_source(str(folder), merged_dir=occupied)
    assert (occupied / "notes.txt").read_text() == "mine" and merger_calls(tmp_path) == []


# --- verification ------------------------------------------------------------------------


def _rewrite_weights(folder: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda t: t.pop("model.norm.weight"), "missing model.norm.weight"),
        (
            lambda t: t.update(
                {"model.layers.9.mlp.up_proj.weight": t["model.norm.weight"].clone()}
            ),
            "unexpected model.layers.9.mlp.up_proj.weight",
        ),
        (
            lambda t: t.update({"model.norm.weight": t["model.norm.weight"][:-1].clone()}),
            "shape differs: model.norm.weight",
        ),
        (
            lambda t: t["model.layers.0.self_attn.q_proj.weight"].fill_(float("nan")),
            "non-finite logits",
        ),
    ],
)
def test_verification_catches_weights_that_do_not_fit_the_config(
    tmp_path, tiny_model, change, message
):
    import shutil

    folder = tmp_path / "merged"
    shutil.copytree(tiny_model, folder)
    assert verify_merged_model(folder)["passed"]
    _rewrite_weights(folder, change)
    with pytest.raises(CcpoError, match=message) as caught:
        verify_merged_model(folder)
    assert caught.value.exit_code == 1 and str(folder) in str(caught.value)


# --- eval and publish on a checkpoint ----------------------------------------------------


@pytest.mark.slow
def test_eval_records_a_checkpoint_at_its_own_step(tmp_path, stand_in_home, games):
    folder = step_folder(tmp_path)
    result = eval_cli(tmp_path, games, folder, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["step"] == 115 and document["model"] == str(folder)
    assert document["checkpoint"]["merged_folder"] == str(folder / DEFAULT_MERGED_NAME)
    assert document["checkpoint"]["run"] == "verl-run" and document["checkpoint"]["step"] == 115
    with sqlite3.connect(tmp_path / "runs.db") as connection:
        assert connection.execute("SELECT DISTINCT step FROM evaluations").fetchall() == [(115,)]
    contradicting = eval_cli(tmp_path, games, folder, "--step", "7")
    assert contradicting.exit_code == 3 and "is from step 115" in contradicting.output
    assert len(merger_calls(tmp_path)) == 1  # the contradiction was refused before any merge


def test_a_contradicting_step_is_refused_before_merging(tmp_path, stand_in_home, games):
    folder = step_folder(tmp_path)
    result = eval_cli(tmp_path, games, folder, "--step", "7")
    assert result.exit_code == 3 and "is from step 115" in result.output
    assert merger_calls(tmp_path) == [] and not (folder / DEFAULT_MERGED_NAME).exists()


def test_the_agents_name_an_unmerged_checkpoint(tmp_path):
    folder = step_folder(tmp_path)
    with pytest.raises(InvalidInput, match="a verl checkpoint, not a model folder"):
        HFAgent(str(folder))


@pytest.mark.slow
def test_publish_dry_run_plans_the_merged_folder_with_its_record(tmp_path, stand_in_home):
    db = tmp_path / "runs.db"
    seed_card_db(db, arms=1)
    folder = step_folder(tmp_path, step=115)
    args = [
        "--db",
        str(db),
        "publish",
        "--run",
        "return-hard",
        "--repo",
        "tester/ckpt",
        "--dry-run",
        "--staging",
        str(tmp_path / "staging"),
        "--checkpoint",
        str(folder),
        "--json",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    checkpoint_commit = plan["commits"][0]
    assert checkpoint_commit["purpose"] == "checkpoint"
    files = {entry["path_in_repo"] for entry in checkpoint_commit["files"]}
    assert {"model.safetensors", "config.json", MERGE_RECORD} <= files
    assert not any(name.startswith(".") for name in files)
    assert plan["checkpoint_step"] == 115 and plan["checkpoint_source"]["step"] == 115
    assert plan["checkpoint_source"]["source"] == str(folder)
    contradicting = CliRunner().invoke(app, args + ["--checkpoint-step", "90"])
    assert contradicting.exit_code == 3 and "is the checkpoint of step 115" in contradicting.output


def test_publish_of_a_malformed_checkpoint_is_exit_3(tmp_path, stand_in_home):
    db = tmp_path / "runs.db"
    seed_card_db(db, arms=1)
    folder = step_folder(tmp_path, world_size=2, ranks=[1])
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(db),
            "publish",
            "--run",
            "return-hard",
            "--repo",
            "tester/ckpt",
            "--dry-run",
            "--staging",
            str(tmp_path / "staging"),
            "--checkpoint",
            str(folder),
        ],
    )
    assert result.exit_code == 3 and "no model shard for rank(s) 0" in result.output
    assert not (tmp_path / "staging").exists() and os.listdir(folder) == ["actor"]


def test_vllm_takes_the_merged_folder_and_other_agents_take_model_as_given(tmp_path, stand_in_home):
    from ccpo_cli.evaluation import EvalOptions, resolve_eval_model

    folder = step_folder(tmp_path)
    model, merged, step = resolve_eval_model(EvalOptions(run="r", agent="vllm", model=str(folder)))
    assert model == str(folder / DEFAULT_MERGED_NAME) and merged.checkpoint.step == step == 115
    assert resolve_eval_model(EvalOptions(run="r", agent="local", model=str(folder))) == (
        str(folder),
        None,
        0,
    )


@pytest.mark.slow
def test_publish_pushes_the_merged_folder_with_its_record_to_the_hub(
    tmp_path, stand_in_home, hub_env, loopback_only
):
    from fakehub import FakeHub

    from ccpo_cli import store

    db = tmp_path / "runs.db"
    seed_card_db(db, arms=1)
    folder = step_folder(tmp_path)
    token = "hf_fake_token_for_checkpoint_tests"
    with FakeHub(token=token) as hub:
        result = CliRunner().invoke(
            app,
            [
                "--db",
                str(db),
                "publish",
                "--run",
                "return-hard",
                "--repo",
                "tester/ckpt",
                "--endpoint",
                hub.endpoint,
                "--token",
                token,
                "--staging",
                str(tmp_path / "staging"),
                "--checkpoint",
                str(folder),
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        checkpoint_commit = hub.commits_by_ccpo("tester/ckpt")[0]
    assert {"model.safetensors", "config.json", MERGE_RECORD} <= set(checkpoint_commit["files"])
    assert not any(name.startswith(".") for name in checkpoint_commit["files"])
    document = json.loads(result.stdout)
    assert (
        document["checkpoint_source"]["step"] == 115
        and document["checkpoint"]["verified_files"] >= 3
    )
    [publication] = store.run_publications(store.open_db(db), "return-hard")
    assert publication["checkpoint_step"] == 115
    assert loopback_only == []
