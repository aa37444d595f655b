"""Protocol facts of a run: what it was evaluated on and how it was trained, as recorded.

A fact is one named value (`FACT_KEYS`) of a run, from an ingest option or from the run's
verl configuration (`facts_from_config`: the resolved Hydra YAML, or the launch command with its
`key=value` overrides). Facts are append-only, like evaluations: the first value recorded for a
key stands, and a different value recorded later is kept beside it as a conflict, never a silent
change. `total_steps` lives in the runs table; a re-ingest that names another total is recorded
here as a conflict of that key (`reconcile_total_steps`).

Split names: verl-agent's ALFWorld validation runs on `env.alfworld.eval_dataset`, by default
`eval_in_distribution`, ALFWorld's `valid_seen` games, so an ingested verl-agent run's split is
`valid_seen` unless told otherwise; `eval_out_of_distribution` is `valid_unseen` (docs/runs-db.md).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import sqlite_utils

from ccpo_cli.bounded_yaml import YamlSyntaxError, load_yaml, read_bounded_text
from ccpo_cli.errors import InvalidInput
from ccpo_cli.store.db import utc_now

FACT_KEYS = ("split", "temperature", "episodes", "seed", "hardware", "model", "estimator", "batch", "group",
             "max_steps", "gamma", "lr", "kl", "total_steps", "agent")
VERL_AGENT_DEFAULT_SPLIT = "valid_seen"
VERL_SPLITS = {"eval_in_distribution": "valid_seen", "eval_out_of_distribution": "valid_unseen"}
# The one verl-agent Hydra key each fact is read from (verl/trainer/config/ppo_trainer.yaml).
VERL_CONFIG_KEYS = {
    "split": "env.alfworld.eval_dataset",
    "temperature": "actor_rollout_ref.rollout.val_kwargs.temperature",
    "seed": "env.seed",
    "model": "actor_rollout_ref.model.path",
    "estimator": "algorithm.adv_estimator",
    "batch": "data.train_batch_size",
    "group": "env.rollout.n",
    "max_steps": "env.max_steps",
    "gamma": "algorithm.gamma",
    "lr": "actor_rollout_ref.actor.optim.lr",
    "kl": "actor_rollout_ref.actor.kl_loss_coef",
    "total_steps": "trainer.total_training_steps",
}
HARDWARE_KEYS = ("trainer.nnodes", "trainer.n_gpus_per_node")


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested configuration as {"dotted.key": value} (mappings only; lists stay values)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _command_overrides(text: str) -> dict[str, Any]:
    """The `key=value` Hydra overrides of a launch command (`+key`, `++key` alike)."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:
        raise InvalidInput(f"cannot split the launch command ({error})") from None
    overrides = {}
    for word in words:
        key, sep, value = word.partition("=")
        key = key.lstrip("+")
        if sep and "." in key:
            overrides[key] = _scalar(value)
    return overrides


def _scalar(text: str) -> Any:
    """A command-line value as YAML reads it, and `1e-6` as the number Hydra makes of it."""
    try:
        value = load_yaml(text, "a key=value override") if text else None
    except InvalidInput:  # not YAML, or a value too large to build: keep the words as written
        return text
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The flattened configuration of a verl run: a resolved Hydra YAML file, or a text file
    holding the launch command with `key=value` overrides. InvalidInput when neither."""
    path = Path(path)
    try:
        text = read_bounded_text(path)
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"{path}: cannot read the run config ({error})") from None
    try:
        document = load_yaml(text, str(path))
    except YamlSyntaxError:
        document = None  # not YAML: maybe a launch command
    flat = flatten(document) if isinstance(document, Mapping) else _command_overrides(text)
    if not flat:
        raise InvalidInput(f"{path}: neither a Hydra config nor a launch command with key=value overrides")
    return flat


def facts_from_config(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The facts a flattened verl configuration gives (`VERL_CONFIG_KEYS`)."""
    facts = {name: flat[key] for name, key in VERL_CONFIG_KEYS.items() if flat.get(key) is not None}
    if "split" in facts:
        facts["split"] = VERL_SPLITS.get(str(facts["split"]), str(facts["split"]))
    if facts.get("total_steps") is not None and int(facts["total_steps"]) <= 0:
        del facts["total_steps"]  # verl's "-1 / null: derived from epochs", not a number of steps
    nodes, gpus = (flat.get(key) for key in HARDWARE_KEYS)
    if gpus:
        facts["hardware"] = f"{int(nodes or 1)} node(s) x {int(gpus)} GPUs"
    return facts


def _encode(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _record(db: sqlite_utils.Database, run_id: int, key: str, value: Any, source: str | None) -> None:
    db["run_facts"].insert(
        {"run_id": run_id, "key": key, "value": _encode(value), "source": source, "recorded_at": utc_now()},
        ignore=True,  # the same value again is already on record
    )


def record_facts(db: sqlite_utils.Database, run_id: int, facts: Mapping[str, Any], source: str | None = None) -> list[dict]:
    """Record facts of a run; returns the conflicts this created ({key, recorded, given})."""
    unknown = sorted(set(facts) - set(FACT_KEYS))
    if unknown:
        raise InvalidInput(f"unknown run facts: {', '.join(unknown)} (known: {', '.join(FACT_KEYS)})")
    recorded = run_facts(db, run_id)["values"]
    conflicts = []
    for key, value in facts.items():
        if value is None:
            continue
        if key in recorded and recorded[key] != value:
            conflicts.append({"key": key, "recorded": recorded[key], "given": value})
        _record(db, run_id, key, value, source)
    return conflicts


def record_run_facts(db: sqlite_utils.Database, run: str, facts: Mapping[str, Any], source: str) -> list[dict]:
    """`record_facts` for a run named `run` (a backend that knows its own protocol says it here)."""
    row = _run_row(db, run)
    if row is None:
        raise InvalidInput(f"no run named {run!r}")
    return record_facts(db, row["id"], facts, source)


def run_facts(db: sqlite_utils.Database, run_id: int) -> dict[str, Any]:
    """{"values": {key: first value recorded}, "conflicts": {key: [every value, first first]}}."""
    values: dict[str, Any] = {}
    seen: dict[str, list] = {}
    if "run_facts" not in db.table_names():
        return {"values": values, "conflicts": {}}
    for row in db["run_facts"].rows_where("run_id = ?", [run_id], order_by="id"):
        value = json.loads(row["value"])
        values.setdefault(row["key"], value)
        seen.setdefault(row["key"], [])
        if value not in seen[row["key"]]:
            seen[row["key"]].append(value)
    return {"values": values, "conflicts": {key: found for key, found in seen.items() if len(found) > 1}}


def _run_row(db: sqlite_utils.Database, run: str) -> dict | None:
    rows = list(db["runs"].rows_where("name = ?", [run], select="id, total_steps, last_step, status, config"))
    return rows[0] if rows else None


def reconcile_total_steps(db: sqlite_utils.Database, run: str, given: int | None,
                          source: str | None = None) -> tuple[int | None, dict | None]:
    """The total steps to write for `run`, and the conflict when `given` differs from what is
    recorded: the recorded total stays in the runs table, and both values are kept as facts, so
    a shorter total can never make an unfinished run look finished."""
    row = _run_row(db, run)
    if given is None or row is None or row["total_steps"] is None or int(given) == int(row["total_steps"]):
        return given, None
    _record(db, row["id"], "total_steps", int(row["total_steps"]), "runs.total_steps")
    _record(db, row["id"], "total_steps", int(given), source)
    return None, {"key": "total_steps", "recorded": int(row["total_steps"]), "given": int(given)}


def derived_status(last_step: int | None, total_steps: list[int], ended: bool) -> str | None:
    """The run status the data gives: finished at or past the largest recorded total; below it,
    stopped when the caller says the run has ended (an explicit marker), else running."""
    if last_step is None:
        return None
    if total_steps and last_step >= max(total_steps):
        return "finished"
    return "stopped" if ended else "running"


def record_ingest_facts(db: sqlite_utils.Database, run: str, facts: Mapping[str, Any], *,
                        config: Mapping[str, Any] | None = None, verl_log: bool = False,
                        ended: bool = False, source: str | None = None) -> list[dict]:
    """After an ingest: record the facts given (a verl-agent log gets split `valid_seen` unless
    told otherwise), keep the config when the run has none, and set the status from the data.
    Returns the fact conflicts this created."""
    row = _run_row(db, run)
    facts = {key: value for key, value in facts.items() if value is not None}
    if verl_log and "split" not in facts and "split" not in run_facts(db, row["id"])["values"]:
        _record(db, row["id"], "split", VERL_AGENT_DEFAULT_SPLIT,
                "default: verl-agent validates on eval_in_distribution (valid_seen)")
    conflicts = record_facts(db, row["id"], facts, source)
    changes: dict[str, Any] = {}
    if config and not row["config"]:
        changes["config"] = json.dumps(dict(config), sort_keys=True, separators=(",", ":"))
    totals = [int(value) for value in [row["total_steps"], *run_facts(db, row["id"])["conflicts"].get("total_steps", [])]
              if value is not None]
    status = derived_status(row["last_step"], totals, ended)
    if status is not None and status != row["status"]:
        changes["status"] = status
    if changes:
        db["runs"].update(row["id"], dict(changes, updated_at=utc_now()))
    return conflicts


def protocol_facts(config_file: str | Path | None, **given: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The flattened config (None without a file) and the facts of an ingest: those the config
    gives, overridden by the options given (None means not given)."""
    flat = read_config_file(config_file) if config_file is not None else None
    facts = facts_from_config(flat) if flat else {}
    facts.update({key: value for key, value in given.items() if value is not None})
    if facts.get("episodes") is not None and int(facts["episodes"]) <= 0:
        raise InvalidInput(f"--episodes must be a positive number of episodes, got {facts['episodes']}")
    return flat, facts
