"""The card oracle on real logs (issue 39, acceptance): runs.db built with `ccpo ingest` from
real verl-agent logs written elsewhere (rounds 1 and 4 of the shared real logs: GRPO and
GiGPO on ALFWorld, 1.5B and 7B), every card and compare --json checked by
scripts/card_oracle_recompute.py run as its own process (it imports no ccpo)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers_card_oracle import ORACLE_PATH, build_real_round


@pytest.mark.parametrize("round_name", ["round1", "round4"])
def test_the_recompute_finds_no_false_sentence_on_real_logs(round_name, tmp_path):
    db_path, cards, compare = build_real_round(round_name, tmp_path)
    assert cards, "no card rendered"
    result = subprocess.run(
        [
            sys.executable,
            str(ORACLE_PATH),
            str(db_path),
            *map(str, cards),
            "--compare",
            str(compare),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = result.stdout.strip().splitlines()[-1]
    assert "claims checked" in summary, result.stderr
    assert result.returncode == 0, result.stdout
