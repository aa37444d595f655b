"""The CLI package imports one way: `cli/app.py` registers the command modules, which never
import it back (a cycle there is what once needed `noqa: E402, F401` to hold together)."""

from __future__ import annotations

import ast
from pathlib import Path

import ccpo_cli.cli

CLI_DIR = Path(ccpo_cli.cli.__file__).parent
PACKAGE = "ccpo_cli.cli"


def _imports(path: Path) -> set[str]:
    """The `ccpo_cli.cli.*` modules a file imports, wherever the import statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            # `from ccpo_cli.cli import train` imports the module ccpo_cli.cli.train
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    modules = {path.stem for path in CLI_DIR.glob("*.py")}
    return {name for name in found if name.startswith(PACKAGE + ".") and name.split(".")[2] in modules}


def _graph() -> dict[str, set[str]]:
    return {f"{PACKAGE}.{path.stem}": _imports(path) for path in sorted(CLI_DIR.glob("*.py"))}


def test_no_command_module_imports_app():
    importers = [module for module, imported in _graph().items() if f"{PACKAGE}.app" in imported]
    assert importers == []


def test_cli_import_graph_has_no_cycle():
    graph = _graph()
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        assert module not in visiting, f"import cycle: {' -> '.join(visiting[visiting.index(module):] + [module])}"
        if module in done:
            return
        visiting.append(module)
        for imported in sorted(graph.get(module, ())):
            visit(imported)
        visiting.pop()
        done.add(module)

    for module in graph:
        visit(module)
    # The walk saw the registrations, so an empty graph cannot pass for an acyclic one.
    assert f"{PACKAGE}.train" in graph[f"{PACKAGE}.app"]

