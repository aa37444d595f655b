"""The local backend: a small torch policy trained on the real ALFWorld engine on CPU.

Public entry points:
- `train_arm(arm, run_name, db_path, config, *, resume, run_dir, log)`: one training run of an
  `Arm` with a `TrainConfig`, evaluations recorded in runs.db as they happen (see `trainer`);
- `load_policy(checkpoint)`: a saved policy; `LocalPolicyAgent`: it as a `ccpo eval` agent
  (the agent registry names `make_local_agent` for `ccpo eval --agent local`).
"""

from ccpo_cli.backends.local.agent import LocalPolicyAgent, make_local_agent
from ccpo_cli.backends.local.trainer import TrainConfig, TrainResult, load_policy, train_arm

__all__ = ["LocalPolicyAgent", "TrainConfig", "TrainResult", "load_policy", "make_local_agent", "train_arm"]
