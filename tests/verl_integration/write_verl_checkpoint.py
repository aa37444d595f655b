"""Write a real verl actor checkpoint on CPU: verl's FSDPCheckpointManager.save_checkpoint.

    python write_verl_checkpoint.py MODEL_DIR GLOBAL_STEP_DIR WORLD_SIZE STEP

Each of WORLD_SIZE processes (torch.distributed over gloo, on CPU) loads the same Hugging Face model
in MODEL_DIR, wraps it in FSDP the way verl's actor worker does (a 1-D "fsdp" device mesh, full
sharding, verl's transformer-layer wrap policy), and verl's checkpoint manager saves model,
optimizer and extra state into GLOBAL_STEP_DIR/actor, as the trainer does at a save step.
Run as a script so the distributed processes stay out of the pytest process.
"""

from __future__ import annotations

import os
import socket
import sys


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def save_rank(rank: int, world_size: int, model_dir: str, step_dir: str, step: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp import ShardingStrategy
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_wrap_policy

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        module = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        mesh = init_device_mesh("cpu", mesh_shape=(world_size,), mesh_dim_names=["fsdp"])
        model = FSDP(
            module,
            auto_wrap_policy=get_fsdp_wrap_policy(module=module, config=None),
            sharding_strategy=ShardingStrategy.FULL_SHARD,
            device_mesh=mesh,
            device_id=torch.device("cpu"),
            use_orig_params=False,
        )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        manager = FSDPCheckpointManager(
            model=model, optimizer=optimizer, lr_scheduler=None, processing_class=tokenizer
        )
        manager.save_checkpoint(os.path.join(step_dir, "actor"), global_step=step)
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    import torch.multiprocessing as mp

    model_dir, step_dir, world_size, step = argv[0], argv[1], int(argv[2]), int(argv[3])
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(_free_port())
    mp.spawn(save_rank, args=(world_size, model_dir, step_dir, step), nprocs=world_size, join=True)


if __name__ == "__main__":
    main(sys.argv[1:])
