"""Published numbers a card may cite, and whether each is comparable to a run.

The numbers live with their benchmark, in configs/benchmarks/<name>.yaml (with their sources,
read by ccpo_cli/benchmarks.py); base-model licenses in configs/published_baselines.yaml. This
module only reads them and decides comparability: a published row is shown only for the run's
own benchmark, and is comparable only when it was measured on the same backbone *and* under the
same protocol as the run. Everything else is printed as not comparable, with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from ccpo_cli.benchmarks import PublishedBaseline, all_benchmarks
from ccpo_cli.errors import InvalidInput
from ccpo_cli.paths import configs_dir

BASELINES_FILE = "published_baselines.yaml"

__all__ = [
    "BaselineData",
    "PublishedBaseline",
    "inherited_license",
    "load_baseline_data",
    "published_comparison",
]


@dataclass(frozen=True)
class BaselineData:
    baselines: tuple[PublishedBaseline, ...]  # every benchmark's, each row naming its benchmark
    protocols: dict[tuple[str, str], str]  # (benchmark, protocol id) -> one-line description
    base_model_licenses: dict[str, str]


@lru_cache(maxsize=4)
def load_baseline_data(path: Path | None = None) -> BaselineData:
    """Every benchmark's published rows and protocols, and the base-model licenses (from the
    shipped licenses file unless `path` is given)."""
    path = path or configs_dir() / BASELINES_FILE
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise InvalidInput(f"{path}: cannot read base-model licenses ({error})") from None
    benchmarks = all_benchmarks()
    rows = tuple(row for benchmark in benchmarks for row in benchmark.published_baselines)
    protocols = {
        (benchmark.name, key): text
        for benchmark in benchmarks
        for key, text in benchmark.protocols.items()
    }
    licenses = {str(k): str(v) for k, v in (document.get("base_model_licenses") or {}).items()}
    return BaselineData(rows, protocols, licenses)


def inherited_license(base_model: str | None, data: BaselineData | None = None) -> str | None:
    """The license the base model's own card records, if the baselines file knows it."""
    if not base_model:
        return None
    data = data or load_baseline_data()
    return data.base_model_licenses.get(base_model)


def _short_backbone(backbone: str) -> str:
    return backbone.split("/")[-1]


def published_comparison(
    base_model: str | None,
    protocol: str | None,
    data: BaselineData | None = None,
    *,
    benchmark: str | None,
    from_scratch: bool = False,
) -> dict:
    """The card's published-results block for a run of `benchmark`: that benchmark's rows with
    a comparability verdict, and the prose groups of rows that are not comparable (by source
    and backbone, with the reason). A run whose benchmark is not recorded (None) is compared
    with nothing: no benchmark's numbers are shown beside it.

    A policy trained from scratch (the local CPU backend) is compared with none of them: the
    published rows are language models fine-tuned under the papers' protocols."""
    data = data or load_baseline_data()
    # Prose groups of incomparable rows, by source and setting.
    groups: dict[Any, dict[str, Any]] = {}
    rows, comparable, sources = [], [], []
    for baseline in data.baselines:
        if not baseline.on_card or baseline.benchmark != benchmark:
            continue
        unlike = _incomparable(baseline, base_model, protocol, from_scratch, data)
        if unlike is None:
            verdict = "yes"
            comparable.append(f"{baseline.method} {baseline.success:g} ({baseline.source})")
        else:
            verdict, reason = unlike
            group = groups.setdefault(
                (baseline.source, baseline.backbone),
                {
                    "source": baseline.source,
                    "backbone": _short_backbone(baseline.backbone),
                    "reason": reason,
                    "numbers": [],
                },
            )
            group["numbers"].append(f"{baseline.method} {baseline.success:g}")
        if baseline.source not in sources:
            sources.append(baseline.source)
        rows.append(_row(baseline, verdict))
    incomparable = [dict(group, numbers=", ".join(group["numbers"])) for group in groups.values()]
    return {
        "rows": rows,
        "incomparable": incomparable,
        "comparable": "; ".join(comparable),
        "sources": sources,
    }


def _row(baseline: PublishedBaseline, verdict: str) -> dict[str, Any]:
    """One published row as the card's table shows it, with its comparability verdict."""
    return {
        "method": baseline.method,
        "backbone": _short_backbone(baseline.backbone),
        "success": f"{baseline.success:g}",
        "source": baseline.source,
        "comparable": verdict,
        "protocol": baseline.protocol,
        "benchmark": baseline.benchmark,
        "score": None if baseline.score is None else f"{baseline.score:g}",
        "paper": baseline.paper,
    }


def _incomparable(
    baseline: PublishedBaseline,
    base_model: str | None,
    protocol: str | None,
    from_scratch: bool,
    data: BaselineData,
) -> tuple[str, str] | None:
    """Why a published row is not comparable with the run (its verdict, and the reason the prose
    gives), or None when it is: the same backbone under the same protocol."""
    same_backbone = not from_scratch and baseline.backbone == base_model
    if same_backbone and protocol is not None and baseline.protocol == protocol:
        return None
    if from_scratch:
        return "no: different model and protocol", (
            "a fine-tuned language model under that paper's protocol, while this run is a small "
            "policy trained from scratch on CPU under ccpo's local protocol"
        )
    if not same_backbone:
        # None only from scratch (card_license refuses any other run without one).
        assert base_model is not None
        return (
            "no: different backbone",
            f"a different backbone from this run's {_short_backbone(base_model)}",
        )
    description = data.protocols.get((baseline.benchmark, baseline.protocol), baseline.protocol)
    return "no: different protocol", (
        f"the same backbone, but a different protocol ({description})"
        if protocol is not None
        else f"the same backbone, but this run records no protocol to match ({description})"
    )
