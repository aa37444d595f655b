"""`ccpo train --arm ARM`: train one arm, on the CPU (local backend) or a GPU cluster (verl).

`--backend local` is the built-in small policy on the real ALFWorld engine
(`ccpo_cli.backends.local.train_arm`, owned by the local-trainer area); `--backend verl` builds
the verl-agent launch (`ccpo_cli.backends.verl`). Without `--backend`, a machine with a CUDA GPU
uses verl and any other machine uses local. Backend defaults for --steps/--tasks/--group/
--eval-every differ (the local backend is scaled for two cores, verl follows the protocol file),
so an option left out means "the backend's default".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ccpo_cli.cli.app import app
from ccpo_cli.names import check_run_name
from ccpo_cli.cli.common import emit_json, handle_errors, info, settings, stdout_console
from ccpo_cli.errors import CcpoError, UsageError

BACKENDS = ("local", "verl")


def _gpu_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # a broken CUDA install must not break the CPU path
        return False


def default_backend() -> str:
    return "verl" if _gpu_available() else "local"


def parse_seeds(seeds: str | None, seed: int | None) -> list[int]:
    if seeds is None:
        return [0 if seed is None else seed]
    if seed is not None:
        raise UsageError("give either --seed or --seeds, not both")
    try:
        values = [int(part) for part in seeds.split(",") if part.strip()]
    except ValueError:
        raise UsageError(f"--seeds {seeds!r}: expected comma-separated integers such as 0,1,2") from None
    if not values or len(set(values)) != len(values):
        raise UsageError(f"--seeds {seeds!r}: expected distinct comma-separated integers")
    return values


def _run_name(run: str | None, seed: int, several: bool) -> str | None:
    if run is None:
        return None
    return check_run_name(f"{run}-seed{seed}" if several else run)


def _train_local(ctx: typer.Context, arm, seeds: list[int], options: dict[str, Any], as_json: bool, dry_run: bool) -> None:
    from ccpo_cli.backends.local import train_arm  # torch only when training locally

    db_path = settings(ctx).db
    runs = []
    for seed in seeds:
        name = _run_name(options["run"], seed, len(seeds) > 1) or f"{arm.name}-seed{seed}"
        kwargs = {key: value for key, value in options["train"].items() if value is not None}
        if dry_run:
            runs.append({"run": name, "backend": "local", "arm": arm.name, "fingerprint": arm.fingerprint,
                         "seed": seed, "options": kwargs, "resume": options["resume"]})
            continue
        resume = options["resume"]
        result = train_arm(
            arm, name, db_path, seed=seed, resume=resume is not None,
            run_dir=resume, log=lambda message: info(ctx, message), **kwargs,
        )
        runs.append({
            "run": result.run, "backend": "local", "arm": arm.name, "fingerprint": arm.fingerprint, "seed": seed,
            "run_dir": str(result.run_dir), "last_step": result.last_step, "train_wall_s": result.train_wall_s,
            "evaluations": result.evaluations, "step1_rollout_hash": result.step1_rollout_hash,
        })
    _report(runs, as_json, dry_run)


def _report(runs: list[dict[str, Any]], as_json: bool, dry_run: bool) -> None:
    if as_json:
        emit_json({"dry_run": dry_run, "runs": runs})
        return
    for run in runs:
        if dry_run:
            stdout_console.print(json.dumps(run, indent=2, default=str), markup=False)
        else:
            evaluations = run.get("evaluations") or []
            last = evaluations[-1] if evaluations else None
            held_out = f", held-out {last['success']:.1f}% at step {last['step']}" if last else ""
            stdout_console.print(f"{run['run']}: {run['arm']} seed {run['seed']}, {run['last_step']} steps{held_out}", markup=False)


def _train_verl(ctx: typer.Context, arm, seeds: list[int], options: dict[str, Any], as_json: bool, dry_run: bool) -> None:
    from ccpo_cli.backends.verl import VerlLaunchRequest, build_launch, prepare_run_folder, start
    from ccpo_cli.store import open_db

    verl = options["verl"]
    if not verl["model"]:
        raise UsageError("--backend verl needs --model (a Hugging Face model id or path), e.g. --model Qwen/Qwen2.5-7B-Instruct")
    if verl["gpus"] is None:
        raise UsageError("--backend verl needs --gpus (GPUs per node)")
    runs_root = Path(settings(ctx).db).resolve().parent / "ccpo-runs"
    train = options["train"]
    launches = []
    for seed in seeds:
        request = VerlLaunchRequest(
            arm=arm.name, model=verl["model"], gpus=verl["gpus"], nnodes=verl["nnodes"],
            run=_run_name(options["run"], seed, len(seeds) > 1), seed=seed,
            steps=train.get("steps"), tasks=train.get("tasks"), group=train.get("group"),
            eval_every=train.get("eval_every"), max_env_steps=train.get("max_steps"),
            arm_overrides=options["arm_overrides"], ray_address=verl["ray_address"],
            verl_agent=verl["verl_agent"], resume=options["resume"], host_profile=verl["host_profile"],
            runs_root=runs_root,
        )
        launches.append(build_launch(request, arm=arm))
    if dry_run:
        for launch in launches:
            prepare_run_folder(launch)
            info(ctx, f"dry run: nothing started; wrote {launch.run_dir}/config.json and run.sh")
        if as_json:
            emit_json({"dry_run": True, "runs": [launch.config_document() for launch in launches]})
        else:
            for launch in launches:  # verbatim (no console markup or emoji codes): it is a shell script
                typer.echo((launch.run_dir / "run.sh").read_text(encoding="utf-8"), nl=False)
        return
    db = open_db(settings(ctx).db)
    results = []
    for launch in launches:
        code = start(launch, db, log=lambda message: info(ctx, message))
        results.append({"run": launch.run, "run_dir": str(launch.run_dir), "exit_code": code})
        if code != 0:
            raise CcpoError(f"run {launch.run}: verl-agent exited with code {code}; see {launch.run_dir / 'train.log'}")
    if as_json:
        emit_json({"dry_run": False, "runs": results})


def _refuse_other_backend_options(backend: str, verl_only: dict[str, Any], local_only: dict[str, Any]) -> None:
    """An option of the other backend would be silently ignored: say so instead."""
    foreign = local_only if backend == "verl" else verl_only
    given = [name for name, value in foreign.items() if value is not None]
    if given:
        other = "local" if backend == "verl" else "verl"
        raise UsageError(f"{', '.join(given)} only apply to --backend {other} (this run uses --backend {backend})")


@app.command("train")
@handle_errors
def train(
    ctx: typer.Context,
    arm_name: Annotated[str, typer.Option("--arm", help="Arm to train (see `ccpo arms list`).")],
    run: Annotated[Optional[str], typer.Option("--run", help="Run name (default: derived from arm and seed; -seedN is appended with --seeds).")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="local (CPU policy, real ALFWorld) or verl (verl-agent on GPUs). Default: verl with a CUDA GPU, else local.")] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Training seed (default 0).")] = None,
    seeds: Annotated[Optional[str], typer.Option("--seeds", help="Several seeds, e.g. 0,1,2: one run each.")] = None,
    steps: Annotated[Optional[int], typer.Option("--steps", help="Training steps (policy updates).")] = None,
    tasks: Annotated[Optional[int], typer.Option("--tasks", help="Games per step.")] = None,
    group: Annotated[Optional[int], typer.Option("--group", help="Rollouts per game (group size).")] = None,
    eval_every: Annotated[Optional[int], typer.Option("--eval-every", help="Held-out evaluation every K steps.")] = None,
    max_steps: Annotated[Optional[int], typer.Option("--max-steps", help="Turn limit per episode.")] = None,
    set_flags: Annotated[Optional[list[str]], typer.Option("--set", help="Override an arm flag, KEY=VALUE (repeatable).")] = None,
    resume: Annotated[Optional[Path], typer.Option("--resume", help="Continue a run: verl, a checkpoint folder (global_step_N or its parent); local, the run folder.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Resolve and print the run; start nothing.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    # local backend
    eval_games: Annotated[Optional[int], typer.Option("--eval-games", help="local: evaluate on a fixed subset of N held-out games.")] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", help="local: rollout worker processes.")] = None,
    time_budget: Annotated[Optional[float], typer.Option("--time-budget", help="local: stop after this many minutes of training wall time.")] = None,
    dump_batches: Annotated[Optional[bool], typer.Option("--dump-batches/--no-dump-batches", help="local: save each step's estimator batch as .npz.")] = None,
    # verl backend
    model: Annotated[Optional[str], typer.Option("--model", help="verl: base model (Hugging Face id or path).")] = None,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="verl: GPUs per node.")] = None,
    nnodes: Annotated[int, typer.Option("--nnodes", help="verl: nodes.")] = 1,
    ray_address: Annotated[Optional[str], typer.Option("--ray-address", help="verl: join this Ray cluster instead of starting one.")] = None,
    verl_agent: Annotated[Optional[Path], typer.Option("--verl-agent", envvar="VERL_AGENT_HOME", help="verl: the verl-agent checkout (env VERL_AGENT_HOME).")] = None,
    host_profile: Annotated[str, typer.Option("--host-profile", help="verl: host profile of the protocol (reference, lean).")] = "reference",
) -> None:
    """Train one arm; evaluations land in the database as they happen."""
    from ccpo_cli.arms import load_arm, parse_set_options

    chosen = backend or default_backend()
    if chosen not in BACKENDS:
        raise typer.BadParameter(f"use one of {', '.join(BACKENDS)}", param_hint="--backend")
    seed_list = parse_seeds(seeds, seed)
    arm_overrides = parse_set_options(set_flags)
    arm = load_arm(arm_name, arm_overrides or None)
    options: dict[str, Any] = {
        "run": run,
        "resume": resume,
        "arm_overrides": arm_overrides,
        "train": {
            "steps": steps, "tasks": tasks, "group": group, "eval_every": eval_every, "max_steps": max_steps,
        },
        "verl": {
            "model": model, "gpus": gpus, "nnodes": nnodes, "ray_address": ray_address,
            "verl_agent": verl_agent, "host_profile": host_profile,
        },
    }
    _refuse_other_backend_options(chosen, {
        "--model": model, "--gpus": gpus, "--nnodes": None if nnodes == 1 else nnodes, "--ray-address": ray_address,
        "--host-profile": None if host_profile == "reference" else host_profile,
    }, {"--eval-games": eval_games, "--workers": workers, "--time-budget": time_budget, "--dump-batches": dump_batches})
    if chosen == "local":
        options["train"].update({
            "eval_games": eval_games, "workers": workers, "dump_batches": dump_batches,
            "time_budget_s": None if time_budget is None else time_budget * 60.0,
        })
        _train_local(ctx, arm, seed_list, options, as_json, dry_run)
    else:
        _train_verl(ctx, arm, seed_list, options, as_json, dry_run)
