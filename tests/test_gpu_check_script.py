"""scripts/gpu_check.py, the accelerator check of the verl backend's tensor side, run on the CPU so
that it cannot rot between the runs that have a GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


@pytest.mark.slow
def test_every_check_passes_on_the_cpu():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--repeats", "0"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(lines) == 11 and all(line.startswith("ok") for line in lines), result.stdout
    for check in (
        "packed capture",
        "recorder returns batch order",
        "advantages land on the batch's device",
        "hf agent generates",
    ):
        assert any(check in line for line in lines)
    assert result.stdout.rstrip().endswith("all checks passed")
