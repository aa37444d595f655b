"""Imports go one way. Across the package: down the layer table of docs/architecture.md §1
(read from the page itself, so the page and the code cannot drift apart). Inside the CLI:
`cli/app.py` registers the command modules, which never import it back (a cycle there is what
once needed `noqa: E402, F401` to hold together)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import ccpo_cli.cli

CLI_DIR = Path(ccpo_cli.cli.__file__).parent
PACKAGE = "ccpo_cli.cli"
PACKAGE_DIR = CLI_DIR.parent
ARCHITECTURE = PACKAGE_DIR.parent / "docs" / "architecture.md"
# A module named in a string, as lazy registries name them: "ccpo_cli.x.y:function".
NAMED_MODULE = re.compile(r"ccpo_cli(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?::[A-Za-z_][A-Za-z0-9_]*)?")


def layer_table() -> list[tuple[str, list[str]]]:
    """(layer, module paths) in the order of the table in docs/architecture.md §1."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## 1. Layers") : text.index("## 2.")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`ccpo_cli/" in line]
    return [
        (row.split("|")[1].strip(), re.findall(r"`(ccpo_cli/[^`]*)`", row.split("|")[2]))
        for row in rows
    ]


def _layer_of(relative: str, table: list[tuple[str, list[str]]]) -> list[int]:
    return [
        index
        for index, (_, entries) in enumerate(table)
        for entry in entries
        if relative == entry or (entry.endswith("/") and relative.startswith(entry))
    ]


def _module_file(name: str) -> Path | None:
    """The file of `ccpo_cli.a.b` (a module or a package), None when it is not one."""
    parts = name.split(".")[1:]
    base = PACKAGE_DIR.joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imported_files(path: Path) -> set[Path]:
    """The package's files a module imports, wherever the statement sits (functions, TYPE_CHECKING
    blocks), plus those it names in "module:function" strings."""
    names: set[str] = set()
    module = ".".join(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = (
                    module.split(".")[: -node.level]
                    if path.name != "__init__.py"
                    else module.split(".")[: len(module.split(".")) - node.level + 1]
                )
                base = ".".join(package + ([node.module] if node.module else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and NAMED_MODULE.fullmatch(node.value)
        ):
            names.add(node.value.split(":")[0])
    found = set()
    for name in names:
        if name == "ccpo_cli" or name.startswith("ccpo_cli."):
            # `ccpo_cli.a.b.function` names the module ccpo_cli.a.b
            while name and _module_file(name) is None:
                name = name.rpartition(".")[0]
            if name:
                found.add(_module_file(name))
    return found


def test_every_module_sits_in_exactly_one_layer_of_the_architecture_page():
    table = layer_table()
    assert [layer for layer, _ in table][:1] == ["shared"] and table[-1][0] == "CLI", table
    unplaced = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR.parent).as_posix()
        layers = _layer_of(relative, table)
        if len(layers) != 1:
            unplaced[relative] = [table[index][0] for index in layers]
    assert unplaced == {}, f"modules in no layer or in several: {unplaced}"


def test_imports_go_down_the_layers_of_the_architecture_page():
    table = layer_table()
    upward = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR.parent).as_posix()
        for target in imported_files(path):
            target_relative = target.relative_to(PACKAGE_DIR.parent).as_posix()
            own, theirs = _layer_of(relative, table), _layer_of(target_relative, table)
            if len(own) == len(theirs) == 1 and theirs[0] > own[0]:  # unplaced ones: the test above
                upward.append(
                    f"{relative} ({table[own[0]][0]}) imports {target_relative} ({table[theirs[0]][0]})"
                )
    assert upward == [], "imports against the layer order of docs/architecture.md:\n" + "\n".join(
        upward
    )


def test_the_layer_check_sees_lazy_imports_and_named_modules():
    # The walk must see what the layering is about: a function-level import of a lower layer,
    # and a registry naming a backend module in a string.
    assert PACKAGE_DIR / "backends" / "local" / "trainer.py" in imported_files(
        PACKAGE_DIR / "experiments" / "blocks.py"
    )
    assert PACKAGE_DIR / "backends" / "local" / "agent.py" in imported_files(
        PACKAGE_DIR / "evaluation.py"
    )
    assert PACKAGE_DIR / "store" / "records.py" in imported_files(
        PACKAGE_DIR / "backends" / "local" / "trainer.py"
    ) or PACKAGE_DIR / "store" / "__init__.py" in imported_files(
        PACKAGE_DIR / "backends" / "local" / "trainer.py"
    )


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
    return {
        name for name in found if name.startswith(PACKAGE + ".") and name.split(".")[2] in modules
    }


def _graph() -> dict[str, set[str]]:
    from ccpo_cli.cli.app import COMMANDS

    graph = {f"{PACKAGE}.{path.stem}": _imports(path) for path in sorted(CLI_DIR.glob("*.py"))}
    # app.py imports its command modules by name, from its COMMANDS list, when it builds them.
    graph[f"{PACKAGE}.app"] |= {f"{PACKAGE}.{name}" for name in COMMANDS}
    return graph


def test_no_command_module_imports_app():
    importers = [module for module, imported in _graph().items() if f"{PACKAGE}.app" in imported]
    assert importers == []


def test_cli_import_graph_has_no_cycle():
    graph = _graph()
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> None:
        assert module not in visiting, (
            f"import cycle: {' -> '.join(visiting[visiting.index(module) :] + [module])}"
        )
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


# What a command module may import at its top (issue 23): `--help` and completion import every
# command module, so the library a command calls is imported inside its function. The light
# ccpo modules here hold only constants and the error classes, the vocabulary and the window
# rules the help texts state (report/window.py imports its statistics inside its functions);
# tests/test_cli_startup.py checks the modules a fresh process loads.
TOP_LEVEL_ALLOWED = {
    "typer",
    "typer._click",
    "rich.console",
    "ccpo_cli",
    "ccpo_cli.cli",
    "ccpo_cli.errors",
    "ccpo_cli.seeds",
    "ccpo_cli.experiments.matrix",
    "ccpo_cli.vocabulary",
    "ccpo_cli.report.window",
}


def _top_level_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != "__future__":
            found.add(node.module)
    return found


def test_command_modules_import_no_library_at_the_top():
    import sys

    offending = {}
    for path in sorted(CLI_DIR.glob("*.py")):
        names = {
            name
            for name in _top_level_imports(path)
            if name.split(".")[0] not in sys.stdlib_module_names
            and name not in TOP_LEVEL_ALLOWED
            and not name.startswith("ccpo_cli.cli.")
        }
        if names:
            offending[path.name] = sorted(names)
    assert offending == {}, f"import these inside the command that uses them: {offending}"
