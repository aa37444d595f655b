"""docs/cli.md is generated from the Typer app; this fails when someone changes a command
without regenerating it (`python scripts/gen_cli_docs.py`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_cli_md_is_current():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert text == _generator().render(), "docs/cli.md is stale: run python scripts/gen_cli_docs.py"


def test_the_page_lists_every_command_and_option_of_the_app():
    import typer

    from ccpo_cli.cli.app import app

    text = _generator().render()
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for path, leaf in (getattr(command, "commands", None) or {name: command}).items():
            title = f"`ccpo {name}`" if path == name else f"`ccpo {name} {path}`"
            assert title in text
            for param in leaf.params:
                for opt in param.opts if param.param_type_name == "option" else ():
                    assert f"`{opt}`" in text
