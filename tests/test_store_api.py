"""The schema as sqlite-utils sees it, and the write paths that use its table API."""

from __future__ import annotations

import ast
from pathlib import Path

import ccpo_cli.store
from ccpo_cli.store import ensure_run, open_db, record_evaluation, run_evaluations

STORE_DIR = Path(ccpo_cli.store.__file__).parent


def test_keys_and_foreign_keys_read_through_the_table_api():
    db = open_db(":memory:")
    assert db["runs"].pks == ["id"]
    assert db["task_type_results"].pks == ["evaluation_id", "task_type"]
    references = {
        (fk.table, fk.column, fk.other_table, fk.other_column)
        for name in (
            "evaluations",
            "task_type_results",
            "episodes",
            "checkpoints",
            "publications",
            "conflicts",
        )
        for fk in db[name].foreign_keys
    }
    assert ("evaluations", "run_id", "runs", "id") in references
    assert ("episodes", "evaluation_id", "evaluations", "id") in references
    assert ("conflicts", "kept_evaluation_id", "evaluations", "id") in references


def test_an_evaluation_without_episodes_or_types_inserts_no_child_rows():
    db = open_db(":memory:")
    ensure_run(db, "r")
    record_evaluation(db, "r", 3, success_rate=40.0)
    assert db["task_type_results"].count == 0 and db["episodes"].count == 0
    assert [row["step"] for row in run_evaluations(db, "r")] == [3]
    assert db["runs"].get(1)["last_step"] == 3


def test_records_and_queries_build_no_sql_by_hand():
    # Raw SQL belongs to the migrations (schema, append-only triggers); rows go through the API.
    for name in ("records.py", "queries.py"):
        tree = ast.parse((STORE_DIR / name).read_text(encoding="utf-8"))
        strings = [
            node.value.upper()
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        for fragment in ("INSERT INTO", "UPDATE RUNS", "LIMIT 0", "PRAGMA TABLE_INFO"):
            assert not any(fragment in text for text in strings), (name, fragment)
