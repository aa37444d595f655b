"""A card is a list of claims: each fact the card states is one typed claim, made by one function
here from the typed `Comparison` (report/comparison.py) and the run's identity.

The template (templates/ccpo_model_card.md) only puts claims into words: it decides no fact, and
a claim absent from the list never appears. `card_claims` is the public entry point (the claims
oracle in the tests recomputes each from the rows alone); `ccpo card` writes them to
results/ccpo_summary.json under "claims". docs/architecture.md ("Card claims") names the kinds.

One concern, kept in one file past 400 lines: the card's claims, each kind's type beside the one
function that makes it, so that the concept test holds every kind to this one place and a kind
is never decided again elsewhere.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from ccpo_cli.cards.method import estimator_family
from ccpo_cli.estimator_registry import GRPO_FAMILY
from ccpo_cli.report.arm_summary import MIN_SEEDS_RESOLVED
from ccpo_cli.report.compare import pair_resolved
from ccpo_cli.report.isolation import shown_differences
from ccpo_cli.report.readiness import card_status
from ccpo_cli.stats import DEFAULT_CONFIDENCE
from ccpo_cli.store.identity import UNIT_FIELDS, RunIdentity

if TYPE_CHECKING:
    import sqlite_utils

    from ccpo_cli.report.comparison import ArmSummary, Comparison, PairComparison, RunEntry

CONVERGED = "converged"
NOT_CONVERGED = "not converged"
NOT_JUDGED = "not judged"  # too few points, or an interval too wide, or no variation (undefined)
TREND_VERDICTS = (CONVERGED, NOT_CONVERGED, NOT_JUDGED)


class Claim:
    """One fact a card states; `as_json` is its entry in the summary's "claims"."""

    kind: ClassVar[str]

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}  # type: ignore[call-overload]


@dataclass(frozen=True)
class StatusClaim(Claim):
    """Interim or final (`report.readiness.card_status`) and how far the run got."""

    kind: ClassVar[str] = "status"
    run: str
    status: str
    basis: str
    run_state: str
    last_step: int | None
    total_steps: int | None  # None: not recorded (the card then never says "of None")
    stopped_early: bool


@dataclass(frozen=True)
class WindowClaim(Claim):
    """The run's window and its convergence verdict (a constant window is not judged: its
    trend is undefined, as scipy's linregress gives NaN)."""

    kind: ClassVar[str] = "window"
    run: str
    start: int
    start_basis: str
    mean: float | None
    sd: float | None
    n: int
    headline: bool
    verdict: str  # TREND_VERDICTS
    direction: str | None
    slope_per_100: float | None
    ci_low_per_100: float | None
    ci_high_per_100: float | None
    confidence: float | None
    change: float | None
    note: str | None


@dataclass(frozen=True)
class BestPointClaim(Claim):
    """The best evaluation in the window and the expected-maximum bias it carries."""

    kind: ClassVar[str] = "best-point"
    step: int
    success: float
    n_candidates: int
    bias_sd: float
    bias_points: float | None
    bias_basis: str


@dataclass(frozen=True)
class ArmSeedsClaim(Claim):
    """One comparison unit's seeds and mean over them, exactly as `ccpo compare` has them."""

    kind: ClassVar[str] = "arm-seeds"
    arm: str  # the unit's full label (compare's arms[].arm)
    label: str  # as the card's table prints it
    this: bool
    arm_recorded: bool
    n_seeds: int
    mean: float | None
    sd: float | None
    n: int
    sd_over: str
    seeds: list[Any]
    runs: list[str]
    unseeded_runs: list[str]
    family: str


@dataclass(frozen=True)
class ArmComparisonClaim(Claim):
    """This arm against one other arm of the card: the difference with its test, interval and
    p, or why there is none (no recorded seed, one seed, arm not recorded, another setting)."""

    kind: ClassVar[str] = "arm-comparison"
    this_arm: str
    other_arm: str
    other_label: str
    difference: float | None  # this arm minus the other; None when no difference is stated
    test: str | None
    ci_low: float | None
    ci_high: float | None
    p: float | None
    confidence: float | None
    n_seeds_this: int
    n_seeds_other: int
    resolved: bool  # >= MIN_SEEDS_RESOLVED seeds per arm and the interval excludes zero
    isolation: str | None  # the pair's isolation verdict
    no_test: str | None  # why there is no test (then no interval and no p)


@dataclass(frozen=True)
class GrpoClaim(Claim):
    """Whether the card is set against a GRPO arm of its own setting, and if not, why."""

    kind: ClassVar[str] = "grpo"
    state: str  # "compared", "this arm", "fails isolation", "none"
    arm: str | None  # the GRPO unit compared (state compared)
    comparison: ArmComparisonClaim | None
    rejected_runs: list[str]  # GRPO runs of the card's own setting that fail the isolation check
    rejected_reason: str


@dataclass(frozen=True)
class IsolationClaim(Claim):
    """What the isolation check found over the runs it checked: trained runs of the card's
    comparison, not failed, with an evaluation in the window (never references)."""

    kind: ClassVar[str] = "isolation"
    verdict: str
    runs: list[str]
    not_recorded: list[str]
    differences: list[str]
    shared: list[str]  # hardware, seed, data order, base model: one recorded value for all
    same_first_rollouts: bool


@dataclass(frozen=True)
class ReferencesClaim(Claim):
    kind: ClassVar[str] = "references"
    rows: list[dict[str, Any]]  # run, agent, mean, n


@dataclass(frozen=True)
class PublishedRowsClaim(Claim):
    kind: ClassVar[str] = "published-rows"
    rows: list[dict[str, Any]]
    comparable: str
    incomparable: list[dict[str, Any]]
    sources: list[str]


@dataclass(frozen=True)
class LeftOutClaim(Claim):
    """The runs of the card's benchmark it leaves out, by setting: how each group differs from
    the card's run, never each run's fingerprints (those stay in the summary's excluded_runs)."""

    kind: ClassVar[str] = "left-out"
    groups: list[dict[str, Any]]  # {"differ_in": str, "runs": int, "arms": [str]}


def status_claim(run: str, this: RunEntry, requested: str) -> StatusClaim:
    decided = card_status(run, this, requested)
    last_step = this.last_step
    totals = this.total_steps_recorded
    return StatusClaim(
        run=run,
        status=decided.status,
        basis=decided.status_basis,
        run_state=this.run_state,
        last_step=last_step,
        total_steps=max(totals) if totals else None,
        stopped_early=this.run_state == "stopped-early",
    )


def window_claim(this: RunEntry) -> WindowClaim:
    window, trend = this.window, this.window.trend
    verdict = (
        CONVERGED
        if trend.converged is True
        else NOT_CONVERGED
        if trend.converged is False
        else NOT_JUDGED
    )

    def per_100(value: float | None) -> float | None:
        return None if value is None else 100.0 * float(value)

    return WindowClaim(
        run=this.run,
        start=int(window.start),
        start_basis=window.start_basis or "",
        mean=window.mean,
        sd=window.sd,
        n=window.n,
        headline=bool(window.n) and window.headline,
        verdict=verdict,
        direction=trend.direction,
        slope_per_100=per_100(trend.slope),
        ci_low_per_100=per_100(trend.ci_low),
        ci_high_per_100=per_100(trend.ci_high),
        confidence=trend.confidence,
        change=trend.change,
        note=trend.note,
    )


def best_point_claim(this: RunEntry) -> BestPointClaim | None:
    best = this.best
    if not best:
        return None
    return BestPointClaim(
        step=int(best.step),
        success=float(best.success),
        n_candidates=int(best.n_candidates or this.window.n),
        bias_sd=float(best.expected_max_bias_sd),
        bias_points=best.expected_max_bias_points,
        bias_basis=best.bias_noise or "the window sd",
    )


def _family(arm: ArmSummary) -> str:
    return estimator_family(arm.arm_name, (arm.arm.flags or {}) if arm.arm else {})


def arm_seeds_claims(
    comparison: Comparison, this_unit: str, titles: Mapping[str, str]
) -> list[ArmSeedsClaim]:
    """One per unit with a window, in the comparison's order (best window mean first); `titles`
    are the arms' own short titles by unit (cards/selection.py ResolvedArm.label)."""
    return [
        ArmSeedsClaim(
            arm=arm.name,
            label=f"{titles[arm.name]} (`{arm.name}`)"
            if titles.get(arm.name, arm.name) != arm.name
            else f"`{arm.name}`",
            this=arm.name == this_unit,
            arm_recorded=arm.arm_recorded,
            n_seeds=arm.n_seeds,
            mean=arm.mean,
            sd=arm.sd,
            n=arm.n,
            sd_over=arm.sd_over or "evaluations",
            seeds=list(arm.seeds),
            runs=list(arm.runs),
            unseeded_runs=list(arm.unseeded_runs),
            family=_family(arm),
        )
        for arm in comparison.arms
        if arm.n
    ]


def _pair(comparison: Comparison, a: str, b: str) -> tuple[PairComparison | None, bool]:
    """The compared pair of units a and b, and whether its first unit is b (signs flip)."""
    for pair in comparison.pairs:
        if (pair.first.name, pair.second.name) == (a, b):
            return pair, False
        if (pair.first.name, pair.second.name) == (b, a):
            return pair, True
    return None, False


def _why_not_compared(comparison: Comparison, a: str, b: str) -> str:
    for entry in comparison.not_compared:
        if {entry.first.name, entry.second.name} == {a, b}:
            return entry.note
    return "not compared"


def arm_comparison_claims(comparison: Comparison, this_unit: str) -> list[ArmComparisonClaim]:
    """This unit against every other unit with a window (the comparison's pair, or why none)."""
    this = comparison.find_arm(this_unit)
    if this is None:
        return []
    claims = []
    for other in comparison.arms:
        if other.name == this_unit or not other.n:
            continue
        pair, flipped = _pair(comparison, this_unit, other.name)
        test = dict(pair.test) if pair is not None else {}
        sign = -1.0 if flipped else 1.0
        difference = test.get("difference")
        low, high = test.get("ci_low"), test.get("ci_high")
        if flipped and low is not None and high is not None:
            low, high = -high, -low
        no_test = None
        if pair is None:
            no_test = _why_not_compared(comparison, this_unit, other.name)
        elif test.get("p") is None or low is None:
            thin = [arm.name for arm in (this, other) if arm.n_seeds < 2]
            no_test = (
                f"no test: {' and '.join(thin)} {'has' if len(thin) == 1 else 'have'} "
                "one recorded seed"
                if thin
                else "no test: the seed means do not vary"
            )
        claims.append(
            ArmComparisonClaim(
                this_arm=this_unit,
                other_arm=other.name,
                other_label=other.name,
                difference=None if pair is None or difference is None else sign * difference,
                test=None if no_test else test.get("test"),
                ci_low=None if no_test else low,
                ci_high=None if no_test else high,
                p=None if no_test else test.get("p"),
                confidence=None if no_test else DEFAULT_CONFIDENCE,
                n_seeds_this=this.n_seeds,
                n_seeds_other=other.n_seeds,
                resolved=pair is not None and pair_resolved(pair.first, pair.second, pair.test),
                isolation=None if pair is None else pair.verdict,
                no_test=no_test,
            )
        )
    return claims


def grpo_claim(
    comparison: Comparison,
    identity: RunIdentity,
    this_unit: str,
    comparisons: list[ArmComparisonClaim],
    excluded: Mapping[str, list[str]],
    identities: Mapping[str, RunIdentity],
) -> GrpoClaim:
    """A GRPO arm of the card's own setting compared with this one; else this arm is GRPO, or the
    GRPO runs of this setting that fail the isolation check, or none. Runs of other settings are
    never named as this setting's."""
    by_arm = {claim.other_arm: claim for claim in comparisons}
    for arm in comparison.arms:
        claim = by_arm.get(arm.name)
        if (
            claim is not None
            and _family(arm) == GRPO_FAMILY
            and arm.unit.setting() == identity.unit.setting()
        ):
            return GrpoClaim("compared", arm.name, claim, [], "")
    this = comparison.find_arm(this_unit)
    if this is not None and _family(this) == GRPO_FAMILY:
        state = "this arm"
    else:
        state = "none"
    setting = identity.unit.setting()
    rejected = [
        name
        for name in excluded
        if (other := identities[name]).arm is not None
        and other.unit.setting() == setting
        and estimator_family(other.arm.name, other.arm.flags or {}) == GRPO_FAMILY
    ]
    if rejected and state == "none":
        state = "fails isolation"
    reason = shown_differences(excluded[rejected[0]]) if rejected else ""
    return GrpoClaim(state, None, None, rejected, reason)


ISOLATION_SHARED = (
    ("hardware", "hardware"),
    ("seed", "seed"),
    ("data_order_seed", "data order"),
    ("base_model", "base model"),
)


def isolation_claim(
    comparison: Comparison, runs_by_name: Mapping[str, Mapping[str, Any]]
) -> IsolationClaim:
    isolation = comparison.isolation
    checked = list(isolation.get("compared_runs") or [])
    rows = [runs_by_name[name] for name in checked if name in runs_by_name]
    shared = [
        label
        for column, label in ISOLATION_SHARED
        if len(values := {row.get(column) for row in rows}) == 1 and None not in values
    ]
    hashes = {row.get("step1_rollout_hash") for row in rows}
    return IsolationClaim(
        verdict=str(isolation["verdict"]),
        runs=checked,
        not_recorded=list(isolation.get("not_recorded") or []),
        differences=list(isolation.get("differences") or []),
        shared=shared if isolation["verdict"] == "passes" else [],
        same_first_rollouts=isolation["verdict"] == "passes"
        and len(hashes) == 1
        and None not in hashes,
    )


def references_claim(comparison: Comparison) -> ReferencesClaim:
    return ReferencesClaim(
        [
            {
                "run": reference.run,
                "agent": reference.agent or "agent not recorded",
                "mean": reference.mean,
                "n": reference.n_evaluations,
            }
            for reference in comparison.references
        ]
    )


def published_rows_claim(published: Mapping[str, Any]) -> PublishedRowsClaim:
    return PublishedRowsClaim(
        rows=list(published.get("rows") or []),
        comparable=str(published.get("comparable") or ""),
        incomparable=list(published.get("incomparable") or []),
        sources=list(published.get("sources") or []),
    )


# What a setting is: every field of a unit but its arm.
_SETTING_PARTS = tuple(field for field in UNIT_FIELDS if field != "arm")


def left_out_claim(
    identity: RunIdentity,
    excluded: Mapping[str, list[str]],
    identities: Mapping[str, RunIdentity],
) -> LeftOutClaim:
    """Group the left-out runs by what sets their setting apart from the card's run (its own
    setting's runs by the isolation check's first differences); arms named, never fingerprints."""
    groups: dict[str, list[str]] = defaultdict(list)
    this = identity.unit_values()
    for name in excluded:
        theirs = identities[name].unit_values()
        differs = [
            f"{field} {_shown(theirs[field])} (this run: {_shown(this[field])})"
            for field in _SETTING_PARTS
            if theirs[field] != this[field]
        ]
        key = (
            "; ".join(differs)
            if differs
            else f"isolation check failed: {shown_differences(excluded[name])}"
        )
        groups[key].append(name)
    return LeftOutClaim(
        [
            {
                "differ_in": key,
                "runs": len(names),
                "arms": sorted({_arm_name(identities[name]) for name in names}),
            }
            for key, names in groups.items()
        ]
    )


def _shown(value: Any) -> str:
    return "not recorded" if value is None else str(value)


def _arm_name(identity: RunIdentity) -> str:
    return "arm not recorded" if identity.arm is None else identity.arm.label


@dataclass(frozen=True)
class CardClaims:
    """Every claim of one card, by kind (the template reads them by these names)."""

    status: StatusClaim
    window: WindowClaim
    best: BestPointClaim | None
    arms: list[ArmSeedsClaim]
    comparisons: list[ArmComparisonClaim]
    grpo: GrpoClaim
    isolation: IsolationClaim
    references: ReferencesClaim
    published: PublishedRowsClaim
    left_out: LeftOutClaim

    def as_list(self) -> list[Claim]:
        """In the order the card states them."""
        return [
            self.status,
            self.window,
            *([self.best] if self.best is not None else []),
            *self.arms,
            *self.comparisons,
            self.grpo,
            self.isolation,
            self.references,
            self.published,
            self.left_out,
        ]


def claims_of(
    status: StatusClaim,
    this: RunEntry,
    identity: RunIdentity,
    identities: Mapping[str, RunIdentity],
    comparison: Comparison,
    excluded: Mapping[str, list[str]],
    runs_by_name: Mapping[str, Mapping[str, Any]],
    published: Mapping[str, Any],
    labels: Mapping[str, str],
) -> CardClaims:
    """Each claim by its one function, from the comparison and the run's identity."""
    this_unit = this.arm_label or ""
    comparisons = arm_comparison_claims(comparison, this_unit)
    return CardClaims(
        status=status,
        window=window_claim(this),
        best=best_point_claim(this),
        arms=arm_seeds_claims(comparison, this_unit, labels),
        comparisons=comparisons,
        grpo=grpo_claim(comparison, identity, this_unit, comparisons, excluded, identities),
        isolation=isolation_claim(comparison, runs_by_name),
        references=references_claim(comparison),
        published=published_rows_claim(published),
        left_out=left_out_claim(identity, excluded, identities),
    )


def card_claims(
    db: sqlite_utils.Database,
    run: str,
    *,
    status: str = "auto",
    window_start: int | None = None,
) -> list[Claim]:
    """The typed claims of `run`'s card, in the order the card states them (the public entry
    point: the same list `ccpo card` renders and writes under "claims" in its summary)."""
    from ccpo_cli.cards.context import build_card_context

    return build_card_context(db, run, status=status, window_start=window_start).claims.as_list()


__all__ = [
    "MIN_SEEDS_RESOLVED",
    "ArmComparisonClaim",
    "ArmSeedsClaim",
    "BestPointClaim",
    "CardClaims",
    "Claim",
    "GrpoClaim",
    "IsolationClaim",
    "LeftOutClaim",
    "PublishedRowsClaim",
    "ReferencesClaim",
    "StatusClaim",
    "WindowClaim",
    "card_claims",
    "claims_of",
]
