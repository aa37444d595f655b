"""`ccpo train --backend verl`: the verl-agent launch, built from data and written down first.

One concern over 400 lines: resolving a launch, writing it down and following it share the
`VerlLaunch` record; the checks and policies around it live in `preflight`, `checkout` and
`worker_env`. (The run-following half, `start` and its ingestion, is the next to move out.)

The launch is (protocol overrides) <- (host profile) <- (keys this launcher owns: model, GPUs,
data files, names, schedule, seed, checkpoint folder, resume) <- (the arm). The arm travels by
name to Hydra (`algorithm.adv_estimator=ccpo`, `+algorithm.ccpo.arm`, `+algorithm.ccpo.<flag>`)
and to every Ray worker (environment variables, checked there against the fingerprint by the
setup hook). Before anything starts, the run folder holds `config.json`, a regenerated
`run.sh` and the placeholder parquet files verl-agent's data loader needs.

Fresh runs use `trainer.resume_mode=disable`: verl's default (`auto`) silently continues
whatever checkpoint sits in the output folder, which once turned a relaunch into a different
run (docs/verl-backend.md, "No silent continuation"). `--resume PATH` is the only way to continue.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccpo_cli.backends.verl import checkout, entry, preflight, worker_env
from ccpo_cli.backends.verl.protocol import Protocol, hydra_override, load_protocol
from ccpo_cli.errors import CcpoError, InvalidInput, UsageError

if TYPE_CHECKING:
    from ccpo_cli.arms import Arm

BACKEND = "verl"
# Starts Ray with the ccpo setup hook, then runs the protocol's entry point (verl's main_ppo).
ENTRY_MODULE = entry.__name__
VERL_AGENT_HOME = "VERL_AGENT_HOME"
# The interpreter of the verl-agent environment (it pins its own torch/vLLM/Ray and cannot share
# this one); run.sh falls back to python3 on PATH.
VERL_PYTHON = "CCPO_VERL_PYTHON"
GET_VERL_AGENT = (
    "verl-agent is not on PyPI: clone https://github.com/langfengQ/verl-agent, install it in its own "
    "environment (its README: Python 3.12, vllm==0.11.0, flash-attn, `pip install -e .`, alfworld, "
    "`alfworld-download -f`), install ccpo into that environment too, then pass "
    f"--verl-agent PATH or set {VERL_AGENT_HOME}"
)
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
    """What the user asked for (CLI options, unchanged)."""

    arm: str
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
    save_every: int | None = None  # trainer.save_freq; default: every evaluation (trainer.test_freq)
    arm_overrides: Mapping[str, str] = field(default_factory=dict)
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
    arm_flags: Mapping[str, Any]
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

    def run_script(self) -> str:
        return render_run_script(self)

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
# How the trainer's padding copies of rows (verl-agent's adjust_batch) enter the arm's statistics:
# the arm's `padding` flag (part of its fingerprint; docs/verl-backend.md says which default and why).
PADDING_RULES = {
    "inert": "padding copies get advantage 0 and are left out of every group statistic",
    "upstream": "padding copies are counted in group statistics and trained on, as verl-agent's own grpo/gigpo do",
}


def padding_rule(arm: Any) -> dict[str, str]:
    """The padding rule this launch trains with, as the dry-run and config.json state it."""
    rule = str(getattr(arm, "padding", "inert"))
    return {"rule": rule, "meaning": PADDING_RULES.get(rule, "not recorded")}


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


def _positive(value: int | None, option: str) -> int | None:
    if value is not None and value < 1:
        raise UsageError(f"{option} must be at least 1, got {value}")
    return value


def _load_arm(name: str, overrides: Mapping[str, str]):
    from ccpo_cli.arms import load_arm

    return load_arm(name, dict(overrides) or None)


def _arm_flag_overrides(arm_name: str, fingerprint: str, flags: Mapping[str, Any]) -> dict[str, Any]:
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


def _merge(ordered: dict[str, Any], updates: Mapping[str, Any]) -> None:
    """Replace values in place (keeping the protocol's order); new keys go at the end."""
    for key, value in updates.items():
        ordered[key] = value


def build_launch(request: VerlLaunchRequest, *, protocol: Protocol | None = None, arm: Arm | None = None) -> VerlLaunch:
    """Resolve a request into a launch; reads configs only, writes nothing, starts nothing."""
    protocol = protocol or load_protocol(request.protocol)
    profile = protocol.host_profile(request.host_profile)
    schedule = {"--steps": request.steps, "--tasks": request.tasks, "--group": request.group,
                "--eval-every": request.eval_every, "--max-steps": request.max_env_steps}
    for option, value in schedule.items():
        _positive(value, option)
    arm = arm if arm is not None else _load_arm(request.arm, request.arm_overrides)
    arm_spec = worker_env.ArmSpec(name=arm.name, fingerprint=arm.fingerprint, overrides=dict(request.arm_overrides))
    flags = arm.flags()

    run = request.run or default_run_name(arm.name, request.model, request.seed)
    if "/" in run or run.strip(".") == "" or run != run.strip():
        raise UsageError(f"--run {run!r}: a run name is one folder name (no '/', not '.' or '..', no surrounding spaces)")
    run_dir = (Path(request.runs_root) / run).resolve()
    data_dir = run_dir / "data"
    resume_from = resolve_resume_path(request.resume) if request.resume is not None else None

    overrides: dict[str, Any] = dict(protocol.overrides)
    _merge(overrides, profile.overrides)
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
    if request.tasks is not None:
        launcher_values["data.train_batch_size"] = request.tasks
    if request.group is not None:
        launcher_values["env.rollout.n"] = request.group
    if request.steps is not None:
        launcher_values["trainer.total_epochs"] = request.steps
    if request.eval_every is not None:
        launcher_values["trainer.test_freq"] = request.eval_every
    if request.max_env_steps is not None:
        launcher_values["env.max_steps"] = request.max_env_steps
    _merge(overrides, launcher_values)
    # Saving changes nothing in training: every profile saves, by default at every evaluation.
    overrides["trainer.save_freq"] = preflight.save_every(request.save_every, overrides["trainer.test_freq"])
    _check_gpus(request, overrides)
    uses_features = _arm_uses_features(arm)
    preflight.check_lora_with_features(overrides, arm.name, uses_features)

    worker_environment = {
        **arm_spec.to_environ(),
        worker_env.RUN: run,
        worker_env.METRICS_JSONL: str(run_dir / "metrics.jsonl"),
        worker_env.CAPTURE_FEATURES: "1" if uses_features else "0",
    }
    _merge(overrides, _arm_flag_overrides(arm.name, arm.fingerprint, flags))

    environment = {**protocol.environment, **profile.environment, **worker_environment}
    environment[entry.ENTRYPOINT] = protocol.entrypoint
    if request.ray_address:
        environment[entry.RAY_ADDRESS] = request.ray_address
    environment[entry.FORWARD_ENV] = ",".join(name for name in environment if name != entry.FORWARD_ENV)
    train_rows = int(overrides["data.train_batch_size"])
    placeholder = protocol.placeholder_data
    home = _find_verl_agent(request.verl_agent)
    verl_env_vars = checkout.ray_runtime_env_vars(home)
    forwarded = {name: value for name, value in environment.items() if name != entry.FORWARD_ENV}
    return VerlLaunch(
        run=run,
        run_dir=run_dir,
        request=request,
        arm_spec=arm_spec,
        arm_flags=flags,
        entrypoint=protocol.entrypoint,
        overrides=overrides,
        environment=environment,
        worker_environment=worker_environment,
        placeholder_rows={"train": train_rows, "test": int(placeholder.get("val_rows", 128))},
        placeholder_fields={
            "data_source": str(placeholder.get("data_source", "text")),
            "ability": str(placeholder.get("ability", "agent")),
        },
        verl_agent=home,
        verl_agent_source=checkout.describe(home),
        worker_runtime_env={
            "env_vars": checkout.merged_worker_env(verl_env_vars, entry.VERL_WORKER_DEFAULTS, forwarded),
            "from_verl_agent": (
                f"{checkout.CONSTANTS_MODULE} (read from the checkout; merged again from the real module at launch)"
                if verl_env_vars is not None else
                "not found in the checkout: verl's older defaults are used"
            ),
            "worker_process_setup_hook": entry.SETUP_HOOK,
        },
        padding_rule=padding_rule(arm),
        checkpoints={
            "save_freq": overrides["trainer.save_freq"],
            "folder": str(run_dir / "checkpoints"),
            "keep": preflight.KEEP_POLICY,
            "source": "--save-every" if request.save_every is not None else "every evaluation (trainer.test_freq)",
        },
    )


def _arm_uses_features(arm: Arm) -> bool:
    """Whether the reference pass must keep last-prompt-token states for this arm."""
    from ccpo_cli.arms import features_active

    return features_active(arm)


def _find_verl_agent(path: Path | None) -> Path | None:
    candidate = path if path is not None else os.environ.get(VERL_AGENT_HOME)
    if not candidate:
        return None
    return Path(candidate).expanduser().resolve()


def require_verl_agent(launch: VerlLaunch) -> Path:
    """The verl-agent checkout to launch from, or a CcpoError saying how to get one."""
    home = launch.verl_agent
    if home is None:
        raise CcpoError(f"no verl-agent checkout: {GET_VERL_AGENT}")
    if not (home / "verl" / "trainer" / "main_ppo.py").is_file() or not (home / "agent_system").is_dir():
        raise CcpoError(f"{home} is not a verl-agent checkout (no verl/trainer/main_ppo.py and agent_system/); {GET_VERL_AGENT}")
    return home


def render_run_script(launch: VerlLaunch) -> str:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [
        "#!/usr/bin/env bash",
        f"# Regenerated by `ccpo train --backend verl` at {stamp} for run {launch.run}.",
        f"# Arm {launch.arm_spec.name} (fingerprint {launch.arm_spec.fingerprint}); change the protocol,",
        "# the host profile or the arm and relaunch rather than editing this file.",
        f"# verl-agent commit: {launch.verl_agent_source.get('commit') or 'not known'}"
        f" (tested: {launch.verl_agent_source.get('tested_commit', checkout.TESTED_COMMIT)})",
        f"# Padding rule: {launch.padding_rule.get('rule', 'not recorded')}",
        f"# Checkpoints: every {launch.checkpoints.get('save_freq')} steps; keep {launch.checkpoints.get('keep')}",
        *(f"# WARNING: {warning}" for warning in launch.warnings),
        "set -euo pipefail",
    ]
    for name, value in launch.environment.items():
        lines.append(f"export {name}={shlex.quote(str(value))}")
    if launch.verl_agent is not None:
        lines.append(f': "${{{VERL_AGENT_HOME}:={launch.verl_agent}}}"')
    lines.append(f'cd "${{{VERL_AGENT_HOME}:?set {VERL_AGENT_HOME} to a verl-agent checkout}}"')
    # The entry module starts Ray with the ccpo worker hook, then runs verl's `main_ppo` (Hydra).
    command = [f'exec "${{{VERL_PYTHON}:-python3}}" -m {ENTRY_MODULE}']
    command += [f"    {shlex.quote(item)}" for item in launch.hydra_overrides()]
    command[-1] += ' "$@"'
    lines.append(" \\\n".join(command))
    return "\n".join(lines) + "\n"


def write_placeholder_parquets(data_dir: Path, rows: Mapping[str, int], fields: Mapping[str, str]) -> dict[str, Path]:
    """verl-agent's `{train,test}.parquet`: rows that only carry count and modality.

    Each row is one empty user message; the environment supplies the real observation. Written
    here because the reference preparation script downloads an unrelated dataset for them.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    data_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, Path] = {}
    for split, count in rows.items():
        table = pa.table(
            {
                "data_source": [fields["data_source"]] * count,
                "prompt": [[{"role": "user", "content": ""}] for _ in range(count)],
                "ability": [fields["ability"]] * count,
                "extra_info": [{"split": split, "index": index} for index in range(count)],
            }
        )
        path = data_dir / f"{split}.parquet"
        pq.write_table(table, path)
        written[split] = path
    return written


def _launched_before(run_dir: Path) -> bool:
    config = run_dir / "config.json"
    if not config.is_file():
        return False
    try:
        return bool(json.loads(config.read_text(encoding="utf-8")).get("launched_at"))
    except (OSError, ValueError):
        return True


def refuse_silent_continuation(launch: VerlLaunch) -> None:
    if launch.request.resume is None and _launched_before(launch.run_dir):
        raise InvalidInput(
            f"run folder {launch.run_dir} belongs to a run that was already launched; pass "
            "--resume PATH to continue it or --run NAME for a new run"
        )


def prepare_run_folder(launch: VerlLaunch, *, provenance: Mapping[str, Any] | None = None) -> Path:
    """Write config.json, run.sh and the placeholder data; refuse to reuse a launched run's folder."""
    refuse_silent_continuation(launch)
    launch.run_dir.mkdir(parents=True, exist_ok=True)
    previous = launch.run_dir / "config.json"
    if _launched_before(launch.run_dir):  # a resume: keep the earlier launch's record beside the new one
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
        previous.rename(launch.run_dir / f"config.{stamp}.json")
    write_placeholder_parquets(launch.data_dir, launch.placeholder_rows, launch.placeholder_fields)
    document = launch.config_document()
    if provenance:
        document["provenance"] = dict(provenance)
    document["written_at"] = datetime.datetime.now(datetime.UTC).isoformat()
    (launch.run_dir / "config.json").write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    script = launch.run_dir / "run.sh"
    script.write_text(launch.run_script(), encoding="utf-8")
    script.chmod(0o755)
    return launch.run_dir


def provenance() -> dict[str, Any]:
    """Code version and package versions of the launching environment."""
    from ccpo_cli.backends.local.provenance import git_state, package_versions

    commit, dirty = git_state()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "package_versions": package_versions(("ccpo", "ray", "pyarrow", "torch", "transformers")),
    }


def _mark_launched(launch: VerlLaunch, pid: int) -> None:
    path = launch.run_dir / "config.json"
    document = json.loads(path.read_text(encoding="utf-8"))
    document["launched_at"] = datetime.datetime.now(datetime.UTC).isoformat()
    document["pid"] = pid
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (launch.run_dir / "pid").write_text(f"{pid}\n", encoding="utf-8")


def record_run(db: Any, launch: VerlLaunch, provenance_info: Mapping[str, Any], *, status: str) -> int:
    from ccpo_cli.store import ensure_run

    return ensure_run(
        db,
        launch.run,
        arm=launch.arm_spec.name,
        arm_fingerprint=launch.arm_spec.fingerprint,
        seed=launch.request.seed,
        base_model=launch.request.model,
        backend=BACKEND,
        total_steps=int(launch.overrides["trainer.total_epochs"]),
        status=status,
        hardware=f"{launch.request.nnodes} node(s) x {launch.request.gpus} GPU",
        git_commit=provenance_info.get("git_commit"),
        git_dirty=provenance_info.get("git_dirty"),
        package_versions=provenance_info.get("package_versions"),
        config=launch.config_document(),
    )


def ingest_metrics(db: Any, launch: VerlLaunch) -> Any:
    """Bring the run's metrics file into runs.db (idempotent; safe to call while it grows)."""
    from ccpo_cli.store.ingest import ingest_file

    if not launch.metrics_path.is_file() or launch.metrics_path.stat().st_size == 0:
        return None
    return ingest_file(
        db, launch.metrics_path, launch.run, fmt="ccpo", arm=launch.arm_spec.name,
        arm_fingerprint=launch.arm_spec.fingerprint, backend=BACKEND,
    )


def start(
    launch: VerlLaunch,
    db: Any,
    *,
    poll_seconds: float = 30.0,
    log: Callable[[str], None] = lambda message: print(message, file=sys.stderr),
) -> int:
    """Launch run.sh, ingest its metrics while it runs, and return its exit code.

    The launcher follows the trainer (it ignores SIGTERM, so it is stopped by recorded pid);
    Ctrl-C here stops following and leaves the run going, its pid in the run folder.
    """
    home = require_verl_agent(launch)
    preflight.check_wandb(launch.overrides, launch.request.host_profile, os.environ, Path.home())
    refuse_silent_continuation(launch)
    for warning in launch.warnings:
        log(f"run {launch.run}: warning: {warning}")
    info = provenance()
    # The database checks the run's identity (arm, fingerprint, seed, model) before any file changes.
    record_run(db, launch, info, status="created")
    prepare_run_folder(launch, provenance=info)
    env = {**os.environ, **launch.environment, VERL_AGENT_HOME: str(home)}
    log_path = launch.run_dir / "train.log"
    from ccpo_cli.store import update_run_state

    try:
        with log_path.open("ab") as log_file:
            process = subprocess.Popen(
                ["bash", str(launch.run_dir / "run.sh")], cwd=home, env=env,
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )
    except OSError as error:
        update_run_state(db, launch.run, status="failed")
        raise CcpoError(f"run {launch.run}: could not start run.sh ({error})") from None
    _mark_launched(launch, process.pid)
    update_run_state(db, launch.run, status="running")
    log(f"run {launch.run}: started pid {process.pid}; log {log_path}; metrics {launch.metrics_path}")
    while True:
        try:
            code = process.wait(timeout=poll_seconds)
            break
        except subprocess.TimeoutExpired:
            _ingest_progress(db, launch, log)
    _ingest_progress(db, launch, log)
    update_run_state(db, launch.run, status="finished" if code == 0 else "failed")
    return code


def _ingest_progress(db: Any, launch: VerlLaunch, log: Callable[[str], None]) -> None:
    try:
        report = ingest_metrics(db, launch)
    except InvalidInput as error:  # reported, and read again at the next poll
        log(f"run {launch.run}: metrics not ingested yet ({error})")
        return
    if report is not None and report.new:
        log(f"run {launch.run}: step {report.last_step}, {report.new} new evaluation(s) recorded")
    _keep_newest_and_best(db, launch, log)


def _keep_newest_and_best(db: Any, launch: VerlLaunch, log: Callable[[str], None]) -> None:
    from ccpo_cli.store import best_evaluation, run_evaluations

    best = best_evaluation(run_evaluations(db, launch.run))
    removed = preflight.prune_checkpoints(launch.run_dir / "checkpoints", None if best is None else best["step"])
    if removed:
        log(f"run {launch.run}: removed {len(removed)} checkpoint(s) that are neither the newest nor the best-evaluated")
