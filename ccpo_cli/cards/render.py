"""Rendering a card context to README.md text through huggingface_hub's ModelCard template."""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ccpo_cli.cards.context import SUMMARY_PATH, CardContext
from ccpo_cli.errors import CcpoError
from ccpo_cli.paths import templates_dir

TEMPLATE_NAME = "ccpo_model_card.md"


def template_path() -> Path:
    path = templates_dir() / TEMPLATE_NAME
    if not path.is_file():
        raise CcpoError(f"the model-card template {path} is missing from this installation")
    return path


def card_data(context: CardContext) -> ModelCardData:
    """The YAML header: lineage, license, language, datasets, tags, and a model-index of window
    means (never the best point): the headline, then one per task type."""
    meta = context.metadata
    results = _eval_results(context)
    return ModelCardData(
        base_model=meta.get("base_model"),  # none for a policy trained from scratch
        base_model_relation=meta.get("base_model_relation"),
        library_name=meta["library_name"],
        pipeline_tag=meta["pipeline_tag"],
        license=meta["license"],
        tags=meta["tags"],
        metrics=["success_rate"],
        model_name=meta["model_name"],
        language=meta.get("language"),
        datasets=meta.get("datasets") or None,
        eval_results=results or None,  # none for a card with too few evaluations (lint.TOO_FEW_TAG)
    )


def _eval_results(context: CardContext) -> list[EvalResult]:
    """The model-index: the headline window mean first (readers take results[0]), then each task
    type over the same window; none without a headline or task types."""
    meta = context.metadata
    benchmark = meta["benchmark"]
    # The source link needs a Hub id; a card rendered for a bare run name carries no link.
    source_url = (
        f"https://huggingface.co/{context.repo_id}/blob/main/{SUMMARY_PATH}"
        if context.repo_id and "/" in context.repo_id
        else None
    )
    shared = dict(
        task_type=meta["pipeline_tag"],
        task_name=f"{benchmark['title'] if benchmark['known'] else 'Held-out'} success",
        dataset_type=benchmark["name"] or "not-recorded",
        dataset_name=benchmark["title"] if benchmark["known"] else "benchmark not recorded",
        dataset_split=meta.get("split"),
        source_name="ccpo" if source_url else None,
        source_url=source_url,
    )
    # The headline first (readers take results[0]), then each task type over the same window.
    results = (
        [
            EvalResult(
                metric_type="success_rate",
                metric_value=meta["headline_value"],
                metric_name=meta["headline_name"],
                **shared,
            )
        ]
        if meta["headline_value"] is not None
        else []
    )
    results += [
        EvalResult(
            metric_type=f"success_rate_{row['key']}",
            metric_value=row["value"],
            metric_name=row["name"],
            **shared,
        )
        for row in meta.get("task_type_results") or []
    ]
    return results


def collapse_blank_runs(text: str) -> str:
    """One blank line wherever the template's optional parts left several (code blocks untouched)."""
    kept: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if not fenced and not line.strip() and kept and not kept[-1].strip():
            continue
        kept.append(line)
    return "\n".join(kept)


def render_card(context: CardContext) -> str:
    """README.md text for the context (YAML header and Markdown body)."""
    card = ModelCard.from_template(
        card_data(context), template_path=str(template_path()), **context.template_vars
    )
    text = collapse_blank_runs(str(card))
    return text if text.endswith("\n") else text + "\n"
