"""ccpo owns fenced regions of a README, never the whole file.

A rendered card wraps each generated section in `<!-- ccpo:begin NAME -->` ...
`<!-- ccpo:end NAME -->`. When the README on the Hub was edited by hand, `merge_into_remote`
replaces only those regions (and the YAML keys ccpo manages) and keeps every other line as the
person left it.
"""

from __future__ import annotations

import re

import yaml
from huggingface_hub import ModelCard

from ccpo_cli.cards.lint import ALLOWED_KEYS, FROM_SCRATCH_TAG, TOO_FEW_TAG
from ccpo_cli.errors import InvalidInput
from ccpo_cli.vocabulary import INTERIM

REGION = re.compile(
    r"<!-- ccpo:begin (?P<name>[a-z0-9-]+) -->\n?(?P<body>.*?)<!-- ccpo:end (?P=name) -->",
    re.DOTALL,
)
FRONT_MATTER = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n", re.DOTALL)
# Tags that state how a run stands when its card is rendered (interim; too few evaluations for a
# result; no base model): a later card that no longer says so must drop them, or the merged card
# would claim both (a too-few-evaluations tag beside a model-index fails the lint).
TRANSIENT_TAGS = (INTERIM, TOO_FEW_TAG, FROM_SCRATCH_TAG)
# The YAML keys ccpo writes. A card that leaves one out says it does not apply (no model-index
# while evaluations are too few, no base_model for a policy trained from scratch), so the merged
# card drops it; keys ccpo never writes (a thumbnail added on the website) are kept.
MANAGED_KEYS = frozenset(ALLOWED_KEYS - {"tags"})


def regions(text: str) -> dict[str, str]:
    """Region name -> the whole fenced block (markers included), in document order."""
    return {match.group("name"): match.group(0) for match in REGION.finditer(text)}


def has_regions(text: str) -> bool:
    return REGION.search(text) is not None


def _merge_body(remote_body: str, new_body: str) -> str:
    new_regions = regions(new_body)
    seen: set[str] = set()

    def replace(match: re.Match) -> str:
        name = match.group("name")
        seen.add(name)
        return new_regions.get(name, "")

    merged = REGION.sub(replace, remote_body)
    # Regions this version renders that the remote README lacks go after their predecessor.
    order = list(new_regions)
    for index, name in enumerate(order):
        if name in seen:
            continue
        anchor = next(
            (regions(merged)[prev] for prev in reversed(order[:index]) if prev in regions(merged)),
            None,
        )
        if anchor is None:
            merged = merged.rstrip("\n") + "\n\n" + new_regions[name] + "\n"
        else:
            merged = merged.replace(anchor, anchor + "\n\n" + new_regions[name], 1)
        seen.add(name)
    return merged


def _written_metadata(text: str, card: ModelCard) -> dict:
    """The README's YAML header as its owner wrote it. huggingface_hub's card data rewrites some
    keys on the way in (0.3x turns `tags: my-tag` into its characters), so the header is read
    with YAML itself; a header YAML cannot read falls back to the card data."""
    header = FRONT_MATTER.match(text)
    if header is not None:
        try:
            document = yaml.safe_load(header.group(1))
        except yaml.YAMLError:
            document = None
        if isinstance(document, dict):
            return document
    return card.data.to_dict()


def _merge_metadata(remote: dict, new: dict) -> dict:
    # The remote card's key order, so a person's edit and ccpo's refresh diff line by line.
    merged = {
        key: new.get(key, value)
        for key, value in remote.items()
        if key not in MANAGED_KEYS or key in new
    }
    merged.update({key: value for key, value in new.items() if key != "tags"})
    new_tags = list(new.get("tags") or [])
    remote_tags = remote.get("tags") or []
    # YAML lets a person write one tag as a plain string; it is one tag, not its characters.
    remote_tags = [remote_tags] if isinstance(remote_tags, str) else list(remote_tags)
    kept = [tag for tag in remote_tags if tag not in new_tags and tag not in TRANSIENT_TAGS]
    merged["tags"] = new_tags + kept
    return merged


def merge_into_remote(remote_text: str, new_text: str) -> str:
    """The remote README with ccpo's regions and managed YAML keys brought up to date.

    Raises InvalidInput when the remote README has no ccpo region at all: it was not written
    by ccpo, and replacing it would destroy someone's card.
    """
    if not has_regions(remote_text):
        raise InvalidInput(
            "the README.md on the Hub has no ccpo regions (it was written by hand or by another tool); "
            "refusing to overwrite it. Delete it on the Hub or add the ccpo regions to it first"
        )
    remote_card = ModelCard(remote_text, ignore_metadata_errors=True)
    new_card = ModelCard(new_text)
    metadata = _merge_metadata(_written_metadata(remote_text, remote_card), new_card.data.to_dict())
    body = _merge_body(remote_card.text, new_card.text)
    header = yaml.safe_dump(metadata, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return f"---\n{header}---\n{body if body.startswith(chr(10)) else chr(10) + body}"
