"""The repository is self-contained: code cites pages under docs/ that exist, section numbers that
exist on them, and nothing outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = [
    path
    for folder in ("ccpo_cli", "scripts", "tests", "configs", "templates", "examples")
    for path in sorted((REPO / folder).rglob("*"))
    if path.is_file() and path.suffix in {".py", ".sh", ".yaml", ".yml", ".md", ".j2"}
]
CITATION = re.compile(r"docs/([a-z0-9-]+\.md)((?:[ ,]+(?:and )?§\d+(?:\.\d+)?)*)")
SECTION = re.compile(r"§(\d+(?:\.\d+)?)")


def _sections(page: Path) -> set[str]:
    """Section numbers of a page: '## 5. Title' gives '5', '### 5.2 Title' gives '5.2'."""
    numbers = set()
    for line in page.read_text().splitlines():
        match = re.match(r"#{2,4} (\d+(?:\.\d+)?)\.? ", line)
        if match:
            numbers.add(match.group(1))
    return numbers


def _citations():
    for path in SOURCES:
        if path == Path(__file__).resolve():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for match in CITATION.finditer(line):
                yield path, number, match.group(1), SECTION.findall(match.group(2))


def test_code_cites_existing_docs_pages_and_sections():
    problems = []
    cited_pages = set()
    for path, number, page_name, sections in _citations():
        page = REPO / "docs" / page_name
        cited_pages.add(page_name)
        where = f"{path.relative_to(REPO)}:{number}"
        if not page.is_file():
            # docs/cli.md is generated (scripts/gen_cli_docs.py); every other page is written.
            if page_name != "cli.md":
                problems.append(f"{where}: docs/{page_name} does not exist")
            continue
        missing = [s for s in sections if s not in _sections(page)]
        if missing:
            problems.append(f"{where}: docs/{page_name} has no section {', '.join(missing)}")
    assert not problems, "\n".join(problems)
    assert "estimators.md" in cited_pages  # the estimator modules cite their sections


def test_every_estimator_module_cites_its_section():
    uncited = []
    for path in sorted((REPO / "ccpo_cli" / "estimators").glob("*.py")):
        if path.name in ("__init__.py", "blas.py", "compute.py", "layout.py", "batch.py"):
            continue  # the entry point, the package and the plumbing implement no single section
        head = path.read_text()[:400]
        if not re.search(r"docs/estimators\.md\s+§\d", head):
            uncited.append(path.name)
    assert not uncited, f"estimator modules without a docs/estimators.md section: {uncited}"


def test_the_module_map_lists_every_estimator_module():
    page = (REPO / "docs" / "estimators.md").read_text()
    module_map = page.split("## 12. Module map", 1)[1]
    listed = set(re.findall(r"`estimators/(\w+\.py)`", module_map))
    shipped = {path.name for path in (REPO / "ccpo_cli" / "estimators").glob("*.py")} - {
        "__init__.py"
    }
    assert shipped - listed == set(), (
        f"docs/estimators.md §12 does not list {sorted(shipped - listed)}"
    )
    assert listed - shipped == set(), (
        f"docs/estimators.md §12 lists modules that do not exist: {sorted(listed - shipped)}"
    )


def test_nothing_cites_material_outside_the_repository():
    outside = re.compile(r"\.\./shared/|research/[a-z-]+\.md|estimator-spec\.md|(?<![\w/])CLI\.md")
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in SOURCES
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, "\n".join(hits)
