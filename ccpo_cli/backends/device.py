"""Which backend a machine's own hardware suggests: verl-agent where a CUDA GPU is usable, the
CPU trainer everywhere else (`ccpo train` without `--backend`)."""

from __future__ import annotations

import os

from ccpo_cli.vocabulary import LOCAL, VERL

# Where Linux shows a CUDA device (a driver's device node; WSL's GPU bridge). Without one, torch
# cannot see a GPU either, so the CPU machine's answer needs no torch import (a second of start-up).
CUDA_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")


def no_cuda_device() -> bool:
    """True when this machine certainly has no CUDA device to offer (checked without torch)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return True
    return os.path.isdir("/dev") and not any(os.path.exists(path) for path in CUDA_DEVICE_FILES)


def gpu_available() -> bool:
    if no_cuda_device():
        return False
    try:
        import torch  # imported here: only a machine with a CUDA device node asks torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install must not break the CPU path
        return False


def default_backend() -> str:
    return VERL if gpu_available() else LOCAL
