"""Offline checks a rendered card must pass before anything is written to the Hub."""

from __future__ import annotations

import re

from huggingface_hub import ModelCard

from ccpo_cli.errors import InvalidInput

HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
# Keys ccpo writes; anything else in a card it rendered means the template drifted.
ALLOWED_KEYS = {
    "base_model", "base_model_relation", "library_name", "pipeline_tag", "license", "tags",
    "metrics", "model-index", "model_name", "language", "datasets", "license_name", "license_link",
}
REQUIRED_KEYS = ("base_model", "base_model_relation", "library_name", "pipeline_tag", "license", "model-index")
# A policy trained from scratch (the local CPU backend) has no base model. Its card says so with
# this tag and then must carry neither `base_model` nor `base_model_relation`.
FROM_SCRATCH_TAG = "trained-from-scratch"
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
LOCAL_PATH = re.compile(r"(?<![\w:/.])(/(home|Users|tmp|root|mnt|data|scratch|var|opt|work)/\S*|~/\S+|[A-Za-z]:\\\S+)")


def lint_card(text: str, *, allow_extra_keys: bool = False) -> list[str]:
    """Problems found in a card, one line each (empty when it is fit to publish)."""
    problems: list[str] = []
    try:
        card = ModelCard(text, ignore_metadata_errors=False)
    except Exception as error:  # the parser raises several types for a broken header
        return [f"the card does not parse: {error}"]
    metadata = card.data.to_dict()
    from_scratch = FROM_SCRATCH_TAG in (metadata.get("tags") or [])
    for key in REQUIRED_KEYS:
        if from_scratch and key in LINEAGE_KEYS:
            if metadata.get(key):
                problems.append(f"metadata: {key} is set on a card tagged {FROM_SCRATCH_TAG} (no base model)")
        elif not metadata.get(key):
            problems.append(f"metadata: {key} is missing")
    if not allow_extra_keys:
        for key in sorted(set(metadata) - ALLOWED_KEYS):
            problems.append(f"metadata: unexpected key {key!r}")
    base_model = metadata.get("base_model")
    for model in base_model if isinstance(base_model, list) else [base_model]:
        if model and not HUB_ID.match(str(model)):
            problems.append(f"metadata: base_model {model!r} is not a Hub id (owner/name)")
    results = card.data.eval_results or []
    if not results:
        problems.append("metadata: model-index has no result")
    for number, line in enumerate(card.text.splitlines(), start=1):
        for pattern in PLACEHOLDERS:
            found = pattern.search(line)
            if found:
                problems.append(f"body line {number}: unfilled placeholder {found.group(0)!r}")
        found = LOCAL_PATH.search(line)
        if found:
            problems.append(f"body line {number}: local path {found.group(0)!r}")
    return problems


def require_clean(text: str, where: str = "card") -> None:
    problems = lint_card(text)
    if problems:
        raise InvalidInput(f"{where} failed the offline lint: " + "; ".join(problems))
