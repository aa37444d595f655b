"""Arms as data: every estimator flag, fully resolved, loaded from configs/arms/<name>.yaml.

An `Arm` is frozen; its fingerprint is the sha256 of the canonical (sorted-keys JSON) resolved
flags, so two arms that compute the same advantages share a fingerprint whatever they are called,
and any change of any flag changes it. `--set KEY=VALUE` overrides go through `with_overrides`,
which coerces each value to its flag's type.

Which flags are inert in an arm (cannot change its output) is derived from the flag values in
`inert_flags`; the estimator uses the same reasoning (`features_active`) to skip the feature work.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.paths import configs_dir


@dataclass(frozen=True)
class FlagSpec:
    name: str
    kind: type  # str, float or int
    help: str
    choices: tuple[str, ...] = ()
    check: Callable[[Any], bool] | None = None
    requirement: str = ""


def _non_negative(value: float) -> bool:
    return value >= 0


def _optional_number(value: str) -> bool:
    if value == "":
        return True
    try:
        return math.isfinite(float(value))
    except ValueError:
        return False


FLAG_SPECS: tuple[FlagSpec, ...] = (
    FlagSpec("estimator", str, "which advantage estimator", ("grpo", "gigpo", "ccpo")),
    FlagSpec("adv_mode", str, "normalisation of the episode and GiGPO step terms", ("mean_std_norm", "mean_norm")),
    FlagSpec("gamma", float, "discount of the return-to-go and node values", check=lambda v: 0 <= v <= 1, requirement="in [0, 1]"),
    FlagSpec("invalid_penalty", float, "penalty for an invalid action", check=_non_negative, requirement=">= 0"),
    FlagSpec("success_reward", float, "episode reward that counts as success (terminal node value)"),
    FlagSpec("ep_w", float, "weight of the episode term"),
    FlagSpec("step_advantage_w", float, "weight of the step term"),
    FlagSpec("gate", str, "bucket key: (task, observation) or the whole task", ("hard", "global")),
    FlagSpec("target", str, "step target: return-to-go or successor node value", ("return", "nextnode")),
    FlagSpec("rho", float, "confidence in the feature distances (scales the EB disagreement)", check=_non_negative, requirement=">= 0"),
    FlagSpec("backoff_task", int, "serve rows without another trajectory in their node at the task level", ("0", "1")),
    FlagSpec("backoff_rho", float, "rho multiplier at the task level", check=_non_negative, requirement=">= 0"),
    FlagSpec("min_traj", int, "distinct trajectories a bucket needs", check=lambda v: v >= 1, requirement=">= 1"),
    FlagSpec("jweight_c", float, "J-weighting constant c in J/(J+c); 0 disables", check=_non_negative, requirement=">= 0"),
    FlagSpec("prior_kappa", float, "credibility prior kappa; 0 disables", check=_non_negative, requirement=">= 0"),
    FlagSpec("lk_fix", str, "fixed credibility weight ('' = J/(J+kappa))", check=_optional_number, requirement="'' or a number"),
    FlagSpec("lam_fix", str, "fixed kernel/uniform mix lambda ('' = shrink rule)", check=_optional_number, requirement="'' or a number"),
    FlagSpec("phi", str, "feature vector", ("hidden", "hidden+ctx")),
    FlagSpec("ctx_w", float, "weight of the trajectory-context block"),
    FlagSpec("whiten", int, "principal directions removed before distances", check=_non_negative, requirement=">= 0"),
    FlagSpec("tau", float, "kernel width as a multiple of the bucket's median distance", check=lambda v: v > 0, requirement="> 0"),
    FlagSpec("wmode", str, "neighbour weighting", ("soft", "hard", "cos")),
    FlagSpec("shrink", str, "shrinkage rule for lambda", ("eb", "mse", "eb_pooled", "eb_hier")),
    FlagSpec("std", str, "scale of the step credit", ("task", "local")),
    FlagSpec("std_floor", float, "floor of the local scale, as a fraction of the batch target sd", check=_non_negative, requirement=">= 0"),
    FlagSpec("step_norm", str, "per-task standardisation of live step values", ("mode", "std", "none")),
    FlagSpec("edge_w", float, "weight of the G2PO edge (value-gain) term; 0 disables", check=_non_negative, requirement=">= 0"),
)
FLAG_NAMES: tuple[str, ...] = tuple(spec.name for spec in FLAG_SPECS)
_SPEC_BY_NAME = {spec.name: spec for spec in FLAG_SPECS}


@dataclass(frozen=True)
class Arm:
    name: str
    description: str
    estimator: str
    adv_mode: str
    gamma: float
    invalid_penalty: float
    success_reward: float
    ep_w: float
    step_advantage_w: float
    gate: str
    target: str
    rho: float
    backoff_task: int
    backoff_rho: float
    min_traj: int
    jweight_c: float
    prior_kappa: float
    lk_fix: str
    lam_fix: str
    phi: str
    ctx_w: float
    whiten: int
    tau: float
    wmode: str
    shrink: str
    std: str
    std_floor: float
    step_norm: str
    edge_w: float
    overrides: tuple[tuple[str, Any], ...] = field(default=())

    def flags(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FLAG_NAMES}

    @property
    def fingerprint(self) -> str:
        canonical = json.dumps(self.flags(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def with_overrides(self, overrides: Mapping[str, Any]) -> "Arm":
        """A copy with the given flags replaced (values coerced); the overrides are recorded."""
        changed = {key: coerce_flag(key, value) for key, value in overrides.items()}
        recorded = dict(self.overrides)
        recorded.update(changed)
        return dataclasses.replace(self, **changed, overrides=tuple(sorted(recorded.items())))


def coerce_flag(name: str, value: Any, source: str = "--set") -> Any:
    """The flag's value in its canonical type; UsageError for an unknown flag, InvalidInput for a bad value."""
    spec = _SPEC_BY_NAME.get(name)
    if spec is None:
        raise UsageError(f"{source}: unknown flag '{name}' (known: {', '.join(FLAG_NAMES)})")
    text = value.strip() if isinstance(value, str) else value
    try:
        if spec.kind is float:
            if isinstance(text, bool):
                raise ValueError
            coerced: Any = float(text)
            if not math.isfinite(coerced):
                raise ValueError
        elif spec.kind is int:
            if isinstance(text, bool):
                text = int(text)
            if isinstance(text, str) and text.lower() in ("true", "false"):
                text = int(text.lower() == "true")
            as_float = float(text)
            if not as_float.is_integer():
                raise ValueError
            coerced = int(as_float)
        else:
            if text is None:
                text = ""
            if isinstance(text, (int, float)) and not isinstance(text, bool):
                text = repr(text)
            if not isinstance(text, str):
                raise ValueError
            coerced = text
    except (TypeError, ValueError):
        raise InvalidInput(f"{source}: flag '{name}': cannot read {value!r} as {spec.kind.__name__}") from None
    if spec.choices and str(coerced) not in spec.choices:
        raise InvalidInput(f"{source}: flag '{name}': {value!r} is not one of {', '.join(spec.choices)}")
    if spec.check is not None and not spec.check(coerced):
        raise InvalidInput(f"{source}: flag '{name}': {value!r} must be {spec.requirement}")
    if name in ("lk_fix", "lam_fix") and coerced != "":
        coerced = repr(float(coerced))  # "0.5" and "0.50" are the same arm
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
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise InvalidInput(f"{path}: not valid YAML ({error.__class__.__name__})") from None
    if not isinstance(document, dict) or not isinstance(document.get("flags"), dict):
        raise InvalidInput(f"{path}: expected a mapping with 'name', 'description' and 'flags'")
    flags = document["flags"]
    missing = [name for name in FLAG_NAMES if name not in flags]
    if missing:
        raise InvalidInput(f"{path}: flags: missing {', '.join(missing)}")
    unknown = sorted(set(flags) - set(FLAG_NAMES))
    if unknown:
        raise InvalidInput(f"{path}: flags: unknown {', '.join(unknown)}")
    resolved = {}
    for name in FLAG_NAMES:
        try:
            resolved[name] = coerce_flag(name, flags[name], source=str(path))
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
    if arm.lam_fix != "":
        return min(1.0, max(0.0, float(arm.lam_fix)))
    if arm.gate == "global":
        return 1.0
    if arm.rho == 0.0:
        return 0.0  # every shrink rule scales its signal by rho (docs/estimators.md §5.8)
    return None


def fixed_lambda_by_rho(arm: Arm) -> bool:
    """Whether λ is pinned only because rho = 0 (not by lam_fix or the global gate)."""
    return arm.lam_fix == "" and arm.gate != "global" and arm.rho == 0.0


def features_active(arm: Arm) -> bool:
    """Whether phi_feats can change this arm's advantages (and so must be supplied)."""
    if arm.estimator != "ccpo":
        return False
    return fixed_lambda(arm) != 0.0 or arm.std == "local"


_EPISODE_FLAGS = ("estimator", "adv_mode", "invalid_penalty", "ep_w")
_GIGPO_FLAGS = _EPISODE_FLAGS + ("gamma", "step_advantage_w")
_FEATURE_FLAGS = ("phi", "ctx_w", "whiten", "tau", "wmode")


def lambda_reason(arm: Arm) -> str:
    """Why λ (the kernel share of the baseline) is what it is, in one phrase."""
    if arm.lam_fix != "":
        return f"lam_fix = {arm.lam_fix} ⇒ λ ≡ {fixed_lambda(arm):g}"
    if arm.gate == "global":
        return "gate = global ⇒ λ ≡ 1"
    if arm.rho == 0.0:
        return f"rho = {arm.rho:g} ⇒ λ ≡ 0"
    return f"rho = {arm.rho:g} > 0 ⇒ λ from shrink = {arm.shrink}"


def inert_flags(arm: Arm) -> dict[str, str]:
    """Flag -> why it cannot change this arm's advantages (derived from the flag values)."""
    inert: dict[str, str] = {}

    def mark(names: tuple[str, ...] | list[str], reason: str) -> None:
        for name in names:
            inert.setdefault(name, reason)

    if arm.estimator == "grpo":
        rest = [name for name in FLAG_NAMES if name not in _EPISODE_FLAGS]
        mark(rest, "estimator = grpo ⇒ episode term only (no returns, no step term) ⇒ no effect")
        return inert
    if arm.estimator == "gigpo":
        rest = [name for name in FLAG_NAMES if name not in _GIGPO_FLAGS]
        mark(rest, "estimator = gigpo ⇒ CCPO-only flag ⇒ no effect")
        return inert

    lam = fixed_lambda(arm)
    if arm.gate == "global":
        mark(("backoff_task", "backoff_rho"), "gate = global ⇒ task backoff is disabled ⇒ backoff_task, backoff_rho have no effect")
        mark(("prior_kappa", "lk_fix"), "gate = global ⇒ credibility prior is disabled ⇒ prior_kappa, lk_fix have no effect")
    if lam is not None:
        # rho = 0 is itself the cause of λ ≡ 0, so rho stays live (any other value changes λ);
        # under lam_fix or the global gate rho is overridden and is inert too.
        overridden = ("shrink", "backoff_rho") if fixed_lambda_by_rho(arm) else ("rho", "shrink", "backoff_rho")
        mark(overridden, f"{lambda_reason(arm)} ⇒ {', '.join(overridden)} have no effect")
    elif arm.backoff_task == 0:
        mark(("backoff_rho",), "backoff_task = 0 ⇒ no task level ⇒ backoff_rho has no effect")
    if arm.gate != "global" and arm.lk_fix != "":
        mark(("prior_kappa",), f"lk_fix = {arm.lk_fix} ⇒ the credibility weight is fixed ⇒ prior_kappa has no effect")
    if not features_active(arm):
        mark(_FEATURE_FLAGS, f"{lambda_reason(arm)} ⇒ the baseline is the uniform mean and std = {arm.std} "
             f"⇒ phi_feats, {', '.join(_FEATURE_FLAGS)} have no effect")
    else:
        if arm.phi == "hidden":
            mark(("ctx_w",), "phi = hidden ⇒ no context block ⇒ ctx_w has no effect")
        if arm.wmode == "cos":
            mark(("tau",), "wmode = cos ⇒ no kernel width ⇒ tau has no effect")
    if arm.std != "local":
        mark(("std_floor",), f"std = {arm.std} ⇒ no local scale ⇒ std_floor has no effect")
    if arm.target == "return" and arm.edge_w == 0.0:
        mark(("success_reward",), "target = return and edge_w = 0 ⇒ node values unused ⇒ success_reward has no effect")
    return {name: inert[name] for name in FLAG_NAMES if name in inert}
