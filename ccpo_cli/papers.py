"""The papers a card cites, from configs/papers.yaml: the methods an arm builds on, the
benchmarks, and the papers behind the published rows (docs/benchmarks.md, "Papers").

A paper is its arXiv identifier plus, when recorded, its title, authors and year; only a paper
with all three gets a BibTeX entry, so nothing is guessed. ccpo itself is cited as software,
with the installed version and the code URL its package metadata declares.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import yaml

from ccpo_cli.errors import InvalidInput
from ccpo_cli.paths import configs_dir

# libyaml's safe loader when PyYAML has it, as ccpo_cli/benchmarks.py.
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
# What `[project.urls]` in pyproject.toml may call the code's address, in order of preference.
_CODE_URL_NAMES = ("repository", "source", "code", "homepage")


@dataclass(frozen=True)
class Paper:
    key: str
    short: str
    arxiv: str
    title: str | None = None
    authors: tuple[str, ...] = ()
    year: int | None = None

    @property
    def url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv}"

    def bibtex(self) -> str | None:
        """A BibTeX entry (arXiv eprint form), or None when the title, authors or year are not recorded."""
        if not (self.title and self.authors and self.year):
            return None
        return (
            f"@misc{{{self.key}{self.year},\n  title = {{{self.title}}},\n"
            f"  author = {{{' and '.join(self.authors)}}},\n  year = {{{self.year}}},\n"
            f"  eprint = {{{self.arxiv}}},\n  archivePrefix = {{arXiv}},\n  url = {{{self.url}}}\n}}"
        )


@dataclass(frozen=True)
class Papers:
    papers: Mapping[str, Paper]
    methods: Mapping[
        str, tuple[str, ...]
    ]  # estimator family -> the keys of the papers it builds on
    software: Mapping[str, str]

    def paper(self, key: str) -> Paper:
        try:
            return self.papers[key]
        except KeyError:
            raise InvalidInput(f"configs/papers.yaml declares no paper {key!r}") from None

    def of_method(self, family: str) -> list[Paper]:
        return [self.paper(key) for key in self.methods.get(family, ())]


def _paper(key: str, entry: Any) -> Paper:
    where = f"configs/papers.yaml: papers.{key}"
    if not isinstance(entry, Mapping) or not entry.get("arxiv") or not entry.get("short"):
        raise InvalidInput(f"{where}: needs at least 'short' and 'arxiv'")
    authors = entry.get("authors") or ()
    if not isinstance(authors, list | tuple):
        raise InvalidInput(f"{where}: 'authors' is a list")
    year = entry.get("year")
    return Paper(
        key=key,
        short=str(entry["short"]),
        arxiv=str(entry["arxiv"]),
        title=str(entry["title"]) if entry.get("title") else None,
        authors=tuple(str(author) for author in authors),
        year=int(year) if year else None,
    )


@cache
def load_papers() -> Papers:
    path = configs_dir() / "papers.yaml"
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise InvalidInput(f"{path}: cannot read the papers ({error.__class__.__name__})") from None
    if not isinstance(document, Mapping):
        raise InvalidInput(f"{path}: expected a mapping (papers, methods, software)")
    papers = {
        str(key): _paper(str(key), entry) for key, entry in (document.get("papers") or {}).items()
    }
    methods = {
        str(family): tuple(str(key) for key in keys)
        for family, keys in (document.get("methods") or {}).items()
    }
    for family, keys in methods.items():
        for key in keys:
            if key not in papers:
                raise InvalidInput(
                    f"{path}: methods.{family} names {key!r}, which is not under 'papers'"
                )
    software = {str(key): str(value) for key, value in (document.get("software") or {}).items()}
    return Papers(papers=papers, methods=methods, software=software)


def code_url() -> str | None:
    """The code's address as the installed ccpo declares it (pyproject.toml `[project.urls]`)."""
    # Imported here: importlib.metadata is slow to import, and benchmarks load this module on
    # every start-up (docs/architecture.md §5); only a card asks for the URL.
    from importlib import metadata

    try:
        declared = metadata.metadata("ccpo").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    urls = {}
    for entry in declared:
        name, _, url = entry.partition(",")
        urls[name.strip().lower()] = url.strip()
    return next((urls[name] for name in _CODE_URL_NAMES if urls.get(name)), None)


def software_bibtex(version: str, url: str | None) -> str:
    """ccpo's own entry: a @software citation of the version that rendered the card."""
    software = load_papers().software
    lines = [
        f"@software{{{software.get('key', 'ccpo')},",
        f"  title = {{{software.get('title', 'ccpo')}}},",
        f"  author = {{{software.get('author', 'ccpo contributors')}}},",
        f"  version = {{{version}}}",
    ]
    if url:
        lines[-1] += ","
        lines.append(f"  url = {{{url}}}")
    return "\n".join(lines) + "\n}"


__all__ = ["Paper", "Papers", "code_url", "load_papers", "software_bibtex"]
