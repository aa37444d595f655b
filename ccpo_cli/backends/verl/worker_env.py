"""What the launcher tells every Ray worker, through environment variables, in one place.

The arm travels by name, with its `--set` overrides and the fingerprint the launcher resolved;
a worker re-resolves the arm from its own installed code and refuses to run if the fingerprint
differs (docs/architecture.md §3, arms and fingerprints: a relaunch once trained the wrong estimator
silently).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ccpo_cli.errors import UsageError

ARM = "CCPO_ARM"
ARM_FINGERPRINT = "CCPO_ARM_FINGERPRINT"
ARM_SET = "CCPO_ARM_SET"  # comma-separated KEY=VALUE, the `--set` syntax; absent when none
RUN = "CCPO_RUN"
METRICS_JSONL = "CCPO_METRICS_JSONL"
CAPTURE_FEATURES = "CCPO_CAPTURE_FEATURES"  # "1": the reference pass keeps last-prompt-token states
# Test-only: a file path. The worker that runs verl's TaskRunner writes what the hook patched
# there, checks that the trainer accepts `ccpo`, and stops the run (tests/verl_integration/).
PROBE = "CCPO_VERL_PROBE"
# Trainer modules whose `compute_advantage` the setup hook wraps (comma-separated); the default
# is verl's and verl-agent's driver-side module.
TRAINER_MODULES = "CCPO_VERL_TRAINER_MODULES"
DEFAULT_TRAINER_MODULES = ("verl.trainer.ppo.ray_trainer",)

# The value of `algorithm.adv_estimator` for every ccpo-launched run, whatever the arm: the arm
# itself is `+algorithm.ccpo.arm` and CCPO_ARM, so grpo and gigpo arms run the same code path.
ESTIMATOR_NAME = "ccpo"


@dataclass(frozen=True)
class ArmSpec:
    """The arm a run was launched with: name, `--set` overrides, resolved fingerprint."""

    name: str
    fingerprint: str
    overrides: Mapping[str, str] = field(default_factory=dict)

    def to_environ(self) -> dict[str, str]:
        env = {ARM: self.name, ARM_FINGERPRINT: self.fingerprint}
        if self.overrides:
            env[ARM_SET] = format_overrides(self.overrides)
        return env

    @classmethod
    def of(cls, arm: Any) -> ArmSpec:
        """The spec of a loaded arm (`arms.Arm`): its name, fingerprint and overrides as text."""
        return cls(arm.name, arm.fingerprint, {key: str(value) for key, value in arm.overrides})

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> ArmSpec | None:
        """The spec in the environment, or None when this process is not part of a ccpo run."""
        environ = os.environ if environ is None else environ
        name = environ.get(ARM)
        if not name:
            return None
        fingerprint = environ.get(ARM_FINGERPRINT, "")
        if not fingerprint:
            raise ArmMismatch(f"{ARM}={name} is set but {ARM_FINGERPRINT} is not")
        return cls(
            name=name, fingerprint=fingerprint, overrides=parse_overrides(environ.get(ARM_SET, ""))
        )


class ArmMismatch(RuntimeError):
    """The estimator a worker would run is not the arm recorded for the run."""


def run_environment(
    spec: ArmSpec, run: str, metrics_jsonl: str | os.PathLike, capture_features: bool
) -> dict[str, str]:
    """What every worker process of a run is told: the arm, the run, where its metrics go, and
    whether it captures the reference's features."""
    return {
        **spec.to_environ(),
        RUN: run,
        METRICS_JSONL: str(metrics_jsonl),
        CAPTURE_FEATURES: "1" if capture_features else "0",
    }


def format_overrides(overrides: Mapping[str, str]) -> str:
    for key, value in overrides.items():
        if "," in str(value) or "=" in str(key):
            raise UsageError(
                f"--set {key}={value}: a value with ',' cannot be passed to the workers"
            )
    return ",".join(f"{key}={value}" for key, value in sorted(overrides.items()))


def parse_overrides(text: str) -> dict[str, str]:
    overrides: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, separator, value = item.partition("=")
        if not separator:
            raise ArmMismatch(f"{ARM_SET} item {item!r} is not KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return overrides
