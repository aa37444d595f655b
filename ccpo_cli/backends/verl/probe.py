"""Test-only probe (CCPO_VERL_PROBE=path): report from inside the TaskRunner worker, then stop.

verl-agent's `TaskRunner.run(config)` builds the environments first (`make_envs(config)`), which
on a CPU machine without ALFWorld's games cannot succeed. The probe takes that call's place: in
the worker where `fit()` would run, with the config Hydra composed from the launch, it records
whether the setup hook patched the real `compute_advantage`, `adjust_batch`,
`RayPPOTrainer.__init__` and `Tracking.log`, runs the real (patched) `RayPPOTrainer.__init__`
with `adv_estimator=ccpo`, writes the report and stops the run with `ProbeStop`.
"""

from __future__ import annotations

import json
import os
from typing import Any

STOP_MODULE = "agent_system.environments"
TRAINER_MODULE = "verl.trainer.ppo.ray_trainer"
STOP_MESSAGE = "ccpo probe: stopped after the worker checks"


class ProbeStop(RuntimeError):
    pass


def _patched(function: Any) -> bool:
    return bool(
        getattr(function, "_ccpo_patched", False)
        or getattr(function, "_ccpo_sink", None) is not None
    )


def _trainer_accepts_ccpo(config: Any) -> dict[str, Any]:
    import importlib

    trainer_module = importlib.import_module(TRAINER_MODULE)
    trainer_class, role = trainer_module.RayPPOTrainer, trainer_module.Role
    rows = int(config.data.train_batch_size)
    # Row lists in place of the parquet datasets: the constructor only sizes its data loaders.
    datasets = {
        "train_dataset": [{"row": index} for index in range(rows)],
        "val_dataset": [{"row": index} for index in range(int(config.data.val_batch_size))],
    }
    trainer = trainer_class.__new__(trainer_class)
    try:
        trainer_class.__init__(
            trainer,
            config=config,
            tokenizer=None,
            role_worker_mapping={role.ActorRollout: None},
            resource_pool_manager=None,
            collate_fn=lambda batch: batch,
            device_name="cpu",
            **datasets,
        )
    except Exception as error:  # reported, not raised: the report is what the test reads
        return {"accepted": False, "error": f"{type(error).__name__}: {error}"}
    return {
        "accepted": True,
        "use_critic": trainer.use_critic,
        "adv_estimator_after_init": str(config.algorithm.adv_estimator),
    }


def report(config: Any) -> dict[str, Any]:
    import importlib
    import sys

    import ray

    from ccpo_cli.backends.verl import setup_hook

    context = ray.get_runtime_context()
    trainer_module = sys.modules.get(TRAINER_MODULE) or importlib.import_module(TRAINER_MODULE)
    tracking = importlib.import_module("verl.utils.tracking")
    return {
        "pid": os.getpid(),
        "actor_id": context.get_actor_id(),
        "registered": setup_hook.registered_estimators(),
        "patched": {
            "compute_advantage": _patched(trainer_module.compute_advantage),
            "adjust_batch": _patched(trainer_module.adjust_batch),
            "RayPPOTrainer.__init__": _patched(trainer_module.RayPPOTrainer.__init__),
            "Tracking.log": _patched(tracking.Tracking.log),
        },
        "config_adv_estimator": str(config.algorithm.adv_estimator),
        "trainer_init": _trainer_accepts_ccpo(config),
    }


def install(module: Any, path: str) -> None:
    def make_envs(config, *args, **kwargs):
        import sys

        caller = sys._getframe(1)
        document = report(config)
        document["called_from"] = (
            f"{type(caller.f_locals.get('self')).__name__}.{caller.f_code.co_name}"
        )
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(document, handle, indent=2, default=str)
        raise ProbeStop(STOP_MESSAGE)

    module.make_envs = make_envs
