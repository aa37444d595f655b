"""Offline checks a rendered card must pass before anything is written to the Hub."""

from __future__ import annotations

import re

from huggingface_hub import ModelCard, ModelCardData

from ccpo_cli.errors import InvalidInput

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# Keys ccpo writes; anything else in a card it rendered means the template drifted.
ALLOWED_KEYS = {
    "base_model",
    "base_model_relation",
    "library_name",
    "pipeline_tag",
    "license",
    "tags",
    "metrics",
    "model-index",
    "model_name",
    "language",
    "datasets",
    "license_name",
    "license_link",
}
REQUIRED_KEYS = (
    "base_model",
    "base_model_relation",
    "library_name",
    "pipeline_tag",
    "license",
    "model-index",
)
# A policy trained from scratch (the local CPU backend) has no base model. Its card says so with
# this tag and then must carry neither `base_model` nor `base_model_relation`.
FROM_SCRATCH_TAG = "trained-from-scratch"
# A card whose window holds too few evaluations for a window mean (report/window.py) reports the
# evaluations it has and claims no result: it says so with this tag and carries no model-index.
TOO_FEW_TAG = "too-few-evaluations"
LINEAGE_KEYS = ("base_model", "base_model_relation")
# What an unfilled template leaves behind: Jinja markers, the Hub template's filler, a value
# Jinja printed as None (a whole table cell, `key: None`, `(None)`), and TODO markers. A name
# that merely contains "None" or "TODO" (`me/None-model`, `TODO-list-agent`) is not one.
PLACEHOLDERS = (
    re.compile(r"\{\{.*?\}\}"),
    re.compile(r"\{%.*?%\}"),
    re.compile(r"\[More Information Needed\]", re.IGNORECASE),
    re.compile(r"(?:^|\|)[ \t*_`]*(?:None|TODO)[ \t*_`]*(?=\||$)"),
    re.compile(r"(?:[:=]|\bis|\bwas)[ \t]+[*_`]*None[*_`]*(?=[ \t]*(?:[,;.)|]|$))"),
    re.compile(r"\(None\)|\[(?:None|TODO)\]|<(?:None|TODO)>"),
    re.compile(r"\bTODO(?=[:(])"),
)
LOCAL_PATH = re.compile(
    r"(?<![\w:/.])(/(home|Users|tmp|root|mnt|data|scratch|var|opt|work)/\S*|~/\S+|[A-Za-z]:\\\S+)"
)


# Phrases that point at a table: "above" ones at the arms table, "below" ones at any table after
# them. A card that says either without the table it means sends the reader to nothing.
ABOVE_ARMS = re.compile(r"\b(?:the arms above|the table above|shown above)\b", re.IGNORECASE)
BELOW = re.compile(
    r"\b(?:results below|the full set is below|listed below|rows below)\b", re.IGNORECASE
)
ARMS_HEADING = "## The arms side by side"


def _outside_code(lines: list[str]) -> list[tuple[int, str]]:
    """(line number, line) of the body lines outside fenced code blocks."""
    kept, fenced = [], False
    for number, line in enumerate(lines, start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            kept.append((number, line))
    return kept


def _sections(lines: list[tuple[int, str]]) -> dict[str, list[tuple[int, str]]]:
    sections: dict[str, list[tuple[int, str]]] = {}
    current = ""
    for number, line in lines:
        if line.startswith("## "):
            current = line.strip()
        sections.setdefault(current, []).append((number, line))
    return sections


def layout_problems(body: str) -> list[str]:
    """Blank-line runs, empty table cells, and references to tables that are not there."""
    problems = []
    lines = _outside_code(body.splitlines())
    previous_blank = None
    for number, line in lines:
        blank = not line.strip()
        if blank and previous_blank is not None and previous_blank == number - 1:
            problems.append(f"body line {number}: a run of blank lines")
        previous_blank = number if blank else None
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|") and not set(stripped) <= set("|-: "):
            cells = [cell.strip() for cell in stripped[1:-1].split("|")]
            if any(cell == "" for cell in cells):
                problems.append(
                    f"body line {number}: an empty table cell (state why the value is missing)"
                )
    sections = _sections(lines)
    arms_table = any(line.strip().startswith("|") for _, line in sections.get(ARMS_HEADING, []))
    table_lines = [number for number, line in lines if line.strip().startswith("|")]
    for number, line in lines:
        if ABOVE_ARMS.search(line) and not arms_table:
            problems.append(
                f"body line {number}: refers to a table of arms above, and there is none"
            )
        if BELOW.search(line) and not any(table > number for table in table_lines):
            problems.append(f"body line {number}: refers to a table below, and there is none")
    return problems


def lint_card(text: str, *, allow_extra_keys: bool = False) -> list[str]:
    """Problems found in a card, one line each (empty when it is fit to publish)."""
    problems: list[str] = []
    try:
        card = ModelCard(text, ignore_metadata_errors=False)
    except Exception as error:  # the parser raises several types for a broken header
        return [f"the card does not parse: {error}"]
    metadata = card.data.to_dict()
    from_scratch = FROM_SCRATCH_TAG in (metadata.get("tags") or [])
    too_few = TOO_FEW_TAG in (metadata.get("tags") or [])
    for key in REQUIRED_KEYS:
        if too_few and key == "model-index":
            if metadata.get(key):
                problems.append(
                    f"metadata: a card tagged {TOO_FEW_TAG} claims no result, so it has no model-index"
                )
        elif from_scratch and key in LINEAGE_KEYS:
            if metadata.get(key):
                problems.append(
                    f"metadata: {key} is set on a card tagged {FROM_SCRATCH_TAG} (no base model)"
                )
        elif not metadata.get(key):
            problems.append(f"metadata: {key} is missing")
    if not allow_extra_keys:
        for key in sorted(set(metadata) - ALLOWED_KEYS):
            problems.append(f"metadata: unexpected key {key!r}")
    base_model = metadata.get("base_model")
    for model in base_model if isinstance(base_model, list) else [base_model]:
        if model and not HUB_ID.match(str(model)):
            problems.append(f"metadata: base_model {model!r} is not a Hub id (owner/name)")
    # A ModelCard's data is ModelCardData; huggingface_hub types it as the base CardData.
    assert isinstance(card.data, ModelCardData)
    results = card.data.eval_results or []
    if not results and not too_few:
        problems.append("metadata: model-index has no result")
    for number, line in enumerate(card.text.splitlines(), start=1):
        for pattern in PLACEHOLDERS:
            found = pattern.search(line)
            if found:
                problems.append(f"body line {number}: unfilled placeholder {found.group(0)!r}")
        found = LOCAL_PATH.search(line)
        if found:
            problems.append(f"body line {number}: local path {found.group(0)!r}")
    problems.extend(layout_problems(card.text))
    return problems


def require_clean(text: str, where: str = "card") -> None:
    problems = lint_card(text)
    if problems:
        raise InvalidInput(f"{where} failed the offline lint: " + "; ".join(problems))
