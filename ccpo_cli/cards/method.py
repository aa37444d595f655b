"""What a card says about the method and the arm, derived from the arm's resolved flags.

The estimator family picks the method paragraph; the flags that matter for that family are
turned into a one-line description, and the flags that differ from the other arms of the
comparison are listed as the arm's distinguishing flags.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ccpo_cli.arms import PADDING_MEANINGS
from ccpo_cli.estimator_registry import CCPO_FAMILY, ESTIMATORS, Estimator, of_family

# An arm whose recorded flags name no estimator (a run ingested without `--arm` and without
# verl's `algorithm.*` keys): which estimator it trained is not known, and the card says so
# rather than guessing from the arm's name.
NOT_RECORDED = "not recorded"

# Keyed by family: the estimator table's words, and what a card says when no family is recorded.
METHOD_NAMES = {entry.family: entry.title for entry in ESTIMATORS} | {
    NOT_RECORDED: "an advantage estimator the run did not record",
}

METHOD_SHORT_NAMES = {entry.family: entry.short for entry in ESTIMATORS} | {
    NOT_RECORDED: "this arm"
}
# What a card says of a flag of an external arm: ccpo cannot tell which of them are inert.
EXTERNAL_INERT = "not assessed: ccpo does not implement this estimator"
# An estimator known only from a run's log (store/identity.py `external_arm`): named by the
# estimator the log printed, never described as one of ccpo's.
EXTERNAL = "external"
EXTERNAL_ARM_PREFIX = "verl-agent:"

METHOD_PARAGRAPHS = {entry.family: entry.paragraph for entry in ESTIMATORS} | {
    NOT_RECORDED: (
        "Which advantage estimator this run trained is not recorded: the run was recorded without "
        "the arm's estimator flags (no `--arm` at ingest, no `algorithm.*` keys in its log), so the "
        "card names the arm only by its name and makes no claim about its method."
    ),
}


# The arm's `padding` flag (docs/estimators.md): what happens to the copies of rows a trainer adds
# to fill its batch (`is_pad`). It is part of the fingerprint, so the card states it.
def padding_rule(flags: Mapping[str, Any], *, pads: bool) -> str:
    """One line for the card: the rule, what it means, and whether this backend pads at all."""
    rule = flags.get("padding")
    if rule not in PADDING_MEANINGS:
        return "not recorded (the run predates the padding flag or records another value)"
    line = f"`{rule}`: {PADDING_MEANINGS[rule]}"
    if not pads:
        line += (
            "; the local backend adds no padding copies, so the rule changes nothing in this run"
        )
    return line


# Flags the resolved arm carries that name the estimator family, in order of preference.
_FAMILY_KEYS = ("estimator", "adv_estimator", "method", "family")


def is_external(arm_name: str | None) -> bool:
    return (arm_name or "").startswith(EXTERNAL_ARM_PREFIX)


def external_estimator(arm_name: str | None, flags: Mapping[str, Any]) -> str:
    """The estimator an external arm's log printed (`algorithm.adv_estimator`)."""
    value = flags.get("adv_estimator")
    return str(value) if value else (arm_name or "")[len(EXTERNAL_ARM_PREFIX) :]


def external_method(arm_name: str | None, flags: Mapping[str, Any]) -> dict[str, str]:
    """The method variables of a card for an external arm: its own estimator, not ccpo's words."""
    estimator = external_estimator(arm_name, flags)
    return {
        "family": estimator_family(arm_name, flags),
        "name": f"verl-agent's `{estimator}` estimator",
        "short": _upstream_short(estimator),
        "paragraph": (
            f"The run trained verl-agent's `{estimator}` advantage estimator (`algorithm.adv_estimator="
            f"{estimator}`). ccpo does not implement it: the arm is known by the `algorithm.*` settings "
            "the run's log printed, listed below, and its fingerprint is theirs."
        ),
    }


def _named(text: str) -> Estimator | None:
    """The table's entry whose estimator or family is `text` (recorded flags hold either)."""
    return next((entry for entry in ESTIMATORS if text in (entry.name, entry.family)), None)


def _upstream(estimator: str) -> Estimator | None:
    """The table's entry for an estimator verl-agent also implements under that name, or None."""
    return next(
        (entry for entry in ESTIMATORS if entry.upstream and entry.name == estimator.lower()), None
    )


def _upstream_short(estimator: str) -> str:
    entry = _upstream(estimator)
    return entry.short if entry is not None and entry.name == estimator else estimator.upper()


def estimator_family(arm_name: str | None, flags: Mapping[str, Any]) -> str:
    """`ccpo`, `gigpo` or `grpo` (the family whose method paragraph the card prints) as the arm's
    recorded flags name it, `external` for an estimator of another family known only from a
    run's log, or NOT_RECORDED when the recorded flags name none. The arm's name is never read:
    `verl-gigpo` or `baseline` say nothing of what was trained."""
    if is_external(arm_name):
        estimator = external_estimator(arm_name, flags).lower()
        entry = _upstream(estimator)
        return entry.family if entry is not None else EXTERNAL
    for key in _FAMILY_KEYS:
        value = flags.get(key)
        entry = _named(value.lower()) if isinstance(value, str) else None
        if entry is not None:
            return entry.family
    return NOT_RECORDED


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def describe_ccpo_flags(flags: Mapping[str, Any]) -> str:
    """A plain-language line for a CCPO arm, read from the flags that change its behaviour."""
    parts = []
    gate = str(flags.get("gate", "hard"))
    rho = _number(flags.get("rho"))
    if gate == "global":
        parts.append(
            "a single task-level bucket (global gate) with feature-weighted siblings and no shrinkage"
        )
    else:
        parts.append("the exact (task, observation) anchor gate GiGPO and G2PO use")
        if rho == 0:
            parts.append("uniform sibling weighting")
        elif rho is not None:
            parts.append(
                f"feature-weighted siblings shrunk toward the uniform baseline (rho={rho:g})"
            )
    if str(flags.get("backoff_task", "0")) not in ("0", "False", "false", "None", ""):
        parts.append("a task-level backoff bucket for anchors without siblings")
    jweight = _number(flags.get("jweight_c"))
    if jweight:
        parts.append(f"J-weighting of the step term by sibling count (c={jweight:g})")
    target = str(flags.get("target", "return"))
    if target == "nextnode":
        parts.append("the step credit computed on the successor node's value (G2PO's target)")
    else:
        parts.append("the step credit computed on the discounted return-to-go")
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def describe_arm(arm_name: str, flags: Mapping[str, Any]) -> str:
    if is_external(arm_name):
        return (
            f"verl-agent's `{external_estimator(arm_name, flags)}` estimator with the `algorithm.*` settings its "
            "log printed (not one of ccpo's arm files)"
        )
    family = estimator_family(arm_name, flags)
    if family == CCPO_FAMILY:
        return describe_ccpo_flags(flags)
    if family == NOT_RECORDED:
        return f"`{arm_name}`, whose estimator flags the run did not record"
    entry = of_family(family)
    short = entry.short if entry is not None else family
    return f"the {short} estimator as the baseline arm"


def format_flag_value(value: Any) -> str:
    if value is None or value == "":
        return "unset"  # an optional flag's recorded form when it is not set
    if isinstance(value, float):
        return f"{value:g}" if value != int(value) else f"{value:.1f}"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def distinguishing_flags(
    flags: Mapping[str, Any], others: Iterable[Mapping[str, Any]]
) -> list[tuple[str, str]]:
    """The flags whose value in this arm differs from at least one other arm's, in flag order."""
    others = list(others)
    differing = []
    for name, value in flags.items():
        if any(other.get(name) != value for other in others):
            differing.append((name, format_flag_value(value)))
    return differing
