"""Everything a model card says, computed from runs.db.

`build_card_context` reads the run, takes the comparison with the runs that pass the isolation
check against it (`cards.selection`), and assembles the template variables (all numbers
preformatted), the YAML metadata and the summary document committed next to the card. The
setup table lives in `cards.setup`, the caveats in `cards.caveats`, the protocol, noise and
evidence digest in `cards.evidence`.

One concern, kept in one file past 400 lines: the card's three outputs (template variables,
YAML metadata, the summary JSON) are computed here from one `_Facts`, so that they cannot
disagree; the setup table, caveats, evidence and selection live in their own modules.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlite_utils

from ccpo_cli import __version__, store
from ccpo_cli.cards.baselines import load_baseline_data, published_comparison
from ccpo_cli.cards.caveats import conflict_lines, correction_lines, fmt, window_steps_note
from ccpo_cli.cards.claims import CardClaims, StatusClaim, claims_of, status_claim
from ccpo_cli.cards.evidence import (
    evaluation_protocol,
    evidence_hash,
    named_checkpoint,
    single_evaluation_noise,
)
from ccpo_cli.cards.guards import (
    PROJECT_LICENSE,
    STATUSES,
    card_license,
    check_headline,
)
from ccpo_cli.cards.lint import FROM_SCRATCH_TAG, TOO_FEW_TAG
from ccpo_cli.cards.method import (
    EXTERNAL,
    EXTERNAL_INERT,
    METHOD_NAMES,
    METHOD_PARAGRAPHS,
    METHOD_SHORT_NAMES,
    describe_arm,
    distinguishing_flags,
    estimator_family,
    external_method,
    format_flag_value,
    is_external,
    padding_rule,
)
from ccpo_cli.cards.selection import (
    ResolvedArm,
    card_identity,
    config_of,
    isolated_comparison,
    resolve_arm,
    trained_from_scratch,
)
from ccpo_cli.cards.setup import config_yaml, panel_game_ids, setup_rows
from ccpo_cli.errors import InvalidInput
from ccpo_cli.papers import code_url, load_papers, software_bibtex
from ccpo_cli.report.arm_summary import MIN_SEEDS_RESOLVED
from ccpo_cli.report.comparison import Comparison, RunEntry
from ccpo_cli.report.window import BestPoint, task_type_keys
from ccpo_cli.store.identity import FLAGS_RECORDED, FLAGS_STATED, RunIdentity
from ccpo_cli.vocabulary import INTERIM

SUMMARY_PATH = "results/ccpo_summary.json"
HEADLINE_NAME = "Held-out success (%), window mean"
PLOT_PATH = "results/learning_curve.png"
BASE_TAGS = ("ccpo", "reinforcement-learning", "verl-agent")
LOCAL_TAGS = ("ccpo", "reinforcement-learning", "ccpo-local", FROM_SCRATCH_TAG)

__all__ = ["PLOT_PATH", "STATUSES", "SUMMARY_PATH", "CardContext", "build_card_context"]


@dataclass
class CardContext:
    """What `render_card` needs: template variables, YAML metadata, and the summary JSON."""

    run: str
    status: str
    repo_id: str | None  # the Hub repository the card is published to; None for a local card
    template_vars: dict[str, Any]
    metadata: dict[str, Any]
    summary: dict[str, Any]
    comparison: Comparison  # the comparison the card states (the plot draws it)
    claims: CardClaims  # every fact the card states (cards/claims.py)


@dataclass
class _Facts:
    """What the context is assembled from (one place, so the three outputs agree)."""

    decided_status: StatusClaim
    identity: RunIdentity
    identities: dict[str, RunIdentity]
    run_row: dict
    status: str
    comparison: Comparison
    excluded: dict[str, list[str]]
    this: RunEntry
    last_step: int | None
    total_steps: int | None
    from_scratch: bool
    license: str
    protocol: dict
    noise: dict
    this_arm: ResolvedArm
    resolved: dict[str, ResolvedArm]
    runs_by_name: dict[str, dict]
    checkpoint_step: int | None
    repo_id: str | None
    evidence: str
    headline: bool  # the window holds enough evaluations for a window mean (else the card says so)


def _rate_of(value: Any) -> float | None:
    """A per-type entry of the comparison document is a rate or {"success": rate, ...}."""
    if isinstance(value, Mapping):
        value = value.get("success")
    return None if value is None else float(value)


def _entry_for(comparison: Comparison, run: str) -> RunEntry:
    entry = comparison.find_run(run)
    if entry is None:
        raise InvalidInput(f"run {run!r} is missing from the comparison")
    return entry


def _gather(
    db, run, status, repo_id, window_start, license, checkpoint_step, sending=False
) -> _Facts:
    identity, identities = card_identity(db, run)
    assert identity.arm is not None  # card_identity refuses a run that records no arm
    run_row = store.get_run(db, identity.run)
    name = identity.run
    comparison, excluded = isolated_comparison(db, name, window_start, identities=identities)
    this = _entry_for(comparison, name)
    total_steps = max(this.total_steps_recorded) if this.total_steps_recorded else None
    last_step = this.last_step if this.last_step is not None else run_row.get("last_step")
    status_decided = status_claim(name, this, status)
    status = status_decided.status
    from_scratch = trained_from_scratch(identity)
    license = card_license(run_row, license, from_scratch)
    window = this.window
    headline = check_headline(name, window, len(this.evaluations))
    protocol = evaluation_protocol(identity.protocol, window)
    noise = single_evaluation_noise(this.single_eval_interval, identity.protocol)
    runs_by_name = {row["name"]: row for row in store.list_runs(db)}
    # Each unit's arm as its runs recorded it (the typed identity, never rebuilt from keys).
    resolved = {arm.name: resolve_arm(arm.arm, arm.name) for arm in comparison.arms if arm.arm}
    best_step = this.best.step if this.best else None
    wanted = best_step if status == INTERIM and this.run_state != "stopped-early" else last_step
    return _Facts(
        decided_status=status_decided,
        identity=identity,
        identities=identities,
        run_row=run_row,
        status=status,
        comparison=comparison,
        excluded=excluded,
        this=this,
        last_step=last_step,
        total_steps=total_steps,
        from_scratch=from_scratch,
        license=license,
        protocol=protocol,
        noise=noise,
        this_arm=resolve_arm(identity.arm, this.arm_label),
        resolved=resolved,
        runs_by_name=runs_by_name,
        checkpoint_step=named_checkpoint(db, name, wanted, checkpoint_step, repo_id, sending),
        repo_id=repo_id,
        evidence=evidence_hash(db, [entry.run for entry in comparison.runs]),
        headline=headline,
    )


def _repo_name(repo_id: str | None, run: str) -> str:
    return repo_id.split("/")[-1] if repo_id else run


def _arm_tag(arm: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", arm.lower()).strip("-")


def _arm_vars(facts: _Facts) -> dict[str, Any]:
    arm = facts.this_arm
    others = [
        other.flags
        for label, other in facts.resolved.items()
        if label != arm.unit_label and other.flags
    ]
    # A flag inert in this arm cannot change its advantages, so it distinguishes nothing (docs/estimators.md).
    differing = distinguishing_flags(arm.flags, others) if others and arm.flags else []
    distinguishing = [(name, value) for name, value in differing if name not in arm.inert]
    inert_differences = [(name, value) for name, value in differing if name in arm.inert]
    return {
        "name": arm.name,
        "label": arm.unit_label,
        "description": describe_arm(arm.name, arm.flags) if arm.flags else "",
        "distinguishing": ", ".join(f"`{name}={value}`" for name, value in distinguishing),
        "inert_differences": ", ".join(f"`{name}={value}`" for name, value in inert_differences),
        "compared": bool(others),
        "overrides": ", ".join(
            f"`{name}={format_flag_value(value)}`" for name, value in sorted(arm.overrides.items())
        ),
        "flags": [
            {
                "name": name,
                "value": format_flag_value(value),
                "inert": EXTERNAL_INERT
                if is_external(arm.name)
                else arm.inert.get(name, "live: can change the advantages"),
            }
            for name, value in arm.flags.items()
        ],
        "flags_known": bool(arm.flags),
        "contradictions": [
            f"`{flag} = {format_flag_value(printed)}` where ccpo's arm file `{arm.name}` says "
            f"`{format_flag_value(other)}`" + (" (inert in this arm)" if flag in arm.inert else "")
            for flag, (printed, other) in arm.contradictions.items()
        ],
        "recorded_fingerprint": arm.recorded_fingerprint or "",
        "flags_printed": arm.flags_source == FLAGS_STATED,
        "flags_source": "" if arm.flags_source == FLAGS_RECORDED else arm.flags_source,
        "fingerprint": arm.fingerprint or "not recorded",
        "padding": padding_rule(arm.flags, pads=not facts.from_scratch),
    }


def task_type_columns(identity: RunIdentity, best: BestPoint | None) -> list[tuple[str, str]]:
    """(key, column title) of the card's best row: the run's benchmark's own task types when it
    declares them (all of them, a missing one said to be not recorded), else those the run reports."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.errors import CcpoError

    try:
        declared = load_benchmark(identity.benchmark).task_types if identity.benchmark else ()
    except CcpoError:
        declared = ()
    if declared:
        return [(task.key, task.label) for task in declared]
    return [(key, key) for key in task_type_keys([{"task_types": best.task_types if best else {}}])]


def _best_vars(facts: _Facts) -> dict[str, Any]:
    best = facts.this.best
    if not best:
        return {"present": False}
    columns = task_type_columns(facts.identity, best)
    per_type = [_rate_of(best.task_types.get(key)) for key, _ in columns]
    first_with_turns = next(
        (point for point in facts.this.evaluations if point["mean_turns"] is not None), None
    )
    return {
        "present": True,
        "turns": fmt(best.mean_turns) if best.mean_turns is not None else "not recorded",
        "task_type_titles": [title for _, title in columns],
        "task_types": [fmt(value) if value is not None else "not recorded" for value in per_type],
        "train_success": fmt(best.train_success_rate)
        if best.train_success_rate is not None
        else "",
        "turns_start": fmt(first_with_turns["mean_turns"]) if first_with_turns else "",
        "turns_start_step": first_with_turns["step"] if first_with_turns else None,
    }


def _weights_vars(weights: Mapping[str, Any] | None) -> dict[str, Any]:
    """The published weights the card cites: the revision to load and the commit it points at."""
    if not weights or not weights.get("commit"):
        return {"known": False}
    commit = str(weights["commit"])
    return {
        "known": True,
        "commit": commit,
        "short": commit[:12],
        "revision": str(weights.get("revision") or commit),
    }


def benchmark_vars(identity: RunIdentity) -> dict[str, Any]:
    """What the card says of the run's benchmark, from its declaration (docs/benchmarks.md)."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.errors import CcpoError

    if identity.benchmark is None:
        return {
            "name": None,
            "title": "an unrecorded benchmark's",
            "known": False,
            "is_alfworld": False,
            "description": "",
            "prompt": "",
            "task_types": 0,
        }
    try:
        benchmark = load_benchmark(identity.benchmark)
    except CcpoError:
        return {
            "name": identity.benchmark,
            "title": identity.benchmark,
            "known": False,
            "is_alfworld": False,
            "description": "",
            "prompt": "",
            "task_types": 0,
        }
    return {
        "name": benchmark.name,
        "title": benchmark.display_name,
        "known": True,
        "is_alfworld": benchmark.name == "alfworld",
        "description": " ".join(benchmark.description.split()),
        "prompt": " ".join(benchmark.prompt_description.split()),
        "task_types": len(benchmark.task_types),
    }


def _template_vars(facts: _Facts, claims: CardClaims, published: dict) -> dict[str, Any]:
    """The words' inputs: the claims (which the template puts into words, deciding nothing), and
    the run's description (method, arm flags, setup, usage, citations)."""
    run_row, protocol = facts.run_row, facts.protocol
    family = estimator_family(facts.this_arm.name, facts.this_arm.flags)
    own = next((arm for arm in claims.arms if arm.this), None)
    return {
        "claims": claims,
        "fmt": fmt,
        "comparison_with": {claim.other_arm: claim for claim in claims.comparisons},
        "own_arm": own,
        "repo_id": facts.repo_id,
        "repo_name": _repo_name(facts.repo_id, facts.identity.run),
        "benchmark": benchmark_vars(facts.identity),
        "interim": claims.status.status == INTERIM,
        "checkpoint_step": facts.checkpoint_step,
        "base_model": run_row.get("base_model"),
        "from_scratch": facts.from_scratch,
        "license_is_project": facts.from_scratch and facts.license == PROJECT_LICENSE,
        "run_name": run_row["name"],
        "ccpo_version": __version__,
        "code_reference": f"commit {run_row['git_commit']}" if run_row.get("git_commit") else "",
        "method": _method_vars(facts.this_arm, family),
        "arm": _arm_vars(facts),
        "protocol": _protocol_vars(protocol),
        "conflicts": conflict_lines(facts.comparison),
        "corrections": correction_lines(facts.comparison),  # retractions and settled conflicts
        "best": _best_vars(facts),
        "noise": {
            "available": facts.noise["half_width"] is not None,
            "half_width": fmt(facts.noise["half_width"]),
            "method": facts.noise["method"],
        },
        "plot_path": PLOT_PATH,
        "summary_path": SUMMARY_PATH,
        "window_steps_note": window_steps_note(facts.comparison, claims.arms)
        if len(claims.arms) > 1
        else "",
        "seed_notes": "; ".join(facts.comparison.arm(own.arm).seed_notes) if own else "",
        "min_seeds_resolved": MIN_SEEDS_RESOLVED,
        "checkpoint_known": facts.checkpoint_step is not None,
        "setup": setup_rows(facts.identity, run_row, protocol, facts.this.facts),
        "config_yaml": config_yaml(run_row, SUMMARY_PATH),
        "db_hash": facts.evidence,
        "citations": citation_vars(family, facts.identity.benchmark, published),
        "code_url": code_url() or "",
        "framework_versions": framework_versions(run_row),
        "headline_name": HEADLINE_NAME,
        "too_few": too_few_vars(facts),
    }


def _method_vars(arm: ResolvedArm, family: str) -> dict[str, Any]:
    """The method the card describes: an external estimator's own words, else ccpo's family's."""
    if family == EXTERNAL or is_external(arm.name):
        return external_method(arm.name, arm.flags)
    return {
        "family": family,
        "name": METHOD_NAMES[family],
        "short": METHOD_SHORT_NAMES[family],
        "paragraph": METHOD_PARAGRAPHS[family],
    }


def _protocol_vars(protocol: Mapping[str, Any]) -> dict[str, Any]:
    """The evaluation protocol as the card words it (an unrecorded episode count said so)."""
    return {
        "episodes": protocol["episodes"] if protocol["episodes"] else "an unrecorded number of",
        "episodes_known": bool(protocol["episodes"]),
        "episodes_basis": protocol["episodes_basis"],
        "pooled_episodes": protocol["pooled_episodes"],
        "episodes_uncertain": protocol["episodes_uncertain"],
        "split": protocol["split"],
        "split_assumed": protocol.get("split_assumed"),
        "temperature": protocol["temperature"],
        "mixed": protocol["mixed"],
        "left_out": protocol["left_out"],
    }


def too_few_vars(facts: _Facts) -> dict[str, Any]:
    """A card whose window holds too few evaluations for a window mean: why, and every evaluation
    the run has (the card reports them instead of a headline)."""
    if facts.headline:
        return {"present": False}
    window = facts.this.window
    return {
        "present": True,
        "note": window.headline_note or f"no evaluation at step >= {window.start}",
        "rows": [
            {
                "step": point["step"],
                "success": fmt(point["success"]),
                "episodes": point["episodes"] or "not recorded",
                "in_window": "yes" if point["step"] >= window.start else "no",
            }
            for point in facts.this.evaluations
        ],
    }


def citation_vars(
    family: str, benchmark: str | None, published: Mapping[str, Any]
) -> dict[str, Any]:
    """The papers the card cites (configs/papers.yaml): the method's, the benchmark's and those of
    the published rows it quotes, each with its arXiv link; BibTeX for those whose authors and title
    are recorded, and ccpo's own entry."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.errors import CcpoError

    papers = load_papers()
    keys = [paper.key for paper in papers.of_method(family)]
    try:
        declared = load_benchmark(benchmark) if benchmark else None
    except CcpoError:
        declared = None
    if declared is not None and declared.paper:
        keys.append(declared.paper)
    keys += [row["paper"] for row in published.get("rows") or [] if row.get("paper")]
    cited = [papers.paper(key) for key in dict.fromkeys(keys)]
    return {
        "papers": [
            {"short": paper.short, "arxiv": paper.arxiv, "url": paper.url} for paper in cited
        ],
        "bibtex": [entry for paper in cited if (entry := paper.bibtex())]
        + [software_bibtex(__version__, code_url())],
    }


def framework_versions(run_row: Mapping[str, Any]) -> list[dict[str, str]]:
    """The packages the run recorded it trained with (the local trainer records them; an ingested
    log usually does not), and what rendered the card."""
    recorded = run_row.get("package_versions")
    if isinstance(recorded, str):
        import json

        try:
            recorded = json.loads(recorded)
        except ValueError:
            recorded = None
    rows = [
        {"name": str(name), "version": str(version), "role": "recorded by the run"}
        for name, version in (recorded.items() if isinstance(recorded, Mapping) else ())
    ]
    if not rows:
        rows.append(
            {
                "name": "training frameworks",
                "version": "not recorded",
                "role": "the run records none",
            }
        )
    from importlib import metadata

    for name in ("ccpo", "huggingface_hub"):
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        rows.append({"name": name, "version": version, "role": "rendered this card"})
    return rows


def _metadata(facts: _Facts) -> dict[str, Any]:
    window, interim = facts.this.window, facts.status == INTERIM
    benchmark_tag = [facts.identity.benchmark] if facts.identity.benchmark else []
    tags = [
        *(LOCAL_TAGS if facts.from_scratch else BASE_TAGS),
        *benchmark_tag,
        _arm_tag(facts.this_arm.name),
    ]
    tags += [INTERIM] if interim else []
    tags += [] if facts.headline else [TOO_FEW_TAG]
    base_model = facts.run_row.get("base_model")
    # A run that trained LoRA adapters (the run's `adapter` fact) published an adapter of the base.
    relation = "adapter" if (facts.this.facts or {}).get("adapter") else "finetune"
    lineage = (
        {} if facts.from_scratch else {"base_model": base_model, "base_model_relation": relation}
    )
    return {
        **lineage,
        # The local policy is a torch checkpoint loaded by ccpo, not a transformers text generator.
        "library_name": "pytorch" if facts.from_scratch else "transformers",
        "pipeline_tag": "reinforcement-learning" if facts.from_scratch else "text-generation",
        "license": facts.license,
        "tags": list(dict.fromkeys(tags)),
        "model_name": _repo_name(facts.repo_id, facts.identity.run),
        # No window mean, no model-index value: the card reports its evaluations instead.
        "headline_value": round(float(window.mean), 1)
        if facts.headline and window.mean is not None
        else None,
        # A name, as the Hub's leaderboards show it; the window, its size and its convergence
        # verdict are the card's Results section (and the summary JSON), not the metric's name.
        "headline_name": HEADLINE_NAME,
        "split": facts.protocol["split"],
        "benchmark": benchmark_vars(facts.identity),
        # The games, observations and commands are English text; the policy reads and acts in it.
        "language": ["en"],
        "datasets": [facts.identity.benchmark] if facts.identity.benchmark else [],
        "task_type_results": task_type_results(facts) if facts.headline else [],
    }


def task_type_results(facts: _Facts) -> list[dict[str, Any]]:
    """Per task type, the mean over the same window as the headline (never the best point)."""
    window_types = facts.this.window_task_types
    rows = []
    for key, label in task_type_columns(facts.identity, facts.this.best):
        entry = window_types.get(key) or {}
        if entry.get("mean") is not None:
            rows.append(
                {
                    "key": key,
                    "name": f"{label} success (%)",
                    "value": round(float(entry["mean"]), 1),
                    "n": entry.get("n"),
                }
            )
    return rows


def _summary_run(entry: RunEntry) -> dict[str, Any]:
    """One run of the comparison as the card's summary lists it: who it is, and its window."""
    return {
        "run": entry.run,
        "arm": entry.arm_name,
        "arm_label": entry.arm_label,
        "kind": entry.identity.kind,
        "seed": entry.seed,
        "window": entry.window.to_document(),
    }


def _summary(facts: _Facts, claims: CardClaims, published: dict) -> dict[str, Any]:
    config, base_model = config_of(facts.run_row), facts.run_row.get("base_model")
    return {
        "schema_version": 1,
        "run": facts.run_row["name"],
        "arm": facts.this_arm.name,
        "arm_label": facts.this_arm.unit_label,
        "arm_fingerprint": facts.this_arm.fingerprint,
        "arm_flags": facts.this_arm.flags or None,
        "arm_overrides": facts.this_arm.overrides,
        "identity": facts.identity.as_dict(),
        "repo_id": facts.repo_id,
        "status": facts.status,
        "base_model": None if facts.from_scratch else base_model,
        "model": base_model,
        "trained_from_scratch": facts.from_scratch,
        "license": facts.license,
        "last_step": facts.last_step,
        "total_steps": facts.total_steps,
        "checkpoint_step": facts.checkpoint_step,
        "window": facts.this.window.to_document(),
        "run_state": facts.this.run_state,
        "best": None if facts.this.best is None else facts.this.best.to_document(),
        "single_evaluation_noise": facts.noise,
        "arms": [facts.comparison.arm(arm.arm).as_json() for arm in claims.arms],
        "runs": [_summary_run(entry) for entry in facts.comparison.runs],
        "references": [reference.as_json() for reference in facts.comparison.references],
        "isolation": facts.comparison.isolation,
        "conflicts": facts.comparison.conflicts,
        # What the numbers leave out and why (`ccpo runs retract`), and the conflicts settled.
        "retracted": facts.comparison.retracted,
        "resolved_conflicts": facts.comparison.resolved_conflicts,
        "protocol": facts.protocol,
        "excluded_runs": facts.excluded,
        "grpo_comparison": claims.grpo.state == "compared",
        "published_baselines": published["rows"],
        **({"eval_panel_game_ids": panel_game_ids(config)} if panel_game_ids(config) else {}),
        "evidence_hash": facts.evidence,
        "ccpo_version": __version__,
        # Every claim the card states, typed (cards/claims.py): what the card says, as data.
        "claims": [claim.as_json() for claim in claims.as_list()],
    }


def _published(facts: _Facts) -> dict[str, Any]:
    """The published rows the card may quote beside the run: those of its base model and
    protocol (cards/baselines.py)."""
    run_protocol = config_of(facts.run_row).get("protocol")
    return published_comparison(
        facts.run_row.get("base_model"),
        run_protocol if isinstance(run_protocol, str) else None,
        load_baseline_data(),
        benchmark=facts.identity.benchmark,
        from_scratch=facts.from_scratch,
    )


def _claims(facts: _Facts, published: dict[str, Any]) -> CardClaims:
    """Every claim of the card (cards/claims.py), from the facts gathered; each unit is named by
    its arm's own short title."""
    return claims_of(
        facts.decided_status,
        facts.this,
        facts.identity,
        facts.identities,
        facts.comparison,
        facts.excluded,
        facts.runs_by_name,
        published,
        {label: arm.label for label, arm in facts.resolved.items()},
    )


def build_card_context(
    db: sqlite_utils.Database,
    run: str,
    *,
    status: str = INTERIM,
    repo_id: str | None = None,
    window_start: int | None = None,
    license: str | None = None,
    checkpoint_step: int | None = None,
    weights: Mapping[str, Any] | None = None,
    sending_checkpoint: bool = False,
) -> CardContext:
    """Everything the card states about `run`, from the database (see the module docstring).

    `repo_id` is the Hub repository the card is published to (its usage snippet names it; without
    one the snippet is left out). `window_start` None gives the run's window by `report.window.run_window_start` (the one
    its matrix recorded, else the default rule). `checkpoint_step` is the checkpoint a publish sends; without it the card names a
    checkpoint only when runs.db records one at the step it would publish. `weights` cites the Hub
    commit of those weights (`repo_id`, `commit`, `revision`, `step`): the card and its summary
    name it, and the usage snippet loads that revision. Raises InvalidInput
    (exit 3) for a final card of an unfinished run, a run without evaluations in the window, a
    reference (evaluation-only) run, and a run without arm, base model or license.
    """
    if weights is not None and checkpoint_step is None:
        checkpoint_step = weights.get("step")
    facts = _gather(
        db, run, status, repo_id, window_start, license, checkpoint_step, sending_checkpoint
    )
    published = _published(facts)
    claims = _claims(facts, published)
    return CardContext(
        run=facts.run_row["name"],
        status=facts.status,
        repo_id=facts.repo_id,
        template_vars=dict(
            _template_vars(facts, claims, published), weights=_weights_vars(weights)
        ),
        metadata=_metadata(facts),
        summary=dict(
            _summary(facts, claims, published),
            **({"weights": dict(weights)} if weights is not None else {}),
        ),
        comparison=facts.comparison,
        claims=claims,
    )
