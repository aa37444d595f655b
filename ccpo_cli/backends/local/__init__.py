"""The local backend: a small torch policy trained on the real ALFWorld engine on CPU.

Public entry points:
- `train_arm(arm, run_name, db_path, config, *, resume, run_dir, log)`: one training run of an
  `Arm` with a `TrainConfig`, evaluations recorded in runs.db as they happen (see `trainer`);
- `load_policy(checkpoint)`: a saved policy; `LocalPolicyAgent`: it as a `ccpo eval` agent
  (the agent registry names `make_local_agent` for `ccpo eval --agent local`).

The names are loaded on first use, so importing a torch-free part of the package (`config`)
never imports torch.
"""

_PUBLIC = {
    "LocalPolicyAgent": "agent",
    "make_local_agent": "agent",
    "TrainConfig": "config",
    "TrainResult": "trainer",
    "load_policy": "trainer",
    "train_arm": "trainer",
}


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)


__all__ = [
    "LocalPolicyAgent",
    "TrainConfig",
    "TrainResult",
    "load_policy",
    "make_local_agent",
    "train_arm",
]
