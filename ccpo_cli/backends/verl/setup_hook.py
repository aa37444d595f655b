"""Ray `worker_process_setup_hook` for ccpo runs on verl / verl-agent.

Registration or patching done in the launching process never reaches the Ray TaskRunner actor
where `fit()` runs, so the launcher names `setup` as the job's worker setup hook and every worker
process runs it at start. In a ccpo run (CCPO_ARM set) it

1. re-resolves the arm from this worker's installed code and refuses to start when the
   fingerprint differs from the one recorded at launch (`ArmMismatch`);
2. registers the `ccpo` estimator (here, and in verl's registry when verl has one);
3. wraps the trainer module's driver-side `compute_advantage`: `adv_estimator == "ccpo"` runs the
   arm on the whole batch through `ccpo_cli.estimators` (a registry entry only receives token
   rewards and group ids, too little for step-level credit); every other name is delegated;
4. stamps turn index and source row on rollout batches before the trainer pads and reorders them;
5. mirrors the trainer's metric logging into the run's JSONL sink, adding the validation
   episodes' mean turns (which verl-agent does not log);
6. when the arm reads features, keeps the reference model's last-prompt-token hidden state during
   the reference log-prob pass and ships it as `ccpo_phi_feats`.

Patches wait until their module is imported (`imports.when_imported`), so workers that never load
verl pay nothing. Every patch is idempotent.
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ccpo_cli.backends.verl import worker_env
from ccpo_cli.backends.verl.adapter import (
    FEATURES_KEY,
    advantage_tensor,
    annotate_rollout_rows,
    estimator_inputs,
    has_tensor,
    mean_turns,
    response_mask_of,
)
from ccpo_cli.backends.verl.imports import when_imported
from ccpo_cli.backends.verl.worker_env import ESTIMATOR_NAME, ArmMismatch, ArmSpec

if TYPE_CHECKING:  # the arm module loads when a worker resolves its arm, not at hook import
    from ccpo_cli.arms import Arm

_MARK = "_ccpo_patched"
# What this process registered: estimator name -> {"arm", "fingerprint"}.
_REGISTERED: dict[str, dict[str, str]] = {}
# Estimator diagnostics of the latest advantage computation, added to the next metrics record.
_PENDING_METRICS: dict[str, float] = {}
# Arms already resolved in this process, by (name, overrides): the check runs on every call.
_ARMS: dict[tuple, Any] = {}


def setup() -> None:
    """The hook itself (`ccpo_cli.backends.verl.setup_hook.setup`)."""
    spec = ArmSpec.from_environ()
    if spec is None:
        return
    arm = verified_arm(spec)
    _REGISTERED[ESTIMATOR_NAME] = {"arm": arm.name, "fingerprint": arm.fingerprint}
    for module_name in trainer_module_names():
        when_imported(module_name, patch_trainer_module)
    when_imported("verl.trainer.ppo.core_algos", register_in_verl_registry)
    metrics_path = os.environ.get(worker_env.METRICS_JSONL)
    if metrics_path:
        when_imported(
            "verl.utils.tracking", functools.partial(attach_metrics_sink, path=metrics_path)
        )
    if os.environ.get(worker_env.CAPTURE_FEATURES) == "1":
        when_imported("verl.workers.actor.dp_actor", patch_actor_module)
        when_imported("verl.workers.fsdp_workers", patch_worker_module)
    probe_path = os.environ.get(worker_env.PROBE)
    if probe_path:
        from ccpo_cli.backends.verl import probe

        when_imported(probe.STOP_MODULE, functools.partial(probe.install, path=probe_path))


def registered_estimators() -> dict[str, dict[str, str]]:
    return {name: dict(entry) for name, entry in _REGISTERED.items()}


def trainer_module_names() -> tuple[str, ...]:
    configured = os.environ.get(worker_env.TRAINER_MODULES, "")
    names = tuple(name.strip() for name in configured.split(",") if name.strip())
    return names or worker_env.DEFAULT_TRAINER_MODULES


# ---- the arm ---------------------------------------------------------------------------------


def verified_arm(spec: ArmSpec | None = None) -> Any:
    """The arm of this run as this worker resolves it; ArmMismatch unless it has the recorded fingerprint."""
    spec = spec if spec is not None else ArmSpec.from_environ()
    if spec is None:
        raise ArmMismatch(
            f"the ccpo estimator was called but {worker_env.ARM} is not set in this worker"
        )
    key = (spec.name, tuple(sorted(spec.overrides.items())))
    arm = _ARMS.get(key)
    if arm is None:
        from ccpo_cli.arms import load_arm

        arm = load_arm(spec.name, dict(spec.overrides) or None)
        _ARMS[key] = arm
    if arm.fingerprint != spec.fingerprint:
        raise ArmMismatch(
            f"arm {spec.name!r} resolves to fingerprint {arm.fingerprint[:16]} in this worker "
            f"(host {socket.gethostname()}, pid {os.getpid()}) but the run was launched with "
            f"{spec.fingerprint[:16]}: the ccpo code or configs/arms differ between launcher and workers"
        )
    return arm


def check_config_arm(config: Any, arm: Arm) -> None:
    """The Hydra `algorithm.ccpo` block, when the trainer passes it, must name the same arm."""
    if config is None or not hasattr(config, "get"):
        return
    block = config.get("ccpo", None)
    if block is None:
        return
    named, fingerprint = block.get("arm", None), block.get("fingerprint", None)
    if named is not None and named != arm.name:
        raise ArmMismatch(f"algorithm.ccpo.arm is {named!r} but the workers run arm {arm.name!r}")
    if fingerprint is not None and fingerprint != arm.fingerprint:
        raise ArmMismatch(
            f"algorithm.ccpo.fingerprint {str(fingerprint)[:16]} is not the workers' arm fingerprint {arm.fingerprint[:16]}"
        )


def _estimator_name(adv_estimator: Any) -> str:
    return str(getattr(adv_estimator, "value", adv_estimator))


# ---- advantages ------------------------------------------------------------------------------


def _estimate(inputs: dict, arm: Arm, padding: str | None = None) -> tuple[Any, dict[str, float]]:
    """The arm's (n, L) advantages through the one estimator entry point, and a few diagnostics."""
    import numpy as np

    from ccpo_cli.estimators import RolloutBatch, compute_advantages

    result = compute_advantages(
        RolloutBatch.from_mapping(inputs, source="verl batch"), arm, padding
    )
    real = ~np.asarray(inputs["is_pad"], dtype=bool)
    final = np.asarray(result.per_row["final"], dtype=np.float64)[real]
    diagnostics = {
        "ccpo/live_fraction": float(np.mean(np.asarray(result.per_row["live"], dtype=bool)[real]))
        if real.any()
        else 0.0,
        "ccpo/advantage_abs_mean": float(np.mean(np.abs(final))) if real.any() else 0.0,
    }
    return result.advantages, diagnostics


def apply_arm(data: Any, arm: Arm, padding: str | None = None) -> Any:
    """Compute the arm's advantages for a DataProto-like batch, in place (and return it).

    `padding` overrides the arm's padding rule (`inert` / `upstream`, estimators/padding.py).
    """
    from ccpo_cli.arms import features_active

    uses_features = features_active(arm)
    if uses_features and not has_tensor(data, FEATURES_KEY):
        raise ArmMismatch(
            f"arm {arm.name!r} reads reference features but the batch has no '{FEATURES_KEY}'"
        )
    inputs = estimator_inputs(data, with_features=uses_features)
    advantages, diagnostics = _estimate(inputs, arm, padding)
    tensor = advantage_tensor(advantages, response_mask_of(data))
    data.batch["advantages"] = tensor
    data.batch["returns"] = tensor.clone()
    is_pad = inputs["is_pad"]
    _PENDING_METRICS.clear()
    _PENDING_METRICS.update(diagnostics)
    _PENDING_METRICS.update(
        {"ccpo/rows": float(len(is_pad) - is_pad.sum()), "ccpo/padding_rows": float(is_pad.sum())}
    )
    return data


def _patch_of(original: Any) -> Callable[[Any], Any]:
    """A decorator: the wrapper takes `original`'s name, doc and attributes (verl's dispatch
    mode among them) and is marked as ccpo's patch, so that a second setup leaves it alone."""

    def patch(wrapper: Any) -> Any:
        patched = functools.wraps(original)(wrapper)
        setattr(patched, _MARK, True)
        return patched

    return patch


def _is_patched(function: Any) -> bool:
    return getattr(function, _MARK, False)


def wrap_compute_advantage(original):
    if _is_patched(original):
        return original

    @_patch_of(original)
    def compute_advantage(data, adv_estimator, *args, **kwargs):
        if _estimator_name(adv_estimator) != ESTIMATOR_NAME:
            return original(data, adv_estimator, *args, **kwargs)
        arm = verified_arm()
        check_config_arm(kwargs.get("config"), arm)
        return apply_arm(data, arm)

    return compute_advantage


def wrap_adjust_batch(original):
    """Stamp rows before the trainer pads (duplicates) and later reorders them."""
    if _is_patched(original):
        return original

    @_patch_of(original)
    def adjust_batch(config, batch, *args, **kwargs):
        return original(config, annotate_rollout_rows(batch), *args, **kwargs)

    return adjust_batch


def _patch_trainer_init(trainer_class: type, estimator_enum: Any) -> None:
    """verl-agent's trainer only accepts estimators of its own enum; `ccpo` is critic-free like
    GRPO, so the constructor runs with `grpo` in place and the name is restored right after."""
    original = trainer_class.__init__
    if _is_patched(original):
        return
    if estimator_enum is not None and ESTIMATOR_NAME in {member.value for member in estimator_enum}:
        return

    @_patch_of(original)
    def __init__(self, config, *args, **kwargs):
        algorithm = config.algorithm
        if _estimator_name(algorithm.adv_estimator) != ESTIMATOR_NAME:
            return original(self, config, *args, **kwargs)
        check_config_arm(algorithm, verified_arm())
        algorithm.adv_estimator = "grpo"
        try:
            original(self, config, *args, **kwargs)
        finally:
            algorithm.adv_estimator = ESTIMATOR_NAME

    trainer_class.__init__ = __init__


def _patch_validate(trainer_class: type) -> None:
    """Add the validation episodes' mean turns to `_validate`'s metrics (verl-agent logs none).

    Every validation batch passes through the trainer's `val_reward_fn`, so that call is watched
    for the duration of `_validate`; the value never replaces one the trainer logged itself.
    """
    original = getattr(trainer_class, "_validate", None)
    if original is None or _is_patched(original):
        return

    @_patch_of(original)
    def _validate(self, *args, **kwargs):
        reward_fn, seen = self.val_reward_fn, []

        def watched(batch, *reward_args, **reward_kwargs):
            seen.append(batch)
            return reward_fn(batch, *reward_args, **reward_kwargs)

        self.val_reward_fn = watched if reward_fn is not None else None
        try:
            metrics = original(self, *args, **kwargs)
        finally:
            self.val_reward_fn = reward_fn
        turns = mean_turns(seen)
        if isinstance(metrics, dict) and metrics and turns is not None:
            # verl-agent logs no validation episode length; ingest reads mean turns from this key.
            from ccpo_cli.store.readers.metric_names import MEAN_TURNS_KEY

            metrics.setdefault(MEAN_TURNS_KEY, turns)
        return metrics

    trainer_class._validate = _validate


def patch_trainer_module(module: Any) -> None:
    if hasattr(module, "compute_advantage"):
        module.compute_advantage = wrap_compute_advantage(module.compute_advantage)
    if hasattr(module, "adjust_batch"):
        module.adjust_batch = wrap_adjust_batch(module.adjust_batch)
    if hasattr(module, "RayPPOTrainer"):
        _patch_trainer_init(module.RayPPOTrainer, getattr(module, "AdvantageEstimator", None))
        _patch_validate(module.RayPPOTrainer)


def _registry_entry(*args: Any, **kwargs: Any):
    raise ArmMismatch(
        "the ccpo estimator needs the whole batch (trajectories, observations, features); it was "
        "reached through the plain estimator registry, so the trainer's compute_advantage is not "
        "wrapped: launch with `ccpo train --backend verl` (worker_process_setup_hook)"
    )


def register_in_verl_registry(core_algos: Any) -> None:
    """Put `ccpo` into verl's estimator registry (verl >= 0.5), so config checks accept it and a
    trainer that bypasses the wrapped `compute_advantage` fails loudly."""
    registry = getattr(core_algos, "ADV_ESTIMATOR_REGISTRY", None)
    if registry is None:
        return
    if registry.get(ESTIMATOR_NAME) not in (None, _registry_entry):
        raise ArmMismatch(f"verl's estimator registry already holds a different '{ESTIMATOR_NAME}'")
    registry[ESTIMATOR_NAME] = _registry_entry


# ---- metrics ---------------------------------------------------------------------------------


def attach_metrics_sink(tracking_module: Any, path: str) -> None:
    from ccpo_cli.backends.verl.metrics import MetricsSink, mirror_tracking_to_sink

    tracking_class = getattr(tracking_module, "Tracking", None)
    if tracking_class is None:
        return

    class _WithDiagnostics(MetricsSink):
        def log(self, step, metrics, wall_time=None):
            merged = {**_PENDING_METRICS, **dict(metrics)}
            _PENDING_METRICS.clear()
            return super().log(step, merged, wall_time)

    mirror_tracking_to_sink(tracking_class, _WithDiagnostics(path))


# ---- reference features (GPU path) -----------------------------------------------------------


def patch_actor_module(module: Any) -> None:
    """Record the final-norm output of each reference micro-batch forward when asked to."""
    actor_class = getattr(module, "DataParallelPPOActor", None)
    if actor_class is None or _is_patched(actor_class._forward_micro_batch):
        return
    original = actor_class._forward_micro_batch

    @_patch_of(original)
    def _forward_micro_batch(self, micro_batch, *args, **kwargs):
        recorder = getattr(self, "_ccpo_recorder", None)
        if recorder is None:
            return original(self, micro_batch, *args, **kwargs)
        from ccpo_cli.backends.verl.capture import CaptureError, FinalNormCapture

        if getattr(self, "use_ulysses_sp", False):
            raise CaptureError(
                "reference feature capture does not support Ulysses sequence parallelism"
            )
        with FinalNormCapture(self.actor_module) as capture:
            result = original(self, micro_batch, *args, **kwargs)
        recorder.record(
            capture.take(),
            micro_batch["input_ids"],
            micro_batch["attention_mask"],
            micro_batch["responses"].size(-1),
            packed=bool(getattr(self, "use_remove_padding", False)),
        )
        return result

    actor_class._forward_micro_batch = _forward_micro_batch


def patch_worker_module(module: Any) -> None:
    """Ship the recorded features with the reference log-probs as `ccpo_phi_feats`."""
    worker_class = getattr(module, "ActorRolloutRefWorker", None)
    if worker_class is None or _is_patched(worker_class.compute_ref_log_prob):
        return
    original = worker_class.compute_ref_log_prob

    @_patch_of(original)  # keeps verl's dispatch-mode attribute on the method
    def compute_ref_log_prob(self, data, *args, **kwargs):
        from ccpo_cli.backends.verl.capture import ReferenceFeatureRecorder

        reference = getattr(self, "ref_policy", None)
        if reference is None:
            return original(self, data, *args, **kwargs)
        recorder = ReferenceFeatureRecorder()
        reference._ccpo_recorder = recorder
        try:
            output = original(self, data, *args, **kwargs)
        finally:
            reference._ccpo_recorder = None
        output.batch[FEATURES_KEY] = recorder.features_for(
            data.batch["input_ids"], data.batch["attention_mask"]
        )
        return output

    worker_class.compute_ref_log_prob = compute_ref_log_prob
