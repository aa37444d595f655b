"""The card template and the published baselines travel inside the wheel and render from it.

Builds the real wheel (hatchling, no build isolation so nothing is downloaded), installs it into
a private folder, and renders a card in a fresh interpreter that imports ccpo from that folder
only, not from the checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

RENDER_FROM_INSTALLED = r"""
import json, sys
from pathlib import Path
import ccpo_cli
from ccpo_cli.paths import templates_dir, configs_dir
from ccpo_cli.benchmarks import list_benchmarks
from ccpo_cli.cards import build_card_context, render_card, lint_card
from ccpo_cli.cards.render import template_path
from helpers_cards import seed_card_db

db = seed_card_db(Path(sys.argv[1]) / "runs.db")
text = render_card(build_card_context(db, "return-hard", repo_id="tester/wheel-card"))
print(json.dumps({"package": ccpo_cli.__file__, "template": str(template_path()),
                  "templates_dir": str(templates_dir()), "configs_dir": str(configs_dir()),
                  "lint": lint_card(text), "has_window": "| held-out success | 83.5% |" in text,
                  "benchmarks": list_benchmarks()}))
"""


@pytest.mark.slow
def test_template_ships_in_the_wheel_and_renders_from_the_installed_package(tmp_path):
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-q",
            "-w",
            str(wheel_dir),
            str(REPO_ROOT),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    [wheel] = list(wheel_dir.glob("ccpo-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ccpo_cli/templates/ccpo_model_card.md" in names
    assert "ccpo_cli/configs/published_baselines.yaml" in names
    # Every benchmark file travels too: task types, cards' baselines and ingest's detection read them.
    shipped = {path.name for path in (REPO_ROOT / "configs" / "benchmarks").glob("*.yaml")}
    assert shipped and {f"ccpo_cli/configs/benchmarks/{name}" for name in shipped} <= set(names)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([str(target), str(REPO_ROOT / "tests")]),
        MPLBACKEND="Agg",
    )
    done = subprocess.run(
        [sys.executable, "-c", RENDER_FROM_INSTALLED, str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    installed = str(target / "ccpo_cli")
    assert report["package"].startswith(installed)
    assert report["template"] == str(target / "ccpo_cli" / "templates" / "ccpo_model_card.md")
    assert report["configs_dir"] == str(target / "ccpo_cli" / "configs")
    assert report["lint"] == [] and report["has_window"] is True
    assert "webshop" in report["benchmarks"] and "alfworld" in report["benchmarks"]
