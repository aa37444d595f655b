"""scripts/testbed_results.py: the pre-registered analysis of a matrix's records (the records'
resume and read-back are tests/test_experiments_records.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def test_the_research_analysis_adjusts_the_family_by_holm_and_leaves_the_reference_out(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "testbed_results", Path(__file__).resolve().parents[1] / "scripts" / "testbed_results.py"
    )
    results = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(results)
    rows = [
        {"family": True, "p": 0.04},
        {"family": True, "p": 0.01},
        {"family": True, "p": 0.03},
        {"family": False, "p": 0.001},
        {"family": True, "p": None},
    ]
    results.holm(rows)
    assert [row["p_holm"] for row in rows] == pytest.approx([0.06, 0.03, 0.06, None, None])
