"""Optional runtimes: every command imports, and every dry run answers, on a machine without torch.

torch (and transformers, which needs it) are hidden from a fresh interpreter by a meta-path
finder that refuses them, as if the 'local' extra were not installed. A command that would
need them says which extra to install, in one line (ccpo_cli/extras.py, docs/architecture.md §4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

NO_TORCH = """
import sys
class HideTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "transformers"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, HideTorch())
sys.argv = ["ccpo", *sys.argv[1:]]
if sys.argv[1:] == ["--import-every-command"]:
    import typer
    from ccpo_cli.cli.app import app
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        command.callback  # built: each command module imported
    import importlib, pkgutil, ccpo_cli.cli
    for module in pkgutil.iter_modules(ccpo_cli.cli.__path__):
        importlib.import_module(f"ccpo_cli.cli.{module.name}")
    print("imported", len(root.commands), "torch" in sys.modules)
    raise SystemExit(0)
from ccpo_cli.cli.app import main
main()
"""


def ccpo_without_torch(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    environment = dict(
        os.environ, PYTHONPATH=str(REPO_ROOT), COLUMNS="200", CUDA_VISIBLE_DEVICES=""
    )
    return subprocess.run(
        [sys.executable, "-c", NO_TORCH, *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_every_command_module_imports_without_torch(tmp_path):
    done = ccpo_without_torch(tmp_path, "--import-every-command")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "imported" and done.stdout.split()[-1] == "False"


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--arm", "grpo", "--backend", "local", "--steps", "2", "--dry-run"],
        ["train", "--arm", "grpo", "--backend", "local", "--seeds", "0-1", "--dry-run", "--json"],
        ["matrix", "--arms", "grpo,gigpo", "--seeds", "0-1", "--dry-run"],
    ],
)
def test_each_dry_run_answers_without_torch(tmp_path, command):
    done = ccpo_without_torch(tmp_path, "--db", str(tmp_path / "runs.db"), *command)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs.db").exists()  # a dry run writes nothing
    if "train" in command:
        assert json.loads(done.stdout)["dry_run"] is True


def test_training_without_torch_names_the_extra_in_one_line(tmp_path):
    done = ccpo_without_torch(
        tmp_path,
        "--db",
        str(tmp_path / "runs.db"),
        "train",
        "--arm",
        "grpo",
        "--backend",
        "local",
        "--steps",
        "1",
    )
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: ccpo train --backend local needs the 'local' extra (torch is not installed): "
        "pip install 'ccpo[local]'"
    ]


def test_require_extra_translates_only_a_missing_package(monkeypatch):
    from ccpo_cli.errors import CcpoError
    from ccpo_cli.extras import MissingExtra, require_extra

    with pytest.raises(MissingExtra) as refused:
        require_extra("sync", "no_such_package_for_ccpo", what="parquet parts")
    assert str(refused.value) == (
        "parquet parts needs the 'sync' extra (no_such_package_for_ccpo is not installed): "
        "pip install 'ccpo[sync]'"
    )
    assert isinstance(refused.value, CcpoError) and refused.value.exit_code == 1
    assert require_extra("sync", "json") is json
