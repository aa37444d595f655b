"""`python -m ccpo_cli.backends.verl.entry <hydra overrides>`: verl's trainer with ccpo's Ray hook.

verl's `run_ppo` starts Ray only when it is not running yet, and older verl-agent trees ignore
`ray_init.runtime_env`; starting Ray here first, with `setup_hook.setup` as the job's
`worker_process_setup_hook` and the run's environment, is what works across versions. Then
verl's own Hydra entry point (`verl.trainer.main_ppo`) runs unchanged on the same argv, as `__main__`.
verl-agent's own runtime environment, when its `constants_ppo` module has one, is merged in.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys
from typing import Any

from ccpo_cli.backends.verl import worker_env

SETUP_HOOK = "ccpo_cli.backends.verl.setup_hook.setup"
RAY_ADDRESS = "CCPO_RAY_ADDRESS"
# The module whose `main()` is the trainer's Hydra entry point (the protocol's `entrypoint`).
ENTRYPOINT = "CCPO_VERL_ENTRYPOINT"
# Comma-separated names of the environment variables every Ray worker must see.
FORWARD_ENV = "CCPO_WORKER_ENV_KEYS"
# What verl's own `ray.init` would have set for its workers.
VERL_WORKER_DEFAULTS = {
    "TOKENIZERS_PARALLELISM": "true",
    "NCCL_DEBUG": "WARN",
    "VLLM_LOGGING_LEVEL": "WARN",
}


def launch_environment(
    layered: dict[str, str], entrypoint: str, ray_address: str | None
) -> dict[str, str]:
    """The launch's environment: the protocol's, the profile's and the workers' variables
    (`layered`), the entry point, a Ray address, and the names every worker must see."""
    environment = dict(layered)
    environment[ENTRYPOINT] = entrypoint
    if ray_address:
        environment[RAY_ADDRESS] = ray_address
    environment[FORWARD_ENV] = ",".join(name for name in environment if name != FORWARD_ENV)
    return environment


def worker_runtime_env(home: Any, environment: dict[str, str]) -> dict[str, Any]:
    """The Ray workers' runtime env: verl-agent's own worker variables (read from the
    checkout), verl's defaults and the forwarded environment, and the setup hook."""
    from ccpo_cli.backends.verl import checkout

    verl_env_vars = checkout.ray_runtime_env_vars(home)
    forwarded = {name: value for name, value in environment.items() if name != FORWARD_ENV}
    return {
        "env_vars": checkout.merged_worker_env(verl_env_vars, VERL_WORKER_DEFAULTS, forwarded),
        "from_verl_agent": (
            f"{checkout.CONSTANTS_MODULE} (read from the checkout; merged again from the real module at launch)"
            if verl_env_vars is not None
            else "not found in the checkout: verl's older defaults are used"
        ),
        "worker_process_setup_hook": SETUP_HOOK,
    }


def _override(argv: list[str], key: str) -> str | None:
    for item in argv:
        name, separator, value = item.lstrip("+").partition("=")
        if separator and name == key:
            return value
    return None


def verl_runtime_env() -> dict | None:
    """verl-agent's own Ray runtime environment (`get_ppo_ray_runtime_env()`), None when this
    verl has none. Starting Ray here means verl's `run_ppo` skips its own `ray.init`, so without
    this merge its worker variables (NCCL / vLLM settings against tensor-parallel hangs) are lost."""
    try:
        constants = importlib.import_module("verl.trainer.constants_ppo")
    except ImportError:
        return None
    getter = getattr(constants, "get_ppo_ray_runtime_env", None)
    if getter is None:
        return None
    return dict(getter())


def ray_init_arguments(
    argv: list[str], environ: dict[str, str], verl_env: dict | None = None
) -> dict:
    forwarded = [name for name in environ.get(FORWARD_ENV, "").split(",") if name]
    runtime_env = dict(verl_env or {})
    env_vars = (
        dict(runtime_env.get("env_vars") or {})
        if verl_env is not None
        else dict(VERL_WORKER_DEFAULTS)
    )
    env_vars.update({name: environ[name] for name in forwarded if name in environ})
    runtime_env.update({"worker_process_setup_hook": SETUP_HOOK, "env_vars": env_vars})
    arguments: dict = {"runtime_env": runtime_env}
    if environ.get(RAY_ADDRESS):
        arguments["address"] = environ[RAY_ADDRESS]
    if not arguments.get("address"):
        num_cpus = _override(argv, "ray_init.num_cpus")
        if num_cpus not in (None, "null"):
            arguments["num_cpus"] = int(num_cpus)
        # Small hosts and CI: `+ray_init.object_store_memory=BYTES`, `+ray_init.include_dashboard=False`.
        memory = _override(argv, "ray_init.object_store_memory")
        if memory not in (None, "null"):
            arguments["object_store_memory"] = int(memory)
        dashboard = _override(argv, "ray_init.include_dashboard")
        if dashboard is not None:
            arguments["include_dashboard"] = dashboard.lower() == "true"
    return arguments


def main(argv: list[str] | None = None) -> None:
    import ray

    argv = sys.argv[1:] if argv is None else argv
    if not os.environ.get(worker_env.ARM):
        raise SystemExit(
            f"{worker_env.ARM} is not set: start runs with `ccpo train --backend verl` (run.sh)"
        )
    from ccpo_cli.backends.verl import setup_hook

    setup_hook.setup()  # this process too, and it fails fast on a fingerprint mismatch
    ray.init(**ray_init_arguments(argv, dict(os.environ), verl_runtime_env()))
    sys.argv = [sys.argv[0], *argv]
    # Exactly as `python -m verl.trainer.main_ppo`: run as __main__, Hydra looks for `config/` next
    # to the file; imported under its own name it looks for a package `verl.trainer.config`, which
    # verl-agent's tree does not have (no __init__.py), and stops.
    runpy.run_module(
        os.environ.get(ENTRYPOINT, "verl.trainer.main_ppo"), run_name="__main__", alter_sys=True
    )


if __name__ == "__main__":
    main()
