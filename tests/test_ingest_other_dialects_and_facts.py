"""Other trainers' validation names, configs cut by other output, splits, crashes, resumes and
LoRA (issue 41), on the round-4 real logs beside this repository (shared/real-logs/round4, see
its SOURCES.md) and minimal synthetic cases. Expected values come from the files, read here
with plain regexes or the csv module, never from ccpo's readers."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers_real_logs import ANSI, ROUND4, ingest, runner

from ccpo_cli.cli.app import app
from ccpo_cli.store import open_db


def runs_show(db_path: Path, run: str) -> dict:
    result = runner.invoke(app, ["--db", str(db_path), "runs", "show", run, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def evaluations(db_path: Path) -> list[dict]:
    return list(open_db(db_path)["evaluations"].rows_where(order_by="step, id"))


def test_search_r1_test_scores_are_the_per_source_success_rates(tmp_path):
    """XUHIT's Search-R1 PPO dashboard logs `val/test_score/nq` at steps 0, 100, 200: one
    source, so it is also the overall rate; read by default, benchmark search."""
    path = ROUND4 / "xuhit_search_ppo_phase6_metric_dashboard.csv"
    with path.open(newline="") as handle:
        logged = {
            int(row["step"]): float(row["val/test_score/nq"])
            for row in csv.DictReader(handle)
            if row["val/test_score/nq"]
        }
    document = ingest(tmp_path / "r.db", path, "xuhit")
    assert document["benchmark"] == "search" and not document["conflicts"]
    assert document["read_as_success_rates"] == ["val/test_score/nq"]
    rows = evaluations(tmp_path / "r.db")
    assert {row["step"]: row["success_rate"] for row in rows} == pytest.approx(
        {step: 100 * value for step, value in logged.items()}
    )
    types = open_db(tmp_path / "r.db")["task_type_results"].rows
    assert {row["task_type"] for row in types} == {"nq"}


def test_a_crashed_launchs_printed_initial_validation_is_its_step_0_evaluation(tmp_path):
    """AmourWaltz's Search-R1 launch validated once (pprinted over four lines, seven sources
    all 0.0) and died of CUDA OOM before step 1: one step-0 evaluation, 0 %, seven per-source
    rates, and the crash is a fact of the run."""
    path = ROUND4 / "amourwaltz_search_ppo_nq_hotpotqa_crashed.log"
    text = ANSI.sub("", path.read_text(errors="replace"))
    sources = set(re.findall(r"'val/test_score/(\w+)': 0\.0", text))
    assert len(sources) == 7
    document = ingest(tmp_path / "r.db", path, "amour")
    assert document["crashed"] is True and document["benchmark"] == "search"
    (row,) = evaluations(tmp_path / "r.db")
    assert (row["step"], row["success_rate"]) == (0, 0.0)
    shown = runs_show(tmp_path / "r.db", "amour")
    assert set(shown["evaluations"][0]["task_types"]) == sources
    assert shown["facts"]["crashed_after_step"] == 0
    assert shown["facts"]["split"] == "test"  # data.val_files .../test.parquet


def test_verl_09_answer_em_is_read_and_its_reward_is_not(tmp_path):
    """T-zy's verl 0.9 console: `val-aux/<src>/answer_em/mean@1` is exact-match success, read
    as per-source rates; `val-core/<src>/reward/mean@1` (negative on hotpotqa) is never read as
    a success rate. No overall rate is logged and the sources differ, so no evaluation is
    invented from them, and the warning says why."""
    path = ROUND4 / "tzy_search_grpo_qwen25_15b_console.log"
    document = ingest(tmp_path / "r.db", path, "tzy")
    assert any(key.startswith("val-aux/nq/answer_em") for key in document["read_as_success_rates"])
    assert not any("val-core" in key for key in document["read_as_success_rates"])
    assert evaluations(tmp_path / "r.db") == []
    assert any("pooled over every question is not in the log" in w for w in document["warnings"])
    assert not any("a run that has not validated yet" in w for w in document["warnings"])


def test_the_verl_09_warning_names_the_metric_that_reads_each_validation(tmp_path):
    """The warning of a per-source-only log names the exact --metric that records one source's
    exact match as a run's success rate; passed as named, every validation of the file (three,
    at steps 100, 200 and 300) is recorded with that source's logged rate."""
    path = ROUND4 / "tzy_search_grpo_qwen25_15b_console.log"
    text = ANSI.sub("", path.read_text(errors="replace"))
    warning = next(
        w
        for w in ingest(tmp_path / "a.db", path, "tzy")["warnings"]
        if "pooled over every question" in w
    )
    named = re.search(r"e\.g\. --metric (\S+)", warning).group(1)
    source_key = named.split("=")[0]
    logged = [float(v) for v in re.findall(re.escape(f"{source_key}:") + r"([0-9.]+)", text)]
    assert len(logged) == 3
    document = ingest(tmp_path / "b.db", path, "tzy-source", "--metric", named)
    assert document["conflicts"] == []
    rows = evaluations(tmp_path / "b.db")
    assert [row["step"] for row in rows] == [100, 200, 300]
    assert [row["success_rate"] for row in rows] == pytest.approx([100 * v for v in logged])


def test_a_verl_09_config_cut_by_a_warning_line_is_read(tmp_path):
    """The pprinted config is cut after `'tool_config': ` by a WARNING line and two more lines
    of the same actor; the rest of the value follows unindented. The config is read (model,
    estimator, total steps) and the three lines are left out and named."""
    path = ROUND4 / "tzy_search_grpo_qwen25_15b_console.log"
    lines = ANSI.sub("", path.read_text(errors="replace")).splitlines()
    warning = next(n for n, line in enumerate(lines, 1) if "WARNING:2026-07-16 18:45:51" in line)
    document = ingest(tmp_path / "r.db", path, "tzy")
    facts = document["stated_facts"]
    assert facts["estimator"] == "grpo" and facts["total_steps"] == 1005
    assert facts["model"].endswith("qwen2.5-1.5b-searchr1-sft-merged")
    assert warning in document["config_left_out_lines"]
    assert document["skipped"] == 0
    assert open_db(tmp_path / "r.db")["runs"].get(1)["total_steps"] == 1005


def test_a_config_line_cut_after_its_key_reads_its_value_from_the_next_line(tmp_path):
    path = tmp_path / "c.log"
    path.write_text(
        "(TaskRunner pid=1) {'algorithm': {'adv_estimator': 'grpo'},\n"
        "(TaskRunner pid=1)  'env': {'extra': \n"
        "(TaskRunner pid=1) WARNING:2026 something unrelated\n"
        "(TaskRunner pid=1) {'a': 1},\n"
        "(TaskRunner pid=1)         'seed': 7},\n"
        "(TaskRunner pid=1)  'trainer': {'total_training_steps': 4}}\n"
        "(TaskRunner pid=1) step:1 - val/success_rate:0.500\n"
    )
    document = ingest(tmp_path / "r.db", path, "r", "--benchmark", "alfworld")
    assert document["stated_facts"]["seed"] == 7 and document["config_left_out_lines"] == [3]


def test_metric_may_be_given_several_times(tmp_path):
    path = tmp_path / "fork.log"
    path.write_text(
        "step:5 - val/val/success_rate:0.500 - val/val/nq_rate:0.250\n"
        "step:10 - val/val/success_rate:0.750 - val/val/nq_rate:0.500\n"
    )
    document = ingest(
        tmp_path / "r.db",
        path,
        "r",
        "--benchmark",
        "search",
        "--metric",
        "val/val/success_rate=val/success_rate",
        "--metric",
        "val/val/nq_rate=val/nq_success_rate",
    )
    assert document["new"] == 2
    shown = runs_show(tmp_path / "r.db", "r")
    assert [row["task_types"]["nq"]["success"] for row in shown["evaluations"]] == [25.0, 50.0]


def test_the_warning_names_the_metric_option_for_a_reward_and_says_it_is_one(tmp_path):
    path = tmp_path / "v.log"
    path.write_text(
        "step:1 - actor/loss:0.1\nstep:2 - val-core/nq/reward/mean@1:-0.25 - actor/loss:0.1\n"
    )
    document = ingest(tmp_path / "r.db", path, "r", "--benchmark", "search")
    (warning,) = [w for w in document["warnings"] if "ingest again with" in w]
    assert "--metric val-core/nq/reward/mean@1=val/nq_success_rate" in warning
    assert "reward or score" in warning


def test_the_split_comes_from_data_val_files_and_a_test_log_keeps_its_own(tmp_path):
    """Wallace's search GRPO validates on validation.parquet (split `validation`); the
    evaluation-only log of its step-250 checkpoint ran on test.parquet. Ingested into the
    training run, the test evaluation is recorded under split `test`, apart from the
    validations, which keep theirs; it adds no resume."""
    db_path = tmp_path / "r.db"
    for name in ("seg1_pre_resume_step100", "seg2_resume_from100"):
        ingest(db_path, ROUND4 / f"wallace_search_grpo_{name}.log", "grpo")
    document = ingest(db_path, ROUND4 / "wallace_search_evalonly_grpo_step250_test.log", "grpo")
    assert document["split"] == "test" and document["resumed_from"] is None
    rows = evaluations(db_path)
    assert {row["split"] for row in rows} == {"heldout", "test"}
    assert [row["step"] for row in rows if row["split"] == "test"] == [250]
    shown = runs_show(db_path, "grpo")
    assert shown["facts"]["split"] == "validation"
    assert shown["facts"]["resumed_from"] == 100  # the real resume, from segment 2


def test_a_per_ingest_split_applies_to_that_file_only(tmp_path):
    first = tmp_path / "a.log"
    first.write_text("step:5 - val/success_rate:0.500\n")
    second = tmp_path / "b.log"
    second.write_text("step:5 - val/success_rate:0.250\n")
    ingest(tmp_path / "r.db", first, "r", "--benchmark", "alfworld")
    document = ingest(tmp_path / "r.db", second, "r", "--split", "test")
    assert not document["conflicts"]
    assert [(row["split"], row["success_rate"]) for row in evaluations(tmp_path / "r.db")] == [
        ("heldout", 50.0),
        ("test", 25.0),
    ]
    assert "split" not in runs_show(tmp_path / "r.db", "r")["facts"]


def test_a_crash_and_its_resume_are_facts_of_the_run_and_lora_is_an_adapter(tmp_path):
    """Wallace's GRPO died saving the step-150 checkpoint after step 149 and resumed from the
    step-100 one: both are facts; the run trains LoRA rank 16 (an adapter, not a fine-tune)."""
    db_path = tmp_path / "r.db"
    first = ingest(db_path, ROUND4 / "wallace_search_grpo_seg1_pre_resume_step100.log", "grpo")
    assert first["crashed"] is True and first["last_step"] == 149
    assert open_db(db_path)["runs"].get(1)["status"] == "stopped"
    ingest(db_path, ROUND4 / "wallace_search_grpo_seg2_resume_from100.log", "grpo")
    facts = runs_show(db_path, "grpo")["facts"]
    assert facts["crashed_after_step"] == 149 and facts["resumed_from"] == 100
    assert facts["adapter"] == {"type": "lora", "rank": 16, "alpha": 32}
    # The log's two data sources, not the seven the search benchmark declares.
    assert facts["task_types"] == ["hotpotqa", "nq"]
    from ccpo_cli.cards.setup import benchmark_row

    assert benchmark_row("search", facts["task_types"]).endswith("2 task types (hotpotqa, nq)")


def test_project_name_is_a_label_not_an_isolation_difference():
    from ccpo_cli.report.isolation import _is_estimator_or_local

    assert _is_estimator_or_local("trainer.project_name")


def test_an_interim_card_message_never_says_of_none():
    from ccpo_cli.hub_plan import card_message

    context = SimpleNamespace(
        status="interim", run="r", summary={"last_step": 100, "total_steps": None}
    )
    message = card_message(SimpleNamespace(context=context))
    assert "None" not in message and "step 100" in message


CONFIGS_WITH_OTHER_OUTPUT = {
    "config.yaml": (
        "algorithm:\n"
        "  adv_estimator: grpo\n"
        "(TaskRunner pid=1) Setting TOKENIZERS_PARALLELISM=false, it's safe\n"
        "env:\n"
        "  seed: 7\n",
        ("grpo", 7),
    ),
    "launch.sh": (
        "python3 -m verl.trainer.main_ppo \\\n"
        "    algorithm.adv_estimator=gigpo \\\n"
        "WARNING: the retriever isn't up yet\n"
        "    env.seed=3 \\\n"
        "    trainer.total_training_steps=20\n",
        ("gigpo", 3),
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS_WITH_OTHER_OUTPUT))
def test_a_config_file_is_read_around_a_line_of_other_output(tmp_path, name):
    """A YAML config or a launch command with a foreign line (line 3) inside: the line is left
    out and named, the rest read."""
    text, (estimator, seed) = CONFIGS_WITH_OTHER_OUTPUT[name]
    config = tmp_path / name
    config.write_text(text)
    log = tmp_path / "v.log"
    log.write_text("step:5 - val/success_rate:0.500\n")
    command = ("--benchmark", "alfworld", "--config", str(config))
    document = ingest(tmp_path / "r.db", log, "r", *command)
    assert document["config_left_out_lines"] == [3]
    facts = runs_show(tmp_path / "r.db", "r")["facts"]
    assert facts["estimator"] == estimator and facts["seed"] == seed
