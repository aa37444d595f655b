"""General rules behind issue 29's real logs, each on a minimal synthetic case: a model loaded
from the Hugging Face cache is the Hub model it holds, and a card's line of differences never
prints a path on the author's disk."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from ccpo_cli.cards.lint import LOCAL_PATH
from ccpo_cli.cli.app import app
from ccpo_cli.report.isolation import shown_differences
from ccpo_cli.store import open_db
from ccpo_cli.store.facts import hub_model_id

runner = CliRunner()
CACHED = "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-1.5B-Instruct/snapshots/989aa7980e4cf806f80c7fef2b1adb7bc71aa306"


def test_a_model_in_the_hub_cache_is_the_hub_model_and_a_local_folder_stays_as_printed():
    assert hub_model_id(CACHED) == "Qwen/Qwen2.5-1.5B-Instruct"
    assert hub_model_id(CACHED + "/") == "Qwen/Qwen2.5-1.5B-Instruct"
    assert (
        hub_model_id("/data/models--local/snapshots/x") == "/data/models--local/snapshots/x"
    )  # no org: not a Hub id
    assert hub_model_id("/srv/sft/merged_model") == "/srv/sft/merged_model"
    assert hub_model_id("Qwen/Qwen2.5-7B-Instruct") == "Qwen/Qwen2.5-7B-Instruct"


def test_an_ingested_log_printing_a_cached_model_path_records_the_hub_model(tmp_path):
    log = tmp_path / "worker.log"
    log.write_text(
        f"(TaskRunner pid=7) {{'actor_rollout_ref': {{'model': {{'path': '{CACHED}'}}}},\n"
        "(TaskRunner pid=7)  'algorithm': {'adv_estimator': 'grpo'},\n"
        "(TaskRunner pid=7)  'env': {'env_name': 'alfworld/AlfredTWEnv', 'seed': 3}}\n"
        "(TaskRunner pid=7) step:0 - val/success_rate:0.250\n"
    )
    result = runner.invoke(
        app, ["--db", str(tmp_path / "r.db"), "ingest", str(log), "--run", "r", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert (
        json.loads(result.stdout)["stated_facts"]["model"] == CACHED
    )  # the fact is what the log printed
    row = next(open_db(tmp_path / "r.db")["runs"].rows_where("name = ?", ["r"]))
    assert row["base_model"] == "Qwen/Qwen2.5-1.5B-Instruct" and row["seed"] == 3


def test_a_difference_between_local_model_folders_is_shown_without_the_path():
    shown = shown_differences(
        [
            "base model: /root/autodl-fs/W/outputs/sft/lora_2k/merged_model vs Qwen/Qwen2.5-1.5B-Instruct",
            "base model: ~/models/a/b vs /home/me/c/d",
        ]
    )
    assert LOCAL_PATH.search(shown) is None
    assert (
        "lora_2k/merged_model vs Qwen/Qwen2.5-1.5B-Instruct" in shown
        and "a/b vs a local path ending in c/d" in shown
    )
