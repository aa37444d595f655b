"""mypy passes on the packages `[tool.mypy]` in pyproject.toml lists (store/, report/, cards/,
the estimators, stats and the shared vocabulary): a wrong annotation or a missing None check
there fails the suite, not only CI's own mypy line (.ci/run). It takes about 30 s."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_passes_on_the_configured_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    from mypy import api

    # mypy reads its files and settings from pyproject.toml in the working directory.
    monkeypatch.chdir(REPO_ROOT)
    report, errors, status = api.run([])
    assert status == 0, f"mypy failed (exit {status}):\n{report}{errors}"
