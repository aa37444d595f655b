"""Arms as data: every estimator flag, fully resolved, loaded from configs/arms/<name>.yaml.

Each flag is declared once, as a field of `Arm`: its type (`float`, `float | None`, `int`,
`bool` or a `Literal` of its choices), its help, and for a number its valid range. Everything else (the `--set`
coercion, the YAML loader, `ccpo arms show`, the list of flag names) is derived from those
fields, so adding a flag is one field here (give it a default so existing arm files stay valid;
it changes every fingerprint, which the change must say).

An `Arm` is frozen; its fingerprint is the sha256 of the canonical (sorted-keys JSON) resolved
flags in their recorded form (`Arm.flags()`), so two arms that compute the same advantages share
a fingerprint whatever they are called, and any change of any flag changes it.

Which flags are inert in an arm (cannot change its output) is derived from the flag values in
`inert_flags`; the estimator uses the same reasoning (`features_active`) to skip the feature work.

One concern, kept in one file past 400 lines: every estimator flag is declared once, as a field
of `Arm`, and the `--set` coercion, the arm-file loader, the inert-flag and feature rules and
the rebuild of an arm from recorded flags all read those same field declarations; split, adding
a flag would mean editing several files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ccpo_cli import estimator_registry
from ccpo_cli.bounded_yaml import read_yaml_file
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.paths import configs_dir


def flag(
    help: str,
    *,
    bounds: tuple[float, float] | None = None,
    default: Any = dataclasses.MISSING,
    choices: tuple[str, ...] = (),
) -> Any:
    """Declare one estimator flag (a field of `Arm`): its help and, for a number, its valid range
    (`bounds`, both ends included); the type is the annotation. `choices` are for a text flag
    whose values are listed elsewhere (the estimator table) rather than in a `Literal`.

    Every numeric flag has a range, chosen so that in-range flags on in-range input (batch values
    are at most 1e9 in size, batch_io.MAX_ABS_VALUE) keep every advantage finite, in float32 too
    (tests/test_arms_ranges.py checks each end of each range). A range is a check, not a flag:
    it never enters the fingerprint. A default is for a flag added after arm files were
    written: a file that omits it gets it.
    """
    return field(
        default=default,
        kw_only=True,
        metadata={"flag": True, "help": help, "bounds": bounds, "choices": choices},
    )


# Ranges shared by several flags: a weight or a confidence multiplies terms of order one, a
# count-like constant (J/(J+c), J/(J+kappa)) is compared with trajectory counts.
WEIGHT = (0.0, 1e3)
SIGNED_WEIGHT = (-1e3, 1e3)
COUNT_CONSTANT = (0.0, 1e6)
FRACTION = (0.0, 1.0)


# What the trainer's padding copies of rows (`is_pad`, verl-agent's adjust_batch) do under each
# value of the `padding` flag; the dry-run, config.json and the card all quote these lines.
PADDING_MEANINGS = {
    "inert": "padding copies of rows (`is_pad`) enter no statistic and get advantage 0",
    "upstream": "padding copies of rows (`is_pad`) count in the group statistics and are trained on, "
    "as verl-agent's own GRPO and GiGPO do",
}


def check_padding_rule(rule: str, estimator: str, *, where: str = "") -> None:
    """`upstream` exists only where verl-agent has its own estimator to reproduce."""
    if rule not in PADDING_MEANINGS:
        raise InvalidInput(
            f"{where}padding rule {rule!r} is not one of {', '.join(PADDING_MEANINGS)}"
        )
    upstream = estimator_registry.upstream_names()
    if rule == "upstream" and estimator not in upstream:
        raise InvalidInput(
            f"{where}padding = upstream reproduces verl-agent's own {' and '.join(upstream)}; "
            f"estimator {estimator!r} has no upstream rule (use padding = inert)"
        )


@dataclass(frozen=True)
class Arm:
    name: str
    description: str
    estimator: str = flag("which advantage estimator", choices=estimator_registry.ESTIMATOR_NAMES)
    adv_mode: Literal["mean_std_norm", "mean_norm"] = flag(
        "normalisation of the episode and GiGPO step terms"
    )
    gamma: float = flag("discount of the return-to-go and node values", bounds=FRACTION)
    invalid_penalty: float = flag("penalty for an invalid action", bounds=WEIGHT)
    success_reward: float = flag(
        "episode reward that counts as success (terminal node value)", bounds=(-1e6, 1e6)
    )
    ep_w: float = flag("weight of the episode term", bounds=SIGNED_WEIGHT)
    step_advantage_w: float = flag("weight of the step term", bounds=SIGNED_WEIGHT)
    gate: Literal["hard", "global"] = flag("bucket key: (task, observation) or the whole task")
    target: Literal["return", "nextnode"] = flag(
        "step target: return-to-go or successor node value"
    )
    rho: float = flag(
        "confidence in the feature distances (scales the EB disagreement)", bounds=WEIGHT
    )
    backoff_task: bool = flag(
        "serve rows without another trajectory in their node at the task level"
    )
    backoff_rho: float = flag("rho multiplier at the task level", bounds=WEIGHT)
    min_traj: int = flag("distinct trajectories a bucket needs", bounds=(1, 1_000_000))
    jweight_c: float = flag("J-weighting constant c in J/(J+c); 0 disables", bounds=COUNT_CONSTANT)
    prior_kappa: float = flag("credibility prior kappa; 0 disables", bounds=COUNT_CONSTANT)
    lk_fix: float | None = flag("fixed credibility weight (unset: J/(J+kappa))", bounds=FRACTION)
    lam_fix: float | None = flag(
        "fixed kernel/uniform mix lambda (unset: shrink rule)", bounds=FRACTION
    )
    phi: Literal["hidden", "hidden+ctx"] = flag("feature vector")
    ctx_w: float = flag("weight of the trajectory-context block", bounds=WEIGHT)
    whiten: int = flag("principal directions removed before distances", bounds=(0, 1024))
    tau: float = flag(
        "kernel width as a multiple of the bucket's median distance", bounds=(1e-3, 1e3)
    )
    wmode: Literal["soft", "hard", "cos"] = flag("neighbour weighting")
    shrink: Literal["eb", "mse", "eb_pooled", "eb_hier"] = flag("shrinkage rule for lambda")
    std: Literal["task", "local"] = flag("scale of the step credit")
    # Above 0: under std = local a bucket of equal targets has local sd 0, and the floor is all
    # that stands between its credit and 0/0.
    std_floor: float = flag(
        "floor of the local scale, as a fraction of the batch target sd", bounds=(1e-3, 1e3)
    )
    step_norm: Literal["mode", "std", "none"] = flag("per-task standardisation of live step values")
    edge_w: float = flag("weight of the G2PO edge (value-gain) term; 0 disables", bounds=WEIGHT)
    padding: Literal["inert", "upstream"] = flag(
        "the trainer's padding copies: inert (no statistic, advantage 0) or upstream (counted and "
        "trained on as verl-agent's grpo/gigpo do; grpo and gigpo only)"
    )
    # The step-information control of the CPU testbed (docs/estimators.md §4.1): the step term's
    # values are kept, but each live row gets another live row's value of the same task, so the
    # term keeps its magnitude and mean and loses what it says about the row's state.
    step_permute: bool = flag(
        "permute the step term among the live rows of each task (a control)", default=False
    )
    # The oracle-credit ceiling of the CPU testbed (docs/estimators.md §4.2): GiGPO's step term
    # replaced by what the game's stored plan says of each action (did it bring the goal one
    # command closer), standardised within the task. No estimator can know this; it bounds
    # what step-level credit can add in a design.
    step_oracle: bool = flag(
        "replace the gigpo step term by the plan-progress oracle (a ceiling)", default=False
    )
    # (flag, recorded value) pairs applied on top of the arm file, in name order.
    overrides: tuple[tuple[str, Any], ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        check_padding_rule(self.padding, self.estimator, where=f"arm '{self.name}': ")
        if self.step_oracle and not estimator_registry.lookup(self.estimator).oracle:
            raise InvalidInput(
                f"arm '{self.name}': step_oracle replaces GiGPO's step term; estimator "
                f"{self.estimator} has none to replace (use a gigpo arm)"
            )
        for spec in FLAG_SPECS:  # however an Arm is made, its numbers are in their ranges
            value = getattr(self, spec.name)
            if not spec.in_range(value):
                raise InvalidInput(
                    f"arm '{self.name}': flag '{spec.name}' = {value!r} must be {spec.requirement}"
                )

    def flags(self) -> dict[str, Any]:
        """Every flag in its recorded form: the form fingerprints, runs.db, cards and Hydra have
        always used (an unset optional number is "", a set one its repr; a boolean is 0 or 1)."""
        return {spec.name: spec.recorded(getattr(self, spec.name)) for spec in FLAG_SPECS}

    @property
    def fingerprint(self) -> str:
        """sha256 of the canonical flags. A flag added after arm files were written (one with a
        declared default) enters it only when set off that default, so every arm that computes
        what it computed before keeps the fingerprint runs.db and published cards recorded."""
        later_at_default = {
            spec.name
            for spec in FLAG_SPECS
            if not spec.required and getattr(self, spec.name) == spec.default
        }
        fingerprinted = {
            key: value for key, value in self.flags().items() if key not in later_at_default
        }
        canonical = json.dumps(
            fingerprinted, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def with_overrides(self, overrides: Mapping[str, Any]) -> Arm:
        """A copy with the given flags replaced (values coerced); the overrides are recorded."""
        changed = {key: coerce_flag(key, value) for key, value in overrides.items()}
        recorded = dict(self.overrides)
        recorded.update({key: _SPEC_BY_NAME[key].recorded(value) for key, value in changed.items()})
        return dataclasses.replace(self, **changed, overrides=tuple(sorted(recorded.items())))


def _plain(number: float) -> str:
    """1000000 rather than 1e+06, 0.001 as it is."""
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


@dataclass(frozen=True)
class FlagSpec:
    """One flag as declared on `Arm`, read back from its field."""

    name: str
    kind: type  # float, int, bool or str
    optional: bool  # None (unset) is a value
    help: str
    choices: tuple[str, ...] = ()
    bounds: tuple[float, float] | None = None  # the valid range of a number, both ends included
    required: bool = True  # an arm file must give it (no default declared)
    default: Any = None

    @property
    def requirement(self) -> str:
        """The range as a message says it, e.g. `in [0, 1000]`; '' for a flag without one."""
        if self.bounds is None:
            return ""
        low, high = self.bounds
        return f"in [{_plain(low)}, {_plain(high)}]"

    def in_range(self, value: Any) -> bool:
        if self.bounds is None or value is None:
            return True
        low, high = self.bounds
        return low <= value <= high

    def recorded(self, value: Any) -> Any:
        if self.optional:
            return "" if value is None else repr(float(value))
        if self.kind is bool:
            return int(value)
        return value


def _flag_spec(declared: dataclasses.Field, annotation: Any) -> FlagSpec:
    arguments = typing.get_args(annotation)
    optional = isinstance(annotation, types.UnionType) and type(None) in arguments
    if optional:
        (annotation,) = [argument for argument in arguments if argument is not type(None)]
    choices = declared.metadata["choices"] or (
        typing.get_args(annotation) if typing.get_origin(annotation) is Literal else ()
    )
    return FlagSpec(
        name=declared.name,
        kind=str if choices else annotation,
        optional=optional,
        help=declared.metadata["help"],
        choices=tuple(choices),
        bounds=declared.metadata["bounds"],
        required=declared.default is dataclasses.MISSING,
        default=None if declared.default is dataclasses.MISSING else declared.default,
    )


_ANNOTATIONS = typing.get_type_hints(Arm)
FLAG_SPECS: tuple[FlagSpec, ...] = tuple(
    _flag_spec(declared, _ANNOTATIONS[declared.name])
    for declared in dataclasses.fields(Arm)
    if declared.metadata.get("flag")
)
FLAG_NAMES: tuple[str, ...] = tuple(spec.name for spec in FLAG_SPECS)
_SPEC_BY_NAME = {spec.name: spec for spec in FLAG_SPECS}


class _Underflow(ValueError):
    pass


_NONZERO_MANTISSA = re.compile(r"[+-]?[0-9_.]*[1-9]", re.ASCII)


def _canonical_number(text: Any) -> float:
    """`text` as the one float that stands for it: -0 is 0 (one value, one fingerprint). A
    literal with a non-zero digit that reads as 0 or as a subnormal (`1e-400`, `1e-310`) lost its
    value to underflow and is refused (ValueError), as is a number that is not finite."""
    number = float(text)
    if not math.isfinite(number):
        raise ValueError
    if isinstance(text, str):
        underflowed = number == 0.0 and _NONZERO_MANTISSA.match(text.strip()) is not None
        if underflowed or 0.0 < abs(number) < sys.float_info.min:
            raise _Underflow
    return number + 0.0  # -0.0 + 0.0 is 0.0


def _coerce(spec: FlagSpec, text: Any) -> Any:
    """`text` (a string from --set, or a YAML value) as the flag's type; ValueError if it is not one."""
    if spec.optional and (text is None or text == ""):
        return None
    if isinstance(text, bool) and spec.kind is not bool:
        if spec.kind is not int:
            raise ValueError
        text = int(text)
    if spec.kind is float:
        return _canonical_number(text)
    if spec.kind is int:
        if isinstance(text, str) and text.lower() in ("true", "false"):
            return int(text.lower() == "true")
        number = _canonical_number(text)
        if not number.is_integer():
            raise ValueError
        return int(number)
    if spec.kind is bool:
        if isinstance(text, bool):
            return text
        if isinstance(text, str) and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if float(text) not in (0.0, 1.0):
            raise ValueError
        return float(text) == 1.0
    if isinstance(text, (int, float)):
        text = repr(text)
    if not isinstance(text, str):
        raise ValueError
    return text


def coerce_flag(name: str, value: Any, source: str = "--set") -> Any:
    """The flag's value in its declared type; UsageError for an unknown flag, InvalidInput for a bad value."""
    spec = _SPEC_BY_NAME.get(name)
    if spec is None:
        raise UsageError(f"{source}: unknown flag '{name}' (known: {', '.join(FLAG_NAMES)})")
    text = value.strip() if isinstance(value, str) else value
    try:
        coerced = _coerce(spec, text)
    except _Underflow:
        raise InvalidInput(
            f"{source}: flag '{name}': {value!r} is too small for a float and would be stored "
            f"as 0 (write 0, or a number of at least {sys.float_info.min:g})"
        ) from None
    except (TypeError, ValueError):
        kind = f"{spec.kind.__name__} or unset" if spec.optional else spec.kind.__name__
        raise InvalidInput(f"{source}: flag '{name}': cannot read {value!r} as {kind}") from None
    if spec.choices and coerced not in spec.choices:
        raise InvalidInput(
            f"{source}: flag '{name}': {value!r} is not one of {', '.join(spec.choices)}"
        )
    if not spec.in_range(coerced):
        raise InvalidInput(f"{source}: flag '{name}': {value!r} must be {spec.requirement}")
    return coerced


def parse_set_options(assignments: list[str] | tuple[str, ...] | None) -> dict[str, str]:
    """`KEY=VALUE` strings (from --set) as a dict; a malformed one or an unknown key is a usage error."""
    parsed: dict[str, str] = {}
    for assignment in assignments or ():
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--set {assignment!r}: expected KEY=VALUE")
        if key not in _SPEC_BY_NAME:
            raise UsageError(f"--set: unknown flag '{key}' (known: {', '.join(FLAG_NAMES)})")
        parsed[key] = value
    return parsed


def arms_dir() -> Path:
    return configs_dir() / "arms"


def list_arms() -> list[str]:
    return sorted(path.stem for path in arms_dir().glob("*.yaml"))


def _read_arm_file(path: Path) -> Arm:
    document = read_yaml_file(path)
    if not isinstance(document, dict) or not isinstance(document.get("flags"), dict):
        raise InvalidInput(f"{path}: expected a mapping with 'name', 'description' and 'flags'")
    flags = document["flags"]
    missing = [spec.name for spec in FLAG_SPECS if spec.name not in flags and spec.required]
    if missing:
        raise InvalidInput(f"{path}: flags: missing {', '.join(missing)}")
    unknown = sorted(set(flags) - set(FLAG_NAMES))
    if unknown:
        raise InvalidInput(f"{path}: flags: unknown {', '.join(unknown)}")
    resolved = {}
    for spec in FLAG_SPECS:
        if spec.name not in flags:
            resolved[spec.name] = spec.default
            continue
        try:
            resolved[spec.name] = coerce_flag(spec.name, flags[spec.name], source=str(path))
        except UsageError as error:  # cannot happen: names were checked above
            raise InvalidInput(str(error)) from None
    return Arm(
        name=str(document.get("name", path.stem)),
        description=str(document.get("description", "")),
        **resolved,
    )


def load_arm(name: str, overrides: Mapping[str, Any] | None = None) -> Arm:
    """The arm `name` from configs/arms, with `overrides` (flag -> value) applied."""
    path = arms_dir() / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"unknown arm '{name}' (known: {', '.join(list_arms())})")
    arm = _read_arm_file(path)
    return arm.with_overrides(overrides) if overrides else arm


# ---- what each flag can still change -------------------------------------------------------


def fixed_lambda(arm: Arm) -> float | None:
    """λ when the flags alone decide it (after the [0, 1] clip), else None."""
    if arm.lam_fix is not None:
        return min(1.0, max(0.0, arm.lam_fix))
    if arm.gate == "global":
        return 1.0
    if arm.rho == 0.0:
        return 0.0  # every shrink rule scales its signal by rho (docs/estimators.md §5.8)
    return None


def fixed_lambda_by_rho(arm: Arm) -> bool:
    """Whether λ is pinned only because rho = 0 (not by lam_fix or the global gate)."""
    return arm.lam_fix is None and arm.gate != "global" and arm.rho == 0.0


def features_active(arm: Arm) -> bool:
    """Whether phi_feats can change this arm's advantages (and so must be supplied)."""
    if not estimator_registry.lookup(arm.estimator).features:
        return False
    return fixed_lambda(arm) != 0.0 or arm.std == "local"


_FEATURE_FLAGS = ("phi", "ctx_w", "whiten", "tau", "wmode")


def lambda_reason(arm: Arm) -> str:
    """Why λ (the kernel share of the baseline) is what it is, in one phrase."""
    if arm.lam_fix is not None:
        return f"lam_fix = {arm.lam_fix!r} ⇒ λ ≡ {fixed_lambda(arm):g}"
    if arm.gate == "global":
        return "gate = global ⇒ λ ≡ 1"
    if arm.rho == 0.0:
        return f"rho = {arm.rho:g} ⇒ λ ≡ 0"
    return f"rho = {arm.rho:g} > 0 ⇒ λ from shrink = {arm.shrink}"


def _mark_step_term_inert(arm: Arm, mark: Callable[[Sequence[str], str], None]) -> None:
    """`mark` the flags of a step-level estimator that reads them all which this arm's other
    flags make inert (the gate, a fixed λ, the features, the scale, the target), with why."""
    lam = fixed_lambda(arm)
    if arm.gate == "global":
        mark(
            ("backoff_task", "backoff_rho"),
            "gate = global ⇒ task backoff is disabled ⇒ backoff_task, backoff_rho have no effect",
        )
        mark(
            ("prior_kappa", "lk_fix"),
            "gate = global ⇒ credibility prior is disabled ⇒ prior_kappa, lk_fix have no effect",
        )
    if lam is not None:
        # rho = 0 is itself the cause of λ ≡ 0, so rho stays live (any other value changes λ);
        # under lam_fix or the global gate rho is overridden and is inert too.
        overridden = (
            ("shrink", "backoff_rho")
            if fixed_lambda_by_rho(arm)
            else ("rho", "shrink", "backoff_rho")
        )
        mark(overridden, f"{lambda_reason(arm)} ⇒ {', '.join(overridden)} have no effect")
    elif not arm.backoff_task:
        mark(("backoff_rho",), "backoff_task = 0 ⇒ no task level ⇒ backoff_rho has no effect")
    if arm.gate != "global" and arm.lk_fix is not None:
        mark(
            ("prior_kappa",),
            f"lk_fix = {arm.lk_fix!r} ⇒ the credibility weight is fixed ⇒ prior_kappa has no effect",
        )
    if not features_active(arm):
        mark(
            _FEATURE_FLAGS,
            f"{lambda_reason(arm)} ⇒ the baseline is the uniform mean and std = {arm.std} "
            f"⇒ phi_feats, {', '.join(_FEATURE_FLAGS)} have no effect",
        )
    else:
        if arm.phi == "hidden":
            mark(("ctx_w",), "phi = hidden ⇒ no context block ⇒ ctx_w has no effect")
        if arm.wmode == "cos":
            mark(("tau",), "wmode = cos ⇒ no kernel width ⇒ tau has no effect")
    if arm.std != "local":
        mark(("std_floor",), f"std = {arm.std} ⇒ no local scale ⇒ std_floor has no effect")
    if arm.target == "return" and arm.edge_w == 0.0:
        mark(
            ("success_reward",),
            "target = return and edge_w = 0 ⇒ node values unused ⇒ success_reward has no effect",
        )


def inert_flags(arm: Arm) -> dict[str, str]:
    """Flag -> why it cannot change this arm's advantages (derived from the flag values)."""
    inert: dict[str, str] = {}

    def mark(names: Sequence[str], reason: str) -> None:
        for name in names:
            inert.setdefault(name, reason)

    entry = estimator_registry.lookup(arm.estimator)
    unread = [name for name in FLAG_NAMES if entry.reads is not None and name not in entry.reads]
    unread_reason = f"estimator = {entry.name} ⇒ {entry.unread} ⇒ no effect"
    if not entry.step_level:
        mark(unread, unread_reason)
        return inert
    if arm.step_advantage_w == 0.0:
        mark(
            ("step_permute", "step_oracle"),
            "step_advantage_w = 0 ⇒ no step term ⇒ step_permute, step_oracle have no effect",
        )
    if arm.step_oracle:
        mark(("gamma",), "step_oracle = 1 ⇒ the step term ignores returns ⇒ gamma has no effect")
    if unread:
        mark(unread, unread_reason)
        return {name: inert[name] for name in FLAG_NAMES if name in inert}

    _mark_step_term_inert(arm, mark)
    return {name: inert[name] for name in FLAG_NAMES if name in inert}


def arm_from_flags(
    name: str,
    flags: Mapping[str, Any],
    description: str = "",
    overrides: Mapping[str, Any] | None = None,
) -> Arm | None:
    """The `Arm` whose recorded flags (`Arm.flags()`) are `flags`, or None when they are not a
    complete set this version can read (a flag added since gets its declared default)."""
    resolved = {}
    for spec in FLAG_SPECS:
        if spec.name not in flags:
            if spec.required:
                return None
            resolved[spec.name] = spec.default
            continue
        try:
            resolved[spec.name] = coerce_flag(spec.name, flags[spec.name], source="recorded flags")
        except (UsageError, InvalidInput):
            return None
    try:
        return Arm(
            name=name,
            description=description,
            overrides=tuple(sorted((overrides or {}).items())),
            **resolved,
        )
    except InvalidInput:
        return None
