"""`ccpo train --backend verl`: the verl-agent launch, resolved from data before anything is written.

The launch is (protocol overrides) <- (host profile) <- (keys this launcher owns: model, GPUs,
data files, names, schedule, seed, checkpoint folder, resume) <- (the arm). The arm travels by
name to Hydra (`algorithm.adv_estimator=ccpo`, `+algorithm.ccpo.arm`, `+algorithm.ccpo.<flag>`)
and to every Ray worker (environment variables, checked there against the fingerprint by the
setup hook). The resolved `VerlLaunch` is then written down by `run_folder` and started and
followed by `follow`; the checks and policies around it live in `preflight`, `checkout` and
`worker_env`.

Fresh runs use `trainer.resume_mode=disable`: verl's default (`auto`) silently continues
whatever checkpoint sits in the output folder, which once turned a relaunch into a different
run (docs/verl-backend.md, "No silent continuation"). `--resume PATH` is the only way to continue.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.arms import PADDING_MEANINGS, Arm
from ccpo_cli.backends.verl import checkout, entry, preflight, worker_env
from ccpo_cli.backends.verl.protocol import HostProfile, Protocol, hydra_override, load_protocol
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.vocabulary import VERL

BACKEND = VERL
# Starts Ray with the ccpo setup hook, then runs the protocol's entry point (verl's main_ppo).
ENTRY_MODULE = entry.__name__
# Keys the launcher sets from the request, whatever the protocol file says.
LAUNCHER_KEYS = (
    "actor_rollout_ref.model.path",
    "data.train_files",
    "data.val_files",
    "data.train_batch_size",
    "env.rollout.n",
    "env.seed",
    "env.max_steps",
    "trainer.n_gpus_per_node",
    "trainer.nnodes",
    "trainer.experiment_name",
    "trainer.total_epochs",
    "trainer.test_freq",
    "trainer.save_freq",
    "trainer.default_local_dir",
    "hydra.run.dir",
    "trainer.resume_mode",
    "trainer.resume_from_path",
)
# Arm flags that are also protocol keys: the arm's value is the one trained with.
ARM_FLAG_PROTOCOL_KEYS = {
    "gamma": "algorithm.gamma",
    "invalid_penalty": "actor_rollout_ref.actor.invalid_action_penalty_coef",
}


@dataclass(frozen=True)
class VerlLaunchRequest:
    """What the user asked for (CLI options, unchanged); the arm arrives resolved, with its `--set`
    overrides inside it, and is never reloaded by name."""

    arm: Arm
    model: str
    gpus: int
    nnodes: int = 1
    run: str | None = None
    seed: int = 0
    steps: int | None = None  # PPO updates; one epoch of the placeholder data is one step
    tasks: int | None = None  # games per step (data.train_batch_size)
    group: int | None = None  # rollouts per game (env.rollout.n)
    eval_every: int | None = None  # trainer.test_freq
    max_env_steps: int | None = None  # env.max_steps (turn limit per episode)
    save_every: int | None = (
        None  # trainer.save_freq; default: every evaluation (trainer.test_freq)
    )
    ray_address: str | None = None
    verl_agent: Path | None = None
    resume: Path | None = None
    host_profile: str = "reference"
    protocol: str = "alfworld"
    runs_root: Path = Path("ccpo-runs")


@dataclass(frozen=True)
class VerlLaunch:
    """A fully resolved launch: everything run.sh and config.json hold."""

    run: str
    run_dir: Path
    request: VerlLaunchRequest
    arm_spec: worker_env.ArmSpec
    entrypoint: str
    overrides: Mapping[str, Any]  # Hydra key (with its +/++ prefix) -> value, in launch order
    environment: Mapping[str, str]  # exported by run.sh and given to every Ray worker
    worker_environment: Mapping[str, str]
    placeholder_rows: Mapping[str, int]
    placeholder_fields: Mapping[str, str]
    verl_agent: Path | None
    # The checkout's commit and whether it is the tested one (checkout.describe).
    verl_agent_source: Mapping[str, Any] = field(default_factory=dict)
    # What every Ray worker's environment gets: verl-agent's own variables, then the run's.
    worker_runtime_env: Mapping[str, Any] = field(default_factory=dict)
    padding_rule: Mapping[str, str] = field(default_factory=dict)
    checkpoints: Mapping[str, Any] = field(default_factory=dict)

    @property
    def arm(self) -> Arm:
        return self.request.arm

    @property
    def arm_flags(self) -> dict[str, Any]:
        return self.request.arm.flags()

    @property
    def benchmark(self) -> str | None:
        """The benchmark the launch trains on, named by its `env.env_name` (docs/benchmarks.md)."""
        from ccpo_cli.benchmarks import benchmark_for_env_name

        return benchmark_for_env_name(self.overrides.get("env.env_name"))

    @property
    def warnings(self) -> list[str]:
        warning = self.verl_agent_source.get("warning")
        return [warning] if warning else []

    @property
    def data_dir(self) -> Path:
        return self.run_dir / "data"

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    def hydra_overrides(self) -> list[str]:
        return [hydra_override(key, value) for key, value in self.overrides.items()]

    def argv(self, python: str = "python3") -> list[str]:
        return [python, "-m", ENTRY_MODULE, *self.hydra_overrides()]

    def config_document(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "backend": BACKEND,
            "protocol": self.request.protocol,
            "host_profile": self.request.host_profile,
            "arm": {
                "name": self.arm_spec.name,
                "fingerprint": self.arm_spec.fingerprint,
                "overrides": dict(self.arm_spec.overrides),
                "flags": dict(self.arm_flags),
            },
            "model": self.request.model,
            "seed": self.request.seed,
            "gpus_per_node": self.request.gpus,
            "nnodes": self.request.nnodes,
            "ray_address": self.request.ray_address,
            "resume": None if self.request.resume is None else str(self.request.resume),
            "total_steps": self.overrides["trainer.total_epochs"],
            "entrypoint": self.entrypoint,
            "launch_module": ENTRY_MODULE,
            "overrides": dict(self.overrides),
            "hydra_overrides": self.hydra_overrides(),
            "environment": dict(self.environment),
            "worker_environment": dict(self.worker_environment),
            "verl_agent": None if self.verl_agent is None else str(self.verl_agent),
            "verl_agent_commit": self.verl_agent_source.get("commit"),
            "verl_agent_source": dict(self.verl_agent_source),
            "worker_runtime_env": dict(self.worker_runtime_env),
            "padding_rule": dict(self.padding_rule),
            "checkpoints": dict(self.checkpoints),
            "warnings": self.warnings,
            "metrics_file": str(self.metrics_path),
            "metrics_multinode": METRICS_MULTINODE,
        }


# Where metrics land when the trainer's node is not the launcher's (docs/verl-backend.md).
METRICS_MULTINODE = (
    "metrics.jsonl is written by the process that runs verl's TaskRunner, at this path on that node; "
    "with nnodes > 1 make the run folder a shared filesystem path, or copy the file back and run "
    "`ccpo ingest PATH --run RUN --format ccpo`"
)


def padding_rule(arm: Arm) -> dict[str, str]:
    """The padding rule this launch trains with, as the dry-run and config.json state it."""
    return {"rule": arm.padding, "meaning": PADDING_MEANINGS[arm.padding]}


def default_run_name(arm: str, model: str, seed: int) -> str:
    model_tail = model.rstrip("/").split("/")[-1].lower()
    return f"{arm}-{model_tail}-seed{seed}"


def resolve_resume_path(path: Path) -> Path:
    """The `global_step_N` folder to resume from.

    A checkpoint root is read through `latest_checkpointed_iteration.txt` (the trainer writes it
    after a save completes), never through the highest `global_step_*` folder, which may be a
    partial save.
    """
    path = Path(path).expanduser().resolve()
    tracker = path / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        text = tracker.read_text(encoding="utf-8").strip()
        if not text.isdigit():
            raise InvalidInput(f"{tracker}: expected a step number, found {text!r}")
        path = path / f"global_step_{int(text)}"
    if not (path.is_dir() and path.name.startswith("global_step_")):
        raise InvalidInput(
            f"--resume {path}: not a verl checkpoint (a global_step_N folder, or a folder with "
            "latest_checkpointed_iteration.txt)"
        )
    return path


def _check_gpus(request: VerlLaunchRequest, overrides: Mapping[str, Any]) -> None:
    if request.gpus < 1 or request.nnodes < 1:
        raise UsageError("--gpus and --nnodes must be at least 1")
    world = request.gpus * request.nnodes
    batch = int(overrides["data.train_batch_size"])
    if batch % world:
        raise InvalidInput(
            f"{batch} games per step (data.train_batch_size) must divide evenly over {world} GPUs "
            f"({request.nnodes} node(s) x {request.gpus}); use 1, 2, 4, 8 or 16 GPUs for a batch of 16"
        )
    tensor_parallel = int(overrides.get("actor_rollout_ref.rollout.tensor_model_parallel_size", 1))
    if request.gpus % tensor_parallel:
        raise InvalidInput(
            f"vLLM tensor parallel size {tensor_parallel} does not divide {request.gpus} GPUs per node; "
            "use --host-profile lean (tensor parallel 1) or an even GPU count"
        )


def _arm_flag_overrides(
    arm_name: str, fingerprint: str, flags: Mapping[str, Any]
) -> dict[str, Any]:
    arm_keys: dict[str, Any] = {
        "algorithm.adv_estimator": worker_env.ESTIMATOR_NAME,
        "+algorithm.ccpo.arm": arm_name,
        "+algorithm.ccpo.fingerprint": fingerprint,
    }
    for flag, value in flags.items():
        if flag in ARM_FLAG_PROTOCOL_KEYS:
            arm_keys[ARM_FLAG_PROTOCOL_KEYS[flag]] = value
        arm_keys[f"+algorithm.ccpo.{flag}"] = value
    return arm_keys


def _check_schedule(request: VerlLaunchRequest) -> None:
    """UsageError for a schedule option that is given and not positive."""
    schedule = {
        "--steps": request.steps,
        "--tasks": request.tasks,
        "--group": request.group,
        "--eval-every": request.eval_every,
        "--max-steps": request.max_env_steps,
    }
    for option, value in schedule.items():
        if value is not None and value < 1:
            raise UsageError(f"{option} must be at least 1, got {value}")


def _layered_overrides(
    protocol: Protocol, profile: HostProfile, request: VerlLaunchRequest, run: str, run_dir: Path
) -> dict[str, Any]:
    """The protocol's overrides, in their order, under the host profile's and the launcher's
    own values, and the save frequency."""
    overrides: dict[str, Any] = dict(protocol.overrides)
    # Later layers replace values in place, keeping the protocol's order; new keys go at the end.
    overrides.update(profile.overrides)
    overrides.update(_launcher_values(request, run, run_dir))
    # Saving changes nothing in training: every profile saves, by default at every evaluation.
    overrides["trainer.save_freq"] = preflight.save_every(
        request.save_every, overrides["trainer.test_freq"]
    )
    return overrides


def _checkpoints(
    request: VerlLaunchRequest, overrides: dict[str, Any], run_dir: Path
) -> dict[str, Any]:
    """How the run saves: how often (and who said so), where, and which checkpoints it keeps."""
    return {
        "save_freq": overrides["trainer.save_freq"],
        "folder": str(run_dir / "checkpoints"),
        "keep": preflight.KEEP_POLICY,
        "source": "--save-every"
        if request.save_every is not None
        else "every evaluation (trainer.test_freq)",
    }


def _run_name(request: VerlLaunchRequest) -> str:
    """--run, or the default name of (arm, model, seed); UsageError unless it is one folder name."""
    run = request.run or default_run_name(request.arm.name, request.model, request.seed)
    if "/" in run or run.strip(".") == "" or run != run.strip():
        raise UsageError(
            f"--run {run!r}: a run name is one folder name (no '/', not '.' or '..', no surrounding spaces)"
        )
    return run


# The schedule options a request may set, and the verl-agent setting each one sets.
_SCHEDULE_OVERRIDES = (
    ("tasks", "data.train_batch_size"),
    ("group", "env.rollout.n"),
    ("steps", "trainer.total_epochs"),
    ("eval_every", "trainer.test_freq"),
    ("max_env_steps", "env.max_steps"),
)


def _launcher_values(request: VerlLaunchRequest, run: str, run_dir: Path) -> dict[str, Any]:
    """The settings the launcher decides over the protocol's and the profile's: the model, the
    run's folders, the seed, the GPUs, a resume, and the schedule options the request sets."""
    data_dir = run_dir / "data"
    resume_from = resolve_resume_path(request.resume) if request.resume is not None else None
    launcher_values: dict[str, Any] = {
        "actor_rollout_ref.model.path": request.model,
        "data.train_files": str(data_dir / "train.parquet"),
        "data.val_files": str(data_dir / "test.parquet"),
        "env.seed": request.seed,
        "trainer.n_gpus_per_node": request.gpus,
        "trainer.nnodes": request.nnodes,
        "trainer.experiment_name": run,
        "trainer.default_local_dir": str(run_dir / "checkpoints"),
        # Hydra's own output folder: in the run folder, not inside the (possibly read-only) checkout run.sh starts in.
        "hydra.run.dir": str(run_dir / "hydra"),
        "trainer.resume_mode": "disable" if resume_from is None else "resume_path",
    }
    if resume_from is not None:
        launcher_values["trainer.resume_from_path"] = str(resume_from)
    for field_name, key in _SCHEDULE_OVERRIDES:
        if getattr(request, field_name) is not None:
            launcher_values[key] = getattr(request, field_name)
    return launcher_values


def build_launch(request: VerlLaunchRequest, *, protocol: Protocol | None = None) -> VerlLaunch:
    """Resolve a request into a launch; reads configs only, writes nothing, starts nothing."""
    protocol = protocol or load_protocol(request.protocol)
    profile = protocol.host_profile(request.host_profile)
    _check_schedule(request)
    arm = request.arm
    arm_spec = worker_env.ArmSpec.of(arm)
    run = _run_name(request)
    run_dir = (Path(request.runs_root) / run).resolve()
    overrides = _layered_overrides(protocol, profile, request, run, run_dir)
    _check_gpus(request, overrides)
    uses_features = _arm_uses_features(arm)
    preflight.check_lora_with_features(overrides, arm.name, uses_features)

    worker_environment = worker_env.run_environment(
        arm_spec, run, run_dir / "metrics.jsonl", uses_features
    )
    overrides.update(_arm_flag_overrides(arm.name, arm.fingerprint, arm.flags()))

    environment = entry.launch_environment(
        {**protocol.environment, **profile.environment, **worker_environment},
        protocol.entrypoint,
        request.ray_address,
    )
    home = checkout.locate(request.verl_agent)
    return VerlLaunch(
        run=run,
        run_dir=run_dir,
        request=request,
        arm_spec=arm_spec,
        entrypoint=protocol.entrypoint,
        overrides=overrides,
        environment=environment,
        worker_environment=worker_environment,
        placeholder_rows=protocol.placeholder_rows(int(overrides["data.train_batch_size"])),
        placeholder_fields=protocol.placeholder_fields(),
        verl_agent=home,
        verl_agent_source=checkout.describe(home),
        worker_runtime_env=entry.worker_runtime_env(home, environment),
        padding_rule=padding_rule(arm),
        checkpoints=_checkpoints(request, overrides, run_dir),
    )


def _arm_uses_features(arm: Arm) -> bool:
    """Whether the reference pass must keep last-prompt-token states for this arm."""
    from ccpo_cli.arms import features_active

    return features_active(arm)
