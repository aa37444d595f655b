"""Advantages on a batch built and carried by verl-agent's own code, with the hook's patches on.

One rollout comes from verl-agent's `TrajectoryCollector` (tiny random Qwen2 through `HFRollout`,
the hash game in a real `EnvironmentManagerBase`); every training run below replays it through the
real `RayPPOTrainer.fit` (see cpu_trainer.py for what is real and what stands in), once on a
batch that `adjust_batch` pads and `_balance_batch` reorders over two ranks, once on one rank
with nothing to pad. What `update_actor` receives is compared

* for every arm, with `ccpo estimate` run on the same rows (the CLI, in a subprocess);
* for the grpo and gigpo arms (padding = upstream), with verl-agent's own `compute_advantage`
  under `grpo` / `gigpo` on the same replayed rollout and the same padding draw.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from ccpo_cli.arms import features_active, load_arm
from ccpo_cli.backends.verl import setup_hook, worker_env
from ccpo_cli.backends.verl.adapter import SOURCE_ROW_KEY, estimator_inputs

pytestmark = pytest.mark.slow  # each test runs verl-agent's code for seconds to a minute

ARMS = ("grpo", "gigpo", "return-hard", "return-hard-fbjw", "global-successor")
LAYOUTS = {
    # two ranks, micro-batches of 9: the batch is padded to a multiple of 18, then balanced
    "padded": [
        "trainer.n_gpus_per_node=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=9",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=9",
    ],
    "unpadded": [
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
    ],
}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def parts(verl_agent_home):
    from agent_system.multi_turn_rollout import TrajectoryCollector
    from helpers_tiny_lm import tiny_qwen2, train_tokenizer

    from verl_integration import cpu_trainer

    tokenizer = train_tokenizer(cpu_trainer.STATES + cpu_trainer.TASKS)
    model = tiny_qwen2(tokenizer)
    with torch.no_grad():  # a long end-of-turn embedding: responses end at different lengths
        model.model.embed_tokens.weight[tokenizer.eos_token_id] *= 60
    config = cpu_trainer.trainer_config(verl_agent_home, LAYOUTS["padded"])
    torch.manual_seed(0)
    collector = cpu_trainer.ReplayCollector(TrajectoryCollector(config, tokenizer))
    return {
        "home": verl_agent_home,
        "tokenizer": tokenizer,
        "model": model,
        "collector": collector,
        "runs": {},
    }


def trained_batch(parts, estimator: str, layout: str, arm=None):
    """The batch `update_actor` receives after one `fit` step (cached per estimator/arm/layout)."""
    from verl_integration import cpu_trainer

    key = (estimator, arm.name if arm else None, layout)
    if key in parts["runs"]:
        return parts["runs"][key]
    config = cpu_trainer.trainer_config(
        parts["home"], LAYOUTS[layout] + [f"algorithm.adv_estimator={estimator}"]
    )
    ranks = config.trainer.n_gpus_per_node
    actor = cpu_trainer.CpuWorkerGroup(config, parts["model"], parts["tokenizer"], world_size=ranks)
    reference = None
    if arm is not None and features_active(arm):
        worker = cpu_trainer.reference_worker(config, parts["model"])
        reference = cpu_trainer.CpuWorkerGroup(
            config, parts["model"], parts["tokenizer"], reference_worker=worker, world_size=ranks
        )
    trainer = cpu_trainer.cpu_trainer(
        config, parts["tokenizer"], parts["collector"], actor, reference_group=reference
    )
    batch = cpu_trainer.run_fit(trainer, seed=0)
    parts["runs"][key] = batch
    return batch


@pytest.fixture
def hook_for(monkeypatch):
    """Start the setup hook for an arm as a Ray worker would, with the launcher's environment."""

    def start(arm):
        spec = worker_env.ArmSpec(arm.name, arm.fingerprint, {})
        for name, value in spec.to_environ().items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv(worker_env.ARM_SET, raising=False)
        monkeypatch.delenv(worker_env.METRICS_JSONL, raising=False)
        monkeypatch.setenv(worker_env.CAPTURE_FEATURES, "1" if features_active(arm) else "0")
        setup_hook.setup()

    return start


def ccpo_estimate(arm_name: str, inputs: dict, folder: Path) -> dict:
    """`ccpo estimate --arm ARM --input batch.json --output out.json`, as a user runs it."""
    document = {key: value.tolist() for key, value in inputs.items()}
    source, output = folder / "batch.json", folder / "advantages.json"
    source.write_text(json.dumps(document), encoding="utf-8")
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ccpo_cli",
            "estimate",
            "--arm",
            arm_name,
            "--input",
            str(source),
            "--output",
            str(output),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(output.read_text(encoding="utf-8"))


def padding_count(batch) -> int:
    return len(batch) - len(set(np.asarray(batch.non_tensor_batch[SOURCE_ROW_KEY]).tolist()))


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("arm_name", ARMS)
def test_hook_gives_what_ccpo_estimate_gives_on_the_same_rows(
    parts, hook_for, tmp_path, arm_name, layout
):
    arm = load_arm(arm_name)
    hook_for(arm)
    batch = trained_batch(parts, "ccpo", layout, arm)
    pads = padding_count(batch)
    assert (pads > 0) == (layout == "padded")
    inputs = estimator_inputs(batch, with_features=features_active(arm))
    assert ("phi_feats" in inputs) == features_active(arm)
    estimated = ccpo_estimate(arm_name, inputs, tmp_path)
    assert estimated["fingerprint"] == arm.fingerprint
    trained = batch.batch["advantages"].numpy()
    difference = float(
        np.max(np.abs(trained - np.asarray(estimated["advantages"], dtype=np.float32)))
    )
    print(
        f"{arm_name} {layout}: {len(batch)} rows, {pads} padding, max |hook - ccpo estimate| = {difference:.3g}"
    )
    assert difference <= 1e-6
    assert np.abs(trained).sum() > 0 and torch.equal(
        batch.batch["returns"], batch.batch["advantages"]
    )
    lengths = batch.batch["response_mask"].sum(-1)
    assert len(set(lengths.tolist())) > 2  # responses of several lengths: the masks matter


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("arm_name", ["grpo", "gigpo"])
def test_baseline_arms_equal_verl_agents_own_estimator(parts, hook_for, arm_name, layout):
    arm = load_arm(arm_name)
    assert arm.padding == "upstream"
    hook_for(arm)
    ours = trained_batch(parts, "ccpo", layout, arm)
    upstream = trained_batch(parts, arm_name, layout)
    # Same replayed rollout, same padding draw, same balancing: row for row the same batch.
    assert torch.equal(ours.batch["input_ids"], upstream.batch["input_ids"])
    assert (padding_count(ours) > 0) == (layout == "padded")
    mask = ours.batch["response_mask"].bool()
    ours_rows = ours.batch["advantages"][mask.any(-1)].numpy()
    difference = float(
        np.abs(ours.batch["advantages"].numpy() - upstream.batch["advantages"].numpy()).max()
    )
    print(
        f"{arm_name} {layout}: {len(ours)} rows ({padding_count(ours)} padding); max |ccpo - verl-agent| = {difference:.3g}"
    )
    assert difference <= 1e-5
    assert np.abs(ours_rows).sum() > 0
    if layout == "padded":
        # With the inert rule the same rows would train on other advantages than upstream's.
        inert = setup_hook.apply_arm(copy.deepcopy(ours), arm, padding="inert")
        real = ~estimator_inputs(inert)["is_pad"]
        apart = np.abs(
            inert.batch["advantages"].numpy() - upstream.batch["advantages"].numpy()
        ).max(axis=1)
        print(
            f"{arm_name} {layout}: padding = inert would differ from verl-agent by up to {apart[real].max():.3g} "
            f"on real rows ({apart.max():.3g} with the copies)"
        )
        assert apart[real].max() > 1e-2
