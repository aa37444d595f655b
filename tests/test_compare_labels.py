"""A unit is shown by a short label (its arm plus the identity fields that
differ between the units present) with a legend; CSV and JSON carry the stable arm and one column
per identity field, with snake_case headers; `compare --json` validates against
docs/compare.schema.json.

Asked for in issue 32, item 1.
"""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import jsonschema
import pandas as pd
import pytest
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.arms import load_arm
from ccpo_cli.cli.app import app
from ccpo_cli.store.retractions import retract

runner = CliRunner()
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "docs" / "compare.schema.json").read_text()
)
SEVEN_B = "Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def mixed_db(tmp_path_factory) -> Path:
    """A CPU run of two arms (two seeds each) and a 7B ingest of one of them, with a retraction."""
    path = tmp_path_factory.mktemp("labels") / "runs.db"
    db = store.open_db(path)
    for arm_name, offset in (("return-hard", 5.0), ("grpo", 0.0)):
        for seed in range(2):
            name = f"{arm_name}-cpu-{seed}"
            store.ensure_run(
                db,
                name,
                arm=load_arm(arm_name),
                seed=seed,
                base_model="ccpo-tiny-policy",
                backend="local",
                benchmark="alfworld",
                total_steps=40,
            )
            for step in range(0, 41, 5):
                store.record_evaluation(
                    db,
                    name,
                    step,
                    success_rate=45 + offset + step / 2 + seed,
                    episodes=128,
                    temperature=0.4,
                )
    store.ensure_run(
        db,
        "rh-7b",
        arm=load_arm("return-hard"),
        seed=0,
        base_model=SEVEN_B,
        backend="verl",
        benchmark="alfworld",
        total_steps=150,
    )
    for step in range(70, 151, 10):
        store.record_evaluation(
            db, "rh-7b", step, success_rate=80 + step / 50, episodes=134, temperature=0.4
        )
    retract(db, "rh-7b", step=150, reason="evaluated on the training games")
    return path


def invoke(db: Path, *args: str, columns: int = 80) -> str:
    result = runner.invoke(app, ["--db", str(db), *args], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_numbers_are_visible_at_80_columns_with_a_legend(mixed_db):
    output = invoke(mixed_db, "compare")
    document = json.loads(invoke(mixed_db, "compare", "--json"))
    arms_part = output.split("legend:")[0]
    assert (
        "arms side by side" in arms_part and "(1/" not in arms_part
    )  # one table, not pages of labels
    for arm in document["arms"]:
        assert f"{arm['mean']:.1f}" in arms_part and f"{arm['sd']:.1f}" in arms_part
    labels = {arm["label"] for arm in document["arms"]}
    assert labels == {
        "return-hard · Qwen2.5-7B-Instruct · verl · 134 eps",
        "return-hard · ccpo-tiny-policy · local · 128 eps",
        "grpo · ccpo-tiny-policy · local · 128 eps",
    }
    legend = output.split("legend:")[1]
    assert SEVEN_B in re.sub(
        r"\s+", " ", legend
    )  # the full model id is in the legend, not the label
    assert max(len(line) for line in output.splitlines()) <= 80


def test_one_unit_in_the_database_is_labelled_by_its_arm_alone(mixed_db):
    document = json.loads(invoke(mixed_db, "compare", "--json", "return-hard-cpu-0", "grpo-cpu-0"))
    assert sorted(arm["label"] for arm in document["arms"]) == ["grpo", "return-hard"]
    assert "legend:" not in invoke(mixed_db, "compare", "return-hard-cpu-0", "grpo-cpu-0")


def test_the_stable_names_do_not_change_with_what_else_is_in_the_database(mixed_db):
    everything = json.loads(invoke(mixed_db, "compare", "--json"))
    cpu_only = json.loads(
        invoke(mixed_db, "compare", "--json", "return-hard-cpu-0", "return-hard-cpu-1")
    )
    full = next(
        arm
        for arm in everything["arms"]
        if arm["backend"] == "local" and arm["arm_name"] == "return-hard"
    )
    alone = cpu_only["arms"][0]
    assert (
        full["label"] != alone["label"]
    )  # the label says what sets a unit apart from the others present
    assert (
        (full["unit_key"], full["arm_stable"])
        == (alone["unit_key"], alone["arm_stable"])
        == (alone["unit_key"], "return-hard")
    )


def test_csv_groups_by_model_in_pandas(mixed_db):
    document = json.loads(invoke(mixed_db, "compare", "--json"))
    arms = pd.read_csv(io.StringIO(invoke(mixed_db, "compare", "--format", "csv")))
    assert set(arms["arm"]) == {"return-hard", "grpo"}
    by_model = arms.groupby("base_model")["held_out_mean"].max().to_dict()
    seven_b = next(arm for arm in document["arms"] if arm["base_model"] == SEVEN_B)
    assert by_model[SEVEN_B] == seven_b["mean"] and set(by_model) == {SEVEN_B, "ccpo-tiny-policy"}
    runs = pd.read_csv(
        io.StringIO(invoke(mixed_db, "compare", "--format", "csv", "--table", "runs"))
    )
    assert runs.groupby("backend")["run"].count().to_dict() == {"local": 4, "verl": 1}
    assert set(runs.loc[runs["backend"] == "verl", "episodes"]) == {134}


def test_every_compare_csv_header_is_snake_case(mixed_db):
    for name in ("arms", "units", "runs", "best", "comparisons"):
        header = next(
            csv.reader(io.StringIO(invoke(mixed_db, "compare", "--format", "csv", "--table", name)))
        )
        assert all(re.fullmatch(r"[a-z0-9_]+", field) for field in header), (name, header)
        assert len(header) == len(set(header)), header


@pytest.mark.parametrize("runs", [(), ("return-hard-cpu-0", "grpo-cpu-0")])
def test_compare_json_validates_against_the_shipped_schema(mixed_db, runs):
    document = json.loads(invoke(mixed_db, "compare", "--json", *runs))
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["comparisons"] and document["retracted"]["evaluations"] or runs


def test_the_schema_rejects_a_document_without_the_label_columns(mixed_db):
    document = json.loads(invoke(mixed_db, "compare", "--json"))
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for key in ("label", "unit_key", "base_model", "episodes"):
        broken = json.loads(json.dumps(document))
        del broken["arms"][0][key]
        assert not validator.is_valid(broken), key
    broken = json.loads(json.dumps(document))
    broken["arms"][0]["mean"] = 150.0  # a rate is percent
    assert not validator.is_valid(broken)
