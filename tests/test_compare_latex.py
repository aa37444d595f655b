"""`compare --format latex` is a booktabs table whose cells are mean ± the half
width of the 95 % t interval.

Asked for in issue 32, item 6.
"""

from __future__ import annotations

import math
import re

from scipy import stats as scipy_stats
from typer.testing import CliRunner

from ccpo_cli.arms import load_arm
from ccpo_cli.cli.app import app
from ccpo_cli.store import ensure_run, open_db, record_evaluation


def test_latex_is_booktabs_with_mean_and_interval(tmp_path):
    db = open_db(tmp_path / "runs.db")
    for arm_name, offset in (("return-hard", 4.0), ("grpo_x", 0.0)):
        arm = load_arm("grpo" if arm_name == "grpo_x" else arm_name)
        for seed in range(3):
            name = f"{arm_name}-{seed}"
            ensure_run(
                db,
                name,
                arm=arm,
                seed=seed,
                base_model="m",
                backend="local",
                benchmark="alfworld",
                total_steps=20,
            )
            for step in range(10, 21, 2):
                record_evaluation(
                    db,
                    name,
                    step,
                    success_rate=50 + offset + 2 * seed + step % 3,
                    episodes=64,
                    temperature=0.4,
                )
    result = CliRunner().invoke(
        app, ["--db", str(tmp_path / "runs.db"), "compare", "--format", "latex"]
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "\\begin{tabular}" in out and out.count("\\toprule") == out.count("\\bottomrule") >= 2
    assert (
        "\\midrule" in out and "grpo\\_x" not in out
    )  # names escaped where needed; the arm is grpo
    import json

    document = json.loads(
        CliRunner().invoke(app, ["--db", str(tmp_path / "runs.db"), "compare", "--json"]).stdout
    )
    arm = document["arms"][0]
    half = scipy_stats.t.ppf(0.975, arm["n"] - 1) * arm["sd"] / math.sqrt(arm["n"])
    row = next(line for line in out.splitlines() if line.startswith(arm["label"]))
    assert re.search(rf"{arm['mean']:.1f} \$\\pm\$ {half:.1f} & seeds & 3 & 3 \\\\$", row), row
