"""From a verl `global_step_N` checkpoint to a verified Hugging Face model folder.

verl's trainer saves the actor as FSDP shards: `global_step_N/actor/model_world_size_W_rank_R.pt`
(one per rank, plus optimizer and extra state), with the model config and tokenizer either in
`actor/` itself (verl 0.3, verl-agent's pin) or in `actor/huggingface/` (later verl). ccpo never
merges the shards itself: it runs the model merger of the user's verl-agent checkout, in the
interpreter of that checkout's environment, as a subprocess through its documented command line
(`python -m verl.model_merger merge ...` in later verl, `python scripts/model_merger.py merge ...`
at verl-agent's pin). The merged folder is then checked against its own config (every tensor
name and shape, a forward pass; see `checkpoint_verify.py`) and described by `ccpo-merge.json`:
run, step, source folder, shard hashes, merger and verl-agent version. A later call with the
same shards (same names, sizes and modification times) reuses the verified merge. The whole
path, its record and what is tested where: docs/verl-checkpoints.md.

One concern, kept in one file past 400 lines: one path from a `global_step_N` folder to a
verified model folder: finding the checkpoint and its verl-agent checkout, running that
checkout's merger, and the `ccpo-merge.json` record that lets a later call reuse the merge read
the same shard list and stamps.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ccpo_cli.backends.verl.checkout import VERL_AGENT_HOME, VERL_PYTHON, read_commit
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.paths import file_sha256

MERGE_RECORD = "ccpo-merge.json"
RECORD_FORMAT = "ccpo-merge/1"
DEFAULT_MERGED_NAME = "ccpo_merged_hf"
SHARD_NAME = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
STEP_FOLDER = re.compile(r"^global_step_(\d+)$")


@dataclass(frozen=True)
class VerlCheckpoint:
    """One actor checkpoint as verl's FSDPCheckpointManager wrote it."""

    folder: Path  # global_step_N (or the actor folder's parent)
    actor: Path
    step: int | None
    world_size: int
    shards: tuple[Path, ...]
    config_dir: Path  # where config.json and the tokenizer are

    @property
    def config_in_actor(self) -> bool:
        return self.config_dir == self.actor


@dataclass(frozen=True)
class MergedModel:
    folder: Path
    checkpoint: VerlCheckpoint
    record: dict[str, Any]
    reused: bool

    def summary(self) -> dict[str, Any]:
        """What eval and publish documents say about the merged checkpoint."""
        record = self.record
        return {
            "source": record["source"]["checkpoint"],
            "step": record["step"],
            "run": record["run"],
            "merged_folder": str(self.folder),
            "reused_merge": self.reused,
            "record": str(self.folder / MERGE_RECORD),
            "verl_agent_commit": record["verl_agent"]["commit"],
            "shard_sha256": [shard["sha256"] for shard in record["source"]["shards"]],
        }


# --- recognising a checkpoint ----------------------------------------------------------


def _shard_files(actor: Path) -> dict[Path, tuple[int, int]]:
    found = {}
    for path in actor.iterdir():
        match = SHARD_NAME.match(path.name)
        if match and path.is_file():
            found[path] = (int(match.group(1)), int(match.group(2)))
    return found


def _step_folders(folder: Path) -> list[tuple[int, Path]]:
    steps = []
    for child in folder.iterdir():
        match = STEP_FOLDER.match(child.name)
        if match and child.is_dir():
            steps.append((int(match.group(1)), child))
    return sorted(steps)


def find_verl_checkpoint(path: str | Path | None) -> VerlCheckpoint | None:
    """The verl checkpoint at `path`, None when `path` is something else (a model folder with
    config.json, a hub id, a file), InvalidInput when it is one but unusable."""
    if path is None:
        return None
    folder = Path(path).expanduser()
    if not folder.is_dir() or (folder / "config.json").is_file() and not _shard_files(folder):
        return None
    if (folder / "actor").is_dir():
        return _read_actor(folder, folder / "actor")
    if _shard_files(folder):
        return _read_actor(folder.parent, folder)
    if STEP_FOLDER.match(folder.name):
        raise InvalidInput(
            f"{folder}: a verl global_step folder without an actor/ folder (no model shards to merge)"
        )
    steps = _step_folders(folder)
    if steps:
        latest = folder / "latest_checkpointed_iteration.txt"
        named = (
            latest.read_text(encoding="utf-8").strip() if latest.is_file() else str(steps[-1][0])
        )
        raise InvalidInput(
            f"{folder}: a folder of verl checkpoints, not one checkpoint; pass one of its global_step_N "
            f"folders (latest: {folder / f'global_step_{named}'})"
        )
    return None


def _read_actor(folder: Path, actor: Path) -> VerlCheckpoint:
    shards = _shard_files(actor)
    if not shards:
        raise InvalidInput(
            f"{actor}: no model shards (model_world_size_W_rank_R.pt) in this verl checkpoint"
        )
    sizes = sorted({size for size, _ in shards.values()})
    if len(sizes) > 1:
        raise InvalidInput(
            f"{actor}: model shards of several world sizes ({', '.join(map(str, sizes))}); "
            "the folder mixes two saves"
        )
    world_size = sizes[0]
    ranks = {rank: path for path, (_, rank) in shards.items()}
    missing = sorted(set(range(world_size)) - set(ranks))
    if missing:
        raise InvalidInput(
            f"{actor}: world size {world_size} but no model shard for rank(s) "
            f"{', '.join(map(str, missing))}"
        )
    empty = sorted(path.name for path in ranks.values() if path.stat().st_size == 0)
    if empty:
        raise InvalidInput(f"{actor}: empty model shard(s): {', '.join(empty)}")
    _check_fsdp_config(actor, world_size)
    config_dir = next(
        (d for d in (actor / "huggingface", actor) if (d / "config.json").is_file()), None
    )
    if config_dir is None:
        raise InvalidInput(
            f"{actor}: no config.json in actor/huggingface/ or actor/ (verl saves the model "
            "config there; without it the shards cannot be merged)"
        )
    _check_architecture(config_dir / "config.json")
    step_match = STEP_FOLDER.match(folder.name)
    return VerlCheckpoint(
        folder=folder.resolve(),
        actor=actor.resolve(),
        step=int(step_match.group(1)) if step_match else None,
        world_size=world_size,
        shards=tuple(ranks[rank].resolve() for rank in range(world_size)),
        config_dir=config_dir.resolve(),
    )


def _check_architecture(path: Path) -> None:
    try:
        architectures = json.loads(path.read_text(encoding="utf-8")).get("architectures") or []
    except (ValueError, AttributeError):
        raise InvalidInput(f"{path}: not a JSON object") from None
    if not any(str(name).endswith("ForCausalLM") for name in architectures):
        raise InvalidInput(
            f"{path}: architecture {architectures or 'not recorded'} is not a causal language "
            "model; ccpo evaluates and publishes causal LMs only"
        )


def _check_fsdp_config(actor: Path, world_size: int) -> None:
    """Later verl writes fsdp_config.json with the world size; it must agree with the shard names."""
    path = actor / "fsdp_config.json"
    if not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8")).get("world_size")
    except (ValueError, AttributeError):
        raise InvalidInput(f"{path}: not a JSON object") from None
    if recorded is not None and int(recorded) != world_size:
        raise InvalidInput(
            f"{path}: world_size {recorded}, but the shards are for world size {world_size}"
        )


# --- verl-agent's merger ---------------------------------------------------------------


def find_verl_agent(explicit: str | Path | None = None) -> Path:
    """--verl-agent-home, else VERL_AGENT_HOME: a checkout holding verl's model merger."""
    named = explicit if explicit is not None else os.environ.get(VERL_AGENT_HOME)
    if not named:
        raise CcpoError(
            "merging a verl checkpoint needs the verl-agent checkout that wrote it: pass --verl-agent-home "
            f"PATH or set {VERL_AGENT_HOME} (and {VERL_PYTHON} to its environment's python)"
        )
    home = Path(named).expanduser().resolve()
    if not (home / "verl" / "__init__.py").is_file():
        raise InvalidInput(
            f"verl-agent home {home}: not a verl-agent checkout (no verl/__init__.py)"
        )
    merger_command(home)  # refuses a checkout without a merger
    return home


def merger_command(home: Path) -> list[str]:
    """The merger's documented entry point in this checkout, after the interpreter."""
    if (home / "verl" / "model_merger" / "__main__.py").is_file():
        return ["-m", "verl.model_merger"]
    script = home / "scripts" / "model_merger.py"
    if script.is_file():
        return [str(script)]
    raise InvalidInput(
        f"verl-agent home {home}: no model merger (neither verl/model_merger/ nor scripts/model_merger.py)"
    )


def verl_interpreter() -> str:
    return os.environ.get(VERL_PYTHON) or sys.executable


def verl_agent_record(home: Path) -> dict[str, Any]:
    """The verl-agent checkout the merger came from, as the merge record states it: the commit
    by the backend's one reader (git, else SOURCE.md), and verl's version file."""
    from ccpo_cli.backends.local.provenance import git_state

    commit, source = read_commit(home)
    version_file = home / "verl" / "version" / "version"
    return {
        "home": str(home),
        "commit": commit or "not recorded (no .git, no SOURCE.md naming it)",
        "commit_source": source or "not recorded",
        "dirty": git_state(home)[1] if source == "git" else "not recorded",
        "verl_version": version_file.read_text(encoding="utf-8").strip()
        if version_file.is_file()
        else "not recorded",
    }


def _failure_line(output: str) -> str:
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    return (errors or lines or ["no output"])[-1]


def run_merger(
    checkpoint: VerlCheckpoint, home: Path, target: Path, log_path: Path
) -> dict[str, Any]:
    """Run verl's merger on the actor folder into `target`; its whole output goes to `log_path`."""
    command = [
        verl_interpreter(),
        *merger_command(home),
        "merge",
        "--backend",
        "fsdp",
        "--local_dir",
        str(checkpoint.actor),
        "--target_dir",
        str(target),
    ]
    if not checkpoint.config_in_actor:
        # The merger reads the config from --local_dir unless told otherwise (both its versions
        # accept --hf_model_path for this).
        command += ["--hf_model_path", str(checkpoint.config_dir)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(home), env.get("PYTHONPATH")]))
    started = time.monotonic()
    try:
        with log_path.open("w", encoding="utf-8") as log_file:
            done = subprocess.run(
                command, cwd=home, env=env, stdout=log_file, stderr=subprocess.STDOUT, check=False
            )
    except OSError as error:
        raise CcpoError(
            f"could not start verl's model merger ({command[0]}: {error.strerror or error})"
        ) from None
    if done.returncode != 0:
        reason = _failure_line(log_path.read_text(encoding="utf-8", errors="replace"))
        raise CcpoError(
            f"{checkpoint.actor}: verl's model merger failed (exit {done.returncode}): {reason} "
            f"(full output: {log_path}; interpreter {command[0]}, set {VERL_PYTHON} to verl-agent's python)"
        )
    return {"command": command, "seconds": round(time.monotonic() - started, 3)}


# --- the record ------------------------------------------------------------------------


def _shard_stamps(checkpoint: VerlCheckpoint) -> list[dict[str, Any]]:
    return [
        {"file": path.name, "bytes": path.stat().st_size, "mtime_ns": path.stat().st_mtime_ns}
        for path in checkpoint.shards
    ]


def recorded_run(checkpoint: VerlCheckpoint) -> dict[str, Any]:
    """The ccpo run whose folder holds this checkpoint (`RUN/checkpoints/global_step_N`)."""
    run_folder = checkpoint.folder.parent.parent
    config = run_folder / "config.json"
    if checkpoint.folder.parent.name == "checkpoints" and config.is_file():
        try:
            name = json.loads(config.read_text(encoding="utf-8")).get("run")
        except (ValueError, AttributeError):
            name = None
        if name:
            return {"run": name, "run_folder": str(run_folder)}
    return {
        "run": None,
        "run_folder": "not recorded (the checkpoint is not inside a ccpo run folder)",
    }


def build_record(
    checkpoint: VerlCheckpoint,
    merger: dict[str, Any],
    verl_agent: dict[str, Any],
    verification: dict[str, Any],
) -> dict[str, Any]:
    shards = [
        dict(stamp, sha256=file_sha256(path))
        for stamp, path in zip(_shard_stamps(checkpoint), checkpoint.shards)
    ]
    return {
        "format": RECORD_FORMAT,
        **recorded_run(checkpoint),
        "step": checkpoint.step,
        "source": {
            "checkpoint": str(checkpoint.folder),
            "actor": str(checkpoint.actor),
            "config": str(checkpoint.config_dir),
            "world_size": checkpoint.world_size,
            "shards": shards,
        },
        "merger": merger,
        "verl_agent": verl_agent,
        "verification": verification,
        "merged_at": datetime.datetime.now(datetime.UTC).isoformat(),
    }


def read_record(folder: Path) -> dict[str, Any] | None:
    path = folder / MERGE_RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("format") == RECORD_FORMAT else None


def record_matches(record: dict[str, Any] | None, checkpoint: VerlCheckpoint) -> bool:
    """Whether a merge record describes these very shards (and its verification passed)."""
    if not record or record.get("source", {}).get("checkpoint") != str(checkpoint.folder):
        return False
    recorded = [
        {key: shard.get(key) for key in ("file", "bytes", "mtime_ns")}
        for shard in record["source"].get("shards", [])
    ]
    return recorded == _shard_stamps(checkpoint) and bool(
        record.get("verification", {}).get("passed")
    )


# --- the whole step --------------------------------------------------------------------


def _prepare_target(target: Path, checkpoint: VerlCheckpoint) -> None:
    """Refuse to replace a folder that is not an earlier ccpo merge of this same checkpoint."""
    if not target.exists():
        return
    if not target.is_dir():
        raise InvalidInput(f"--merged-dir {target}: exists and is not a folder")
    record = read_record(target)
    if record is not None and target == checkpoint.folder / DEFAULT_MERGED_NAME:
        return  # ccpo's own folder inside the checkpoint (its recorded path differs once the run folder moves)
    if any(target.iterdir()) and (
        record is None or record["source"].get("checkpoint") != str(checkpoint.folder)
    ):
        raise InvalidInput(
            f"--merged-dir {target}: holds something other than a ccpo merge of {checkpoint.folder}; "
            "name an empty or new folder"
        )


def merge_checkpoint(
    checkpoint: VerlCheckpoint,
    *,
    verl_agent_home: str | Path | None = None,
    target: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> MergedModel:
    """Merge (or reuse a verified merge of) `checkpoint` into `target` (default: beside the
    shards, `global_step_N/ccpo_merged_hf`) and return the verified folder and its record."""
    from ccpo_cli.backends.verl.checkpoint_verify import verify_merged_model

    target = (
        Path(target).expanduser().resolve() if target else checkpoint.folder / DEFAULT_MERGED_NAME
    )
    existing = read_record(target) if target.is_dir() else None
    if record_matches(existing, checkpoint):
        return MergedModel(target, checkpoint, existing, reused=True)
    _prepare_target(target, checkpoint)
    home = find_verl_agent(verl_agent_home)
    partial = target.parent / f".{target.name}.partial-{os.getpid()}"
    log_path = target.parent / f".{target.name}.merge.log"
    try:
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
    except OSError as error:
        raise CcpoError(
            f"cannot write the merged model in {target.parent} ({error.strerror or error}); "
            "pass --merged-dir to put it elsewhere"
        ) from None
    if log is not None:
        log(
            f"merging {checkpoint.actor} ({checkpoint.world_size} shard(s)) with verl's model merger from {home}"
        )
    try:
        merger = dict(run_merger(checkpoint, home, partial, log_path), renamed_to=str(target))
        verification = verify_merged_model(partial)
        record = build_record(checkpoint, merger, verl_agent_record(home), verification)
        (partial / MERGE_RECORD).write_text(
            json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        if target.exists():
            shutil.rmtree(target)  # an earlier merge of this checkpoint, now stale (checked above)
        os.replace(partial, target)
    finally:
        if partial.exists():
            shutil.rmtree(partial, ignore_errors=True)
    return MergedModel(target, checkpoint, record, reused=False)


def resolve_model_source(
    model: str | None,
    *,
    verl_agent_home: str | Path | None = None,
    merged_dir: str | Path | None = None,
) -> tuple[str | None, MergedModel | None]:
    """`model` unchanged when it is not a verl checkpoint; else the merged, verified folder."""
    checkpoint = find_verl_checkpoint(model)
    if checkpoint is None:
        if merged_dir is not None:
            raise InvalidInput(f"--merged-dir applies to a verl checkpoint; {model} is not one")
        return model, None
    merged = merge_checkpoint(checkpoint, verl_agent_home=verl_agent_home, target=merged_dir)
    return str(merged.folder), merged
