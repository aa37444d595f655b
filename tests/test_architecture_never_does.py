"""Each layer keeps to the "never does" column of docs/architecture.md §1. The column is read
from the page: every phrase in it has a static check here, and a phrase without one fails, so
the page cannot promise what nothing holds the code to. (The "imports go down" rule is
tests/test_cli_import_graph.py's.)"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

from tests.test_cli_import_graph import ARCHITECTURE, PACKAGE_DIR, layer_table

# A network client a module could reach the Hub or the web with.
NETWORK_MODULES = (
    "huggingface_hub",
    "requests",
    "httpx",
    "urllib.request",
    "http.client",
    "aiohttp",
)
STATISTICS_MODULES = (
    "scipy",
    "statsmodels",
    "ccpo_cli.stats",
    "ccpo_cli.report",
    "ccpo_cli.distributions",
)
COMMAND_LINE_PARSERS = ("argparse", "typer", "click")


def never_column() -> dict[str, str]:
    """layer -> its "never does" cell, from the page."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## 1. Layers") : text.index("## 2.")]
    cells = {}
    for line in section.splitlines():
        if line.startswith("| ") and "`ccpo_cli/" in line:
            parts = [part.strip() for part in line.split("|")]
            cells[parts[1]] = parts[4]
    return cells


def files_of(entries: list[str]) -> list[Path]:
    found: list[Path] = []
    for entry in entries:
        path = PACKAGE_DIR.parent / entry
        if entry.endswith("/"):
            found += sorted(path.rglob("*.py"))
        elif path.suffix == ".py":
            found.append(path)
    return found


def imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _imports_any(tree: ast.AST, modules: tuple[str, ...]) -> list[str]:
    return sorted(
        name
        for name in imports(tree)
        if any(name == module or name.startswith(module + ".") for module in modules)
    )


def _calls(tree: ast.AST) -> list[str]:
    """Dotted names of every call (`np.random.default_rng`, `print`, `open`)."""
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            parts, target = [], node.func
            while isinstance(target, ast.Attribute):
                parts.append(target.attr)
                target = target.value
            if isinstance(target, ast.Name):
                names.append(".".join([target.id, *reversed(parts)]))
    return names


def no_io_torch_or_randomness(path: Path, tree: ast.AST) -> list[str]:
    if path.name == "batch_io.py":  # the one reader and writer of batch files
        return _imports_any(tree, ("torch", "random"))
    problems = _imports_any(tree, ("torch", "random"))
    for call in _calls(tree):
        if call in ("open", "np.load", "numpy.load") or call.startswith(("np.save", "Path.")):
            problems.append(call)
        # A seeded generator is a fixed function of its seed; anything else is randomness.
        if call.startswith("np.random.") and call != "np.random.default_rng":
            problems.append(call)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and _calls(node)[:1] == ["np.random.default_rng"]
            and not node.args
        ):
            problems.append("np.random.default_rng() without a seed")
    return problems


def no_runs_db_writes(path: Path, tree: ast.AST) -> list[str]:
    return _imports_any(tree, ("ccpo_cli.store", "sqlite3", "sqlite_utils"))


def no_statistics_or_network(path: Path, tree: ast.AST) -> list[str]:
    problems = _imports_any(tree, STATISTICS_MODULES + NETWORK_MODULES)
    # The host's name labels a machine's runs; nothing else of the socket module is used.
    problems += [c for c in _calls(tree) if c.startswith("socket.") and c != "socket.gethostname"]
    return problems


def no_printing(path: Path, tree: ast.AST) -> list[str]:
    return [
        call
        for call in _calls(tree)
        if call in ("print", "typer.echo", "click.echo", "sys.stdout.write", "sys.stderr.write")
    ]


def no_command_line_parsing(path: Path, tree: ast.AST) -> list[str]:
    return _imports_any(tree, COMMAND_LINE_PARSERS)


def no_training(path: Path, tree: ast.AST) -> list[str]:
    found = _imports_any(tree, ("torch.optim",))
    return found + [call for call in _calls(tree) if call.endswith(".backward")]


def no_computation(path: Path, tree: ast.AST) -> list[str]:
    return _imports_any(tree, ("numpy", "torch", "scipy", "pandas"))


# Each phrase of the column, as the page writes it, and the check that holds the code to it.
CHECKS: dict[str, Callable[[Path, ast.AST], list[str]] | None] = {
    "know any other layer": None,  # tests/test_cli_import_graph.py
    "—": None,
    "I/O beyond batch files, torch, randomness": no_io_torch_or_randomness,
    "write to runs.db": no_runs_db_writes,
    "statistics, network": no_statistics_or_network,
    "print for the user": no_printing,
    "parse command lines": no_command_line_parsing,
    "train by itself (a backend does)": no_training,
    "compute": no_computation,
}


def test_every_never_does_phrase_has_a_check():
    assert set(never_column().values()) <= set(CHECKS), set(never_column().values()) - set(CHECKS)


def test_each_layer_keeps_to_its_never_does_column():
    never = never_column()
    problems = []
    for layer, entries in layer_table():
        check = CHECKS[never[layer]]
        if check is None:
            continue
        for path in files_of(entries):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for problem in check(path, tree):
                problems.append(
                    f"{path.relative_to(PACKAGE_DIR.parent)} ({layer}: never {never[layer]}): {problem}"
                )
    assert problems == [], "\n".join(problems)


def test_the_checks_find_what_they_forbid():
    """Each check, on a small module that breaks it, says so (a check that finds nothing is no check)."""
    samples = {
        no_io_torch_or_randomness: "import torch\nx = np.random.rand(3)\nopen('f')\n",
        no_runs_db_writes: "from ccpo_cli.store import open_db\n",
        no_statistics_or_network: "import huggingface_hub\nfrom ccpo_cli.stats import iqm\nsocket.create_connection(1)\n",
        no_printing: "print('hi')\n",
        no_command_line_parsing: "import argparse\n",
        no_training: "import torch.optim\nloss.backward()\n",
        no_computation: "import numpy as np\n",
    }
    for check, source in samples.items():
        assert check(Path("sample.py"), ast.parse(source)), check.__name__
    assert no_io_torch_or_randomness(Path("x.py"), ast.parse("np.random.default_rng(3)\n")) == []
    assert re.search(
        "seed",
        " ".join(no_io_torch_or_randomness(Path("x.py"), ast.parse("np.random.default_rng()\n"))),
    )
