"""verl-agent's own training step on the CPU, for the integration tests.

Real (imported from VERL_AGENT_HOME): the config (`ppo_trainer.yaml`), `RayPPOTrainer.fit` and
`_validate` with everything they call on the driver (`TrajectoryCollector.multi_turn_loop` and
`gather_rollout_data`, `compute_step_discounted_returns`, `adjust_batch`, `_balance_batch`,
`compute_reward` with `EpisodeRewardManager`, `apply_invalid_action_penalty`,
`compute_advantage`, the metric helpers, `Tracking`), the `EnvironmentManagerBase` the fake
environments sit in, `HFRollout` generating with a tiny random Qwen2, and the reference pass
(`ActorRolloutRefWorker.compute_ref_log_prob` over a `DataParallelPPOActor`).

Stand-ins, because they need Ray placement groups and GPUs: the worker groups (`generate_sequences`
goes to `HFRollout`; `compute_log_prob` returns zeros; `update_actor` keeps the batch it is given,
which is the batch the actor would train on) and the environments (a four-state game that reads
the generated text through a hash). The trainer object is built with `object.__new__` and the
attributes `fit` reads, since `__init__` builds Ray worker groups.
"""

from __future__ import annotations

import copy
import os
import types
import zlib
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

# verl calls `get_torch_device().empty_cache()` after generating and its memory logger (around the
# reference pass) asks the device for memory figures; torch.cpu has none of these functions.
_CPU_DEVICE_FUNCTIONS = {
    "empty_cache": lambda: None,
    "memory_allocated": lambda: 0,
    "memory_reserved": lambda: 0,
    "mem_get_info": lambda: (0, 0),
}
for _name, _function in _CPU_DEVICE_FUNCTIONS.items():
    if not hasattr(torch.cpu, _name):
        setattr(torch.cpu, _name, _function)

TASKS = ("clean", "heat", "cool")
STATES = ("kitchen", "counter", "fridge", "sink")


def trainer_config(verl_agent_home: str, overrides: list[str]):
    """verl-agent's `ppo_trainer.yaml` with the given dotted overrides (as Hydra applies them)."""
    base = OmegaConf.load(Path(verl_agent_home) / "verl/trainer/config/ppo_trainer.yaml")
    small = [
        "data.max_prompt_length=96",
        "data.max_response_length=6",
        "data.truncation=left",
        "data.train_batch_size=3",
        "data.return_raw_chat=True",
        "env.rollout.n=4",
        "env.max_steps=4",
        "actor_rollout_ref.rollout.n=1",
        "actor_rollout_ref.rollout.top_k=0",
        "actor_rollout_ref.rollout.val_kwargs.top_k=0",
        "actor_rollout_ref.actor.use_invalid_action_penalty=True",
        "actor_rollout_ref.actor.invalid_action_penalty_coef=0.1",
        "actor_rollout_ref.actor.use_torch_compile=False",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu=256",
        "algorithm.gamma=0.95",
        "algorithm.gigpo.mode=mean_std_norm",
        "trainer.n_gpus_per_node=2",
        "trainer.nnodes=1",
        "trainer.logger=[console]",
        "trainer.resume_mode=disable",
        "trainer.total_training_steps=1",
        "trainer.total_epochs=1",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.device=cpu",
    ]
    return OmegaConf.merge(base, OmegaConf.from_dotlist(small + list(overrides)))


class HashGame:
    """A vector of tiny games: the generated text, hashed, picks the move; `clean` etc. name tasks."""

    def __init__(self, tasks: list[str]):
        self.tasks = tasks
        self.state = ["kitchen"] * len(tasks)

    def reset(self):
        self.state = ["kitchen"] * len(self.tasks)
        return list(self.state), [{"won": False} for _ in self.tasks]

    def step(self, moves: list[int]):
        rewards, dones, infos = [], [], []
        for env, move in enumerate(moves):
            won = False
            if move == 1:
                self.state[env] = STATES[(STATES.index(self.state[env]) + 1) % len(STATES)]
            elif move == 2:
                self.state[env] = "counter" if self.state[env] == "kitchen" else "kitchen"
            elif move == 3 and self.state[env] != "kitchen":
                won = True
            rewards.append(10.0 if won else 0.0)
            dones.append(won)
            infos.append({"won": won})
        return list(self.state), np.array(rewards, dtype=np.float32), np.array(dones), infos


def hashed_moves(text_actions: list[str]) -> tuple[list[int], list[bool]]:
    """Move 0 is an invalid action (the agent stays); 1-3 are moves."""
    moves = [zlib.crc32(text.encode("utf-8")) % 4 for text in text_actions]
    return moves, [move != 0 for move in moves]


def game_manager(config, tasks: list[str]):
    """A real `EnvironmentManagerBase` over the hash game, with text and anchor observations."""
    from agent_system.environments.base import EnvironmentManagerBase

    class GameManager(EnvironmentManagerBase):
        def _observations(self, states):
            text = [
                f"Your task is to: {task} something. You are at the {state}."
                for task, state in zip(self.envs.tasks, states)
            ]
            return {"text": text, "image": None, "anchor": list(states)}

        def reset(self, kwargs=None):
            states, infos = self.envs.reset()
            return self._observations(states), infos

        def step(self, text_actions):
            moves, valids = self.projection_f(text_actions)
            states, rewards, dones, infos = self.envs.step(moves)
            for info, valid in zip(infos, valids):
                info["is_action_valid"] = valid
            return self._observations(states), rewards, dones, infos

    return GameManager(HashGame(tasks), hashed_moves, config)


class CpuWorkerGroup:
    """What `fit` asks of the actor/rollout and reference worker groups, on one CPU process."""

    def __init__(self, config, model, tokenizer, reference_worker=None, world_size: int = 2):
        from verl.workers.rollout.hf_rollout import HFRollout

        self.world_size = world_size
        self.tokenizer = tokenizer
        rollout_config = OmegaConf.merge(config.actor_rollout_ref.rollout, {"micro_batch_size": 64})
        self.rollout = HFRollout(model, rollout_config)
        self.reference_worker = reference_worker
        self.trained: list = []

    def generate_sequences(self, prompts):
        # As ActorRolloutRefWorker.generate_sequences does before handing prompts to the rollout.
        prompts.meta_info.update(
            {
                "eos_token_id": self.tokenizer.eos_token_id,
                "pad_token_id": self.tokenizer.pad_token_id,
            }
        )
        return self.rollout.generate_sequences(prompts)

    def compute_log_prob(self, data):
        from verl import DataProto

        zeros = torch.zeros_like(data.batch["responses"], dtype=torch.float32)
        return DataProto.from_dict(tensors={"old_log_probs": zeros, "entropys": zeros.clone()})

    def compute_ref_log_prob(self, data):
        from verl.workers.fsdp_workers import ActorRolloutRefWorker

        return ActorRolloutRefWorker.compute_ref_log_prob(self.reference_worker, data)

    def update_actor(self, data):
        from verl import DataProto

        self.trained.append(copy.deepcopy(data))
        return DataProto(meta_info={"metrics": {}})


def reference_worker(config, model):
    """The minimal object `ActorRolloutRefWorker.compute_ref_log_prob` reads, made of real verl parts."""
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.sharding_manager.fsdp_ulysses import FSDPUlyssesShardingManager

    ref_config = OmegaConf.merge(config.actor_rollout_ref.ref, {"use_torch_compile": False})
    return types.SimpleNamespace(
        _is_lora=False,
        _is_ref=True,
        world_size=1,
        config=config.actor_rollout_ref,
        ulysses_sharding_manager=FSDPUlyssesShardingManager(None),
        ref_policy=DataParallelPPOActor(config=ref_config, actor_module=model),
    )


def prompt_batches(tokenizer, config, n_tasks: int):
    """The launcher's placeholder rows (one user message each) as the train dataloader yields them."""
    import verl.utils.torch_functional as verl_F
    from verl.utils.dataset.rl_dataset import collate_fn
    from verl.utils.model import compute_position_id_with_mask

    rows = []
    for _ in range(n_tasks):
        chat = [{"role": "user", "content": ""}]
        text = tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
        input_ids, attention_mask = verl_F.tokenize_and_postprocess_data(
            prompt=text,
            tokenizer=tokenizer,
            max_length=config.data.max_prompt_length,
            pad_token_id=tokenizer.pad_token_id,
            left_pad=True,
            truncation="left",
        )
        rows.append(
            {
                "input_ids": input_ids[0],
                "attention_mask": attention_mask[0],
                "position_ids": compute_position_id_with_mask(attention_mask)[0],
                "raw_prompt_ids": tokenizer.encode(text, add_special_tokens=False),
                "raw_prompt": chat,
                "data_source": "hashgame",
            }
        )
    return [collate_fn(rows)]


class ReplayCollector:
    """Runs verl-agent's real `TrajectoryCollector` once, then hands every later training run a
    deep copy of that output, so that every arm sees the very same rows."""

    def __init__(self, collector):
        self.collector = collector
        self.first_output = None
        self.validation_outputs: list = []  # validation rollouts run live, every time

    def multi_turn_loop(self, gen_batch, actor_rollout_wg, envs, is_train=True):
        if not is_train:
            output = self.collector.multi_turn_loop(
                gen_batch=gen_batch, actor_rollout_wg=actor_rollout_wg, envs=envs, is_train=False
            )
            self.validation_outputs.append(copy.deepcopy(output))
            return output
        if self.first_output is None:
            self.first_output = self.collector.multi_turn_loop(
                gen_batch=gen_batch, actor_rollout_wg=actor_rollout_wg, envs=envs, is_train=True
            )
        return copy.deepcopy(self.first_output)


def cpu_trainer(
    config, tokenizer, collector, actor_group, *, reference_group=None, envs=None, val_envs=None
):
    """A `RayPPOTrainer` whose `fit` runs here: the attributes `fit` and `_validate` read."""
    from agent_system.reward_manager.episode import EpisodeRewardManager
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    trainer = object.__new__(RayPPOTrainer)
    n_tasks = config.data.train_batch_size
    trainer.config = config
    trainer.tokenizer = tokenizer
    trainer.traj_collector = collector
    trainer.actor_rollout_wg = actor_group
    trainer.ref_policy_wg = reference_group
    trainer.use_reference_policy = reference_group is not None
    trainer.ref_in_actor = False
    trainer.use_rm = False
    trainer.use_critic = False
    trainer.envs = envs or game_manager(
        config,
        [
            TASKS[i // config.env.rollout.n % len(TASKS)]
            for i in range(n_tasks * config.env.rollout.n)
        ],
    )
    trainer.val_envs = val_envs or game_manager(
        config, [TASKS[i % len(TASKS)] for i in range(n_tasks)]
    )
    trainer.reward_fn = EpisodeRewardManager(tokenizer=tokenizer, num_examine=0)
    trainer.val_reward_fn = EpisodeRewardManager(tokenizer=tokenizer, num_examine=0)
    trainer.train_dataloader = prompt_batches(tokenizer, config, n_tasks)
    trainer.val_dataloader = prompt_batches(tokenizer, config, n_tasks)
    trainer.total_training_steps = 1
    trainer.resource_pool_manager = types.SimpleNamespace(
        get_n_gpus=lambda: config.trainer.n_gpus_per_node
    )
    trainer.validation_generations_logger = None
    return trainer


def run_fit(trainer, seed: int = 0):
    """One training step; returns the batch handed to `update_actor` (what the actor trains on)."""
    np.random.seed(seed)  # adjust_batch draws its padding rows from numpy's global generator
    torch.manual_seed(seed)
    os.environ.setdefault("WANDB_MODE", "disabled")
    trainer.fit()
    return trainer.actor_rollout_wg.trained[-1]
