"""The verl / verl-agent backend: launcher, Ray setup hook, batch adapter, feature capture, metrics.

Importable without verl, verl-agent, Ray or a GPU; only `start` needs a verl-agent checkout.
"""

from ccpo_cli.backends.verl.follow import start
from ccpo_cli.backends.verl.launcher import VerlLaunch, VerlLaunchRequest, build_launch
from ccpo_cli.backends.verl.run_folder import prepare_run_folder, write_placeholder_parquets

__all__ = [
    "VerlLaunch",
    "VerlLaunchRequest",
    "build_launch",
    "prepare_run_folder",
    "start",
    "write_placeholder_parquets",
]
