"""A real verl checkpoint to a verified model: verl's FSDPCheckpointManager writes the shards of a
tiny Qwen2 on CPU (two gloo ranks, so the shards really are halves), verl-agent's own model
merger merges them, ccpo verifies and records the result, and eval and publish use it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_tiny_lm import save_tiny_lm
from typer.testing import CliRunner

from ccpo_cli.backends.verl.checkout import TESTED_COMMIT
from ccpo_cli.backends.verl.checkpoint import (
    DEFAULT_MERGED_NAME,
    MERGE_RECORD,
    resolve_model_source,
    verl_agent_record,
)
from ccpo_cli.cli.app import app

WRITER = Path(__file__).with_name("write_verl_checkpoint.py")
STEP = 115
WORLD_SIZE = 2


def write_checkpoint(model_dir: Path, run_dir: Path, verl_home: Path) -> Path:
    step_dir = run_dir / "checkpoints" / f"global_step_{STEP}"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(verl_home), os.environ.get("PYTHONPATH")])),
    )
    done = subprocess.run(
        [sys.executable, str(WRITER), str(model_dir), str(step_dir), str(WORLD_SIZE), str(STEP)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # what the ccpo launcher writes beside trainer.default_local_dir=RUN/checkpoints
    (run_dir / "config.json").write_text(json.dumps({"run": "tiny-verl", "backend": "verl"}))
    return step_dir


@pytest.fixture(scope="module")
def trained(tmp_path_factory, verl_home):
    """(the Hugging Face model the actor started from, the verl checkpoint of it)."""
    root = tmp_path_factory.mktemp("verl-ckpt")
    model_dir = save_tiny_lm(root / "base")
    return model_dir, write_checkpoint(model_dir, root / "run", verl_home)


@pytest.fixture
def fresh_copy(trained, tmp_path):
    """A private copy of the checkpoint's run folder, for tests that change or merge it."""
    _, step_dir = trained
    run_copy = tmp_path / "run"
    shutil.copytree(step_dir.parent.parent, run_copy)
    shutil.rmtree(
        run_copy / "checkpoints" / step_dir.name / DEFAULT_MERGED_NAME, ignore_errors=True
    )
    return run_copy / "checkpoints" / step_dir.name


def test_the_checkpoint_is_laid_out_as_verl_saves_it(trained):
    _, step_dir = trained
    names = sorted(path.name for path in (step_dir / "actor").iterdir())
    for rank in range(WORLD_SIZE):
        for kind in ("model", "optim", "extra_state"):
            assert f"{kind}_world_size_{WORLD_SIZE}_rank_{rank}.pt" in names
    assert "config.json" in names and "tokenizer_config.json" in names


def test_verls_merger_rebuilds_the_weights_and_the_merge_is_verified_and_recorded(
    trained, verl_home
):
    from safetensors.torch import load_file

    model_dir, step_dir = trained
    model, merged = resolve_model_source(str(step_dir))
    assert model == str(step_dir / DEFAULT_MERGED_NAME) and not merged.reused

    original = load_file(str(model_dir / "model.safetensors"))
    rebuilt = load_file(str(Path(model) / "model.safetensors"))
    original.setdefault("lm_head.weight", original["model.embed_tokens.weight"])  # tied
    assert set(rebuilt) <= set(original) and "model.embed_tokens.weight" in rebuilt
    for name, tensor in rebuilt.items():  # verl's merger writes bfloat16
        assert tensor.dtype == original[name].bfloat16().dtype and tensor.equal(
            original[name].bfloat16()
        ), name

    record = json.loads((Path(model) / MERGE_RECORD).read_text())
    assert record["run"] == "tiny-verl" and record["step"] == STEP
    assert (
        record["source"]["checkpoint"] == str(step_dir)
        and record["source"]["world_size"] == WORLD_SIZE
    )
    assert [shard["sha256"] for shard in record["source"]["shards"]] == [
        hashlib.sha256(
            (step_dir / "actor" / f"model_world_size_{WORLD_SIZE}_rank_{rank}.pt").read_bytes()
        ).hexdigest()
        for rank in range(WORLD_SIZE)
    ]
    assert record["merger"]["command"][1:8] == [
        str(verl_home / "scripts" / "model_merger.py"),
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(step_dir / "actor"),
        "--target_dir",
    ]
    assert (
        record["verl_agent"]["verl_version"]
        == (verl_home / "verl" / "version" / "version").read_text().strip()
    )
    assert record["verl_agent"]["commit"].startswith(TESTED_COMMIT)
    verification = record["verification"]
    assert verification["passed"] and verification["architecture"] == "Qwen2ForCausalLM"
    assert verification["dtypes"] == ["BF16"] and verification["forward"]["finite"]
    assert verification["forward"]["dtype"] == "bfloat16"  # checked as stored, not upcast
    assert verification["parameters"] == sum(
        t.numel() for n, t in original.items() if n != "lm_head.weight"
    )

    again, second = resolve_model_source(str(step_dir))
    assert again == model and second.reused


def test_the_record_names_the_tested_verl_agent_commit(verl_home):
    """What the merge record says of the checkout the suite runs against (20bd331, read from git
    or from its SOURCE.md)."""
    assert (
        verl_agent_record(verl_home)["commit"].startswith(TESTED_COMMIT)
        and TESTED_COMMIT == "20bd331"
    )


def test_the_hf_agent_on_the_checkpoint_generates_as_the_saved_weights_do(trained):
    """eval's own path: the model is resolved (merged), then the hf agent loads it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ccpo_cli.agents.hf import HFAgent
    from ccpo_cli.evaluation import EvalOptions, build_agent, resolve_eval_model

    model_dir, step_dir = trained
    model, merged, step = resolve_eval_model(EvalOptions(run="r", agent="hf", model=str(step_dir)))
    assert merged.checkpoint.step == step == STEP
    prompts = ["You are in the middle of a room.", "go to fridge 1"]
    from_checkpoint = build_agent("hf", model, temperature=0.0, seed=0, max_new_tokens=6).generate(
        prompts
    )

    reference = AutoModelForCausalLM.from_pretrained(str(model_dir))
    with torch.no_grad():
        for parameter in reference.parameters():  # what the merged bfloat16 weights hold
            parameter.copy_(parameter.bfloat16().float())
    expected = HFAgent(
        reference, AutoTokenizer.from_pretrained(str(model_dir)), temperature=0.0, max_new_tokens=6
    ).generate(prompts)
    assert from_checkpoint == expected and all(isinstance(text, str) for text in expected)


def test_publish_dry_run_plans_the_merged_folder_and_its_record(fresh_copy, tmp_path):
    db = tmp_path / "runs.db"
    seed_card_db(db, arms=1)
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(db),
            "publish",
            "--run",
            "return-hard",
            "--repo",
            "tester/tiny-verl",
            "--dry-run",
            "--staging",
            str(tmp_path / "staging"),
            "--checkpoint",
            str(fresh_copy),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    files = {entry["path_in_repo"]: entry for entry in plan["commits"][0]["files"]}
    merged = fresh_copy / DEFAULT_MERGED_NAME
    assert {"model.safetensors", "config.json", "tokenizer.json", MERGE_RECORD} <= set(files)
    assert (
        files["model.safetensors"]["sha256"]
        == hashlib.sha256((merged / "model.safetensors").read_bytes()).hexdigest()
    )
    assert plan["checkpoint_step"] == STEP and plan["checkpoint_source"]["step"] == STEP
    assert plan["checkpoint_source"]["run"] == "tiny-verl"


def test_config_in_actor_huggingface_merges_too(fresh_copy):
    """Later verl keeps config and tokenizer in actor/huggingface/; the merger is told where."""
    actor = fresh_copy / "actor"
    (actor / "huggingface").mkdir()
    for path in list(actor.iterdir()):
        if path.is_file() and not path.name.endswith(".pt"):
            path.rename(actor / "huggingface" / path.name)
    model, merged = resolve_model_source(str(fresh_copy))
    assert merged.record["source"]["config"] == str(actor / "huggingface")
    assert merged.record["merger"]["command"][-2:] == [
        "--hf_model_path",
        str(actor / "huggingface"),
    ]
    assert merged.record["verification"]["passed"]


def test_a_truncated_shard_fails_verls_merger_with_one_line_and_exit_1(fresh_copy, tmp_path):
    shard = fresh_copy / "actor" / f"model_world_size_{WORLD_SIZE}_rank_1.pt"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    db = tmp_path / "runs.db"
    seed_card_db(db, arms=1)
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(db),
            "publish",
            "--run",
            "return-hard",
            "--repo",
            "tester/tiny-verl",
            "--dry-run",
            "--staging",
            str(tmp_path / "staging"),
            "--checkpoint",
            str(fresh_copy),
        ],
    )
    assert result.exit_code == 1
    assert "verl's model merger failed" in result.output and "Traceback" not in result.output
    assert not (fresh_copy / DEFAULT_MERGED_NAME).exists()
    assert not list(fresh_copy.glob(f".{DEFAULT_MERGED_NAME}.partial-*"))
