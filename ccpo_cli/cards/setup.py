"""The card's training-setup table and its recorded configuration block.

Two backends record two shapes of configuration: the local CPU trainer writes ccpo's own keys
(`train`, `training_pool`, `eval_panel`), a verl-agent run its Hydra configuration. Each table
row is read from one named key (`VERL_SETUP_KEYS`), never guessed from a key's suffix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from ccpo_cli.cards.selection import LOCAL_BACKEND, config_of, trained_from_scratch
from ccpo_cli.store.facts import flatten
from ccpo_cli.store.identity import RunIdentity

# The verl-agent Hydra keys behind each row of a verl run's table (verl/trainer/config/ppo_trainer.yaml).
VERL_SETUP_KEYS = {
    "batch": "data.train_batch_size",
    "group": "env.rollout.n",
    "max_steps": "env.max_steps",
    "history_length": "env.history_length",
    "lr": "actor_rollout_ref.actor.optim.lr",
    "kl": "actor_rollout_ref.actor.kl_loss_coef",
    "kl_type": "actor_rollout_ref.actor.kl_loss_type",
    "gamma": "algorithm.gamma",
    "max_prompt": "data.max_prompt_length",
    "max_response": "data.max_response_length",
}


NOT_RECORDED = "not recorded"
# A launch script's `key=$var` line records the variable's name, not its value.
_SHELL_VARIABLE = re.compile(r"\$\{?\w+")


def _configured(value: Any) -> Any:
    """A configuration value as recorded; None (not recorded) for an unexpanded shell variable
    such as `$train_data_size`, so the run's recorded facts fill the row instead."""
    return None if isinstance(value, str) and _SHELL_VARIABLE.search(value) else value


def _count(value: Any) -> int | None:
    """A whole number the configuration records, or None when it records none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def benchmark_row(name: str | None, logged_types: Any = None) -> str:
    """The setup table's benchmark cell: the declared display name and its task types, those
    the run's validations logged (the fact `task_types`) where it is recorded."""
    from ccpo_cli.benchmarks import load_benchmark
    from ccpo_cli.errors import CcpoError

    if name is None:
        return NOT_RECORDED
    try:
        benchmark = load_benchmark(name)
    except CcpoError:
        return f"{name} (not a benchmark this ccpo declares)"
    if isinstance(logged_types, list) and logged_types:
        return f"{benchmark.display_name}, {len(logged_types)} task types ({', '.join(map(str, logged_types))})"
    types = len(benchmark.task_types)
    return f"{benchmark.display_name}, " + (f"{types} task types" if types else "no task types")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _rows(rows: list[tuple[str, Any]]) -> list[dict[str, str]]:
    return [{"name": name, "value": str(value)} for name, value in rows if value not in (None, "")]


def _learning_rate(value: Any) -> str:
    return f"{float(value):g}".replace("e-0", "e-")


def _provenance_rows(run_row: Mapping[str, Any]) -> list[tuple[str, Any]]:
    commit = run_row.get("git_commit")
    return [("hardware", run_row.get("hardware"))] + (
        [("code commit", f"{commit}{' (dirty)' if run_row.get('git_dirty') else ''}")]
        if commit
        else []
    )


@dataclass(frozen=True)
class TrainingSchedule:
    """What one training step is, as a run's configuration records it: `tasks` tasks x `group`
    rollouts, each episode up to `max_steps` environment steps (with the `history_length` a
    verl-agent run keeps), evaluated every `eval_every` steps. None: not recorded. The two
    backends record it under different keys (`local`, `verl`); the table states it one way."""

    tasks: int | None
    group: int | None
    max_steps: Any = None
    history_length: Any = None
    eval_every: Any = None

    @classmethod
    def local(cls, train: Mapping[str, Any]) -> TrainingSchedule:
        """From the `train` block `ccpo train --backend local` records."""
        return cls(
            _count(train.get("tasks")),
            _count(train.get("group")),
            train.get("max_steps"),
            eval_every=train.get("eval_every"),
        )

    @classmethod
    def verl(cls, value: Mapping[str, Any]) -> TrainingSchedule:
        """From a verl-agent run's Hydra values (`VERL_SETUP_KEYS`, facts filled in)."""
        return cls(
            _count(value["batch"]),
            _count(value["group"]),
            value["max_steps"],
            value["history_length"],
        )

    def rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = []
        if self.tasks is not None and self.group is not None:
            rows.append(
                (
                    "batch",
                    f"{self.tasks} tasks x {self.group} rollouts = "
                    f"{self.tasks * self.group} episodes/step",
                )
            )
        if self.max_steps is not None:
            history = (
                f", history length {self.history_length}" if self.history_length is not None else ""
            )
            rows.append(("max env steps", f"{self.max_steps} per episode{history}"))
        return rows


def _local_model_row(run_row: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[str, str]:
    """The policy a local run trains: ccpo's own, from scratch or forked from a warm start."""
    model = _mapping(_mapping(config.get("train")).get("model"))
    size = ", ".join(
        f"{key} {model[key]}" for key in ("dim", "hidden") if model.get(key) is not None
    )
    start = _mapping(config.get("start"))
    origin = (
        f"forked at step {start.get('step')} from a run of arm {start.get('arm')} (shared warm start)"
        if start
        else "trained from scratch"
    )
    return (
        "model",
        f"{run_row.get('base_model') or 'ccpo local policy'}, {origin}"
        + (f" ({size})" if size else "")
        + "; no pretrained base model",
    )


# The local trainer's update settings the table shows, by their recorded key, in its order.
LOCAL_UPDATE_ROWS = (
    ("kl_coef", "KL coef"),
    ("entropy_coef", "entropy coef"),
    ("clip_ratio", "clip ratio"),
    ("epochs", "epochs per step"),
)


def _local_update_rows(config: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The optimiser's settings a local run records, and its arm's discount."""
    update = _mapping(_mapping(config.get("train")).get("update"))
    rows: list[tuple[str, Any]] = []
    if update.get("learning_rate") is not None:
        rows.append(("learning rate", _learning_rate(update["learning_rate"])))
    rows += [
        (label, f"{update[key]}") for key, label in LOCAL_UPDATE_ROWS if update.get(key) is not None
    ]
    gamma = _mapping(_mapping(config.get("arm")).get("flags")).get("gamma")
    if gamma is not None:
        rows.append(("gamma", f"{gamma}"))
    return rows


def _local_eval_row(
    config: Mapping[str, Any], schedule: TrainingSchedule, protocol: Mapping[str, Any]
) -> tuple[str, str | None]:
    """How a local run was evaluated: its held-out panel, temperature and schedule."""
    train, panel = _mapping(config.get("train")), _mapping(config.get("eval_panel"))
    temperature = train.get("eval_temperature", protocol.get("temperature"))
    games = panel.get("games", train.get("eval_games", protocol.get("episodes")))
    every = schedule.eval_every
    eval_bits = [
        f"{games} held-out games"
        + (f" of the {panel['panel_games']}-game panel" if panel.get("panel_games") else "")
        if games is not None
        else None,
        f"temperature {temperature}" if temperature is not None else None,
        f"every {every} step{'' if every == 1 else 's'}" if every is not None else None,
    ]
    return ("eval", ", ".join(bit for bit in eval_bits if bit) or None)


def local_setup_rows(
    run_row: Mapping[str, Any], protocol: Mapping[str, Any]
) -> list[dict[str, str]]:
    """The training-setup table of a local CPU run, from the keys `ccpo train --backend local` records."""
    config = config_of(run_row)
    pool, panel = _mapping(config.get("training_pool")), _mapping(config.get("eval_panel"))
    schedule = TrainingSchedule.local(_mapping(config.get("train")))
    # Values may be None (not recorded): _rows leaves those rows out.
    rows: list[tuple[str, Any]] = [_local_model_row(run_row, config)]
    rows.append(("benchmark", "ALFWorld (generated TextWorld games), 6 task types"))
    if pool.get("games") is not None:
        source = redact_paths(pool.get("source"))
        rows.append(("training games", f"{pool['games']}" + (f", {source}" if source else "")))
    rows += schedule.rows() + _local_update_rows(config)
    rows.append(("training steps", run_row.get("total_steps")))
    rows.append(("seed", run_row.get("seed")))
    rows.append(_local_eval_row(config, schedule, protocol))
    if panel.get("subset"):
        rows.append(("eval panel", f"{panel['subset']}"))
    rows.append(("backend", f"{run_row.get('backend') or LOCAL_BACKEND} (ccpo's CPU trainer)"))
    return _rows(rows + _provenance_rows(run_row))


# Table rows a recorded fact (store/facts.py) fills when the configuration does not give them.
FACT_ROWS = ("batch", "group", "max_steps", "lr", "kl", "gamma")


def _verl_update_rows(value: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The optimiser's settings of a verl-agent run; the learning rate and the discount are said
    to be not recorded when missing, never left out."""
    rows: list[tuple[str, Any]] = [
        ("learning rate", _learning_rate(value["lr"]) if value["lr"] is not None else NOT_RECORDED)
    ]
    if value["kl"] is not None:
        kl_type = f", {value['kl_type']} estimator" if value["kl_type"] else ""
        rows.append(("KL", f"{value['kl']}{kl_type}"))
    rows.append(("gamma", f"{value['gamma']}" if value["gamma"] is not None else NOT_RECORDED))
    if value["max_prompt"] is not None and value["max_response"] is not None:
        rows.append(
            ("max prompt / response", f"{value['max_prompt']} / {value['max_response']} tokens")
        )
    return rows


def _verl_eval_row(protocol: Mapping[str, Any]) -> tuple[str, str]:
    """The recorded evaluation protocol, each part said to be not recorded when missing."""
    eval_bits = [
        f"split {protocol['split']}" if protocol.get("split") else "split not recorded",
        f"{protocol['episodes']} episodes" if protocol.get("episodes") else "episodes not recorded",
        f"temperature {protocol['temperature']}"
        if protocol.get("temperature") is not None
        else "temperature not recorded",
    ]
    return ("eval", ", ".join(eval_bits))


def verl_setup_rows(
    run_row: Mapping[str, Any], protocol: Mapping[str, Any], facts: Mapping[str, Any] | None = None
) -> list[dict[str, str]]:
    """The training-setup table of a verl-agent run, from its recorded Hydra configuration and
    protocol facts; what neither records is said to be not recorded."""
    flat = flatten(config_of(run_row))
    facts = facts or {}
    value = {name: _configured(flat.get(key)) for name, key in VERL_SETUP_KEYS.items()}
    for name in FACT_ROWS:
        if value[name] is None:
            value[name] = facts.get(name)
    rows: list[tuple[str, Any]] = [("base model", run_row.get("base_model"))]
    rows.append(("benchmark", benchmark_row(run_row.get("benchmark"), facts.get("task_types"))))
    rows += TrainingSchedule.verl(value).rows() + _verl_update_rows(value)
    rows.append(("training steps", run_row.get("total_steps")))
    rows.append(("seed", run_row.get("seed") if run_row.get("seed") is not None else NOT_RECORDED))
    rows.append(_verl_eval_row(protocol))
    rows.append(("backend", run_row.get("backend")))
    hardware = run_row.get("hardware") or facts.get("hardware")
    return _rows(rows + _provenance_rows(dict(run_row, hardware=hardware or NOT_RECORDED)))


def setup_rows(
    identity: RunIdentity,
    run_row: Mapping[str, Any],
    protocol: Mapping[str, Any],
    facts: Mapping[str, Any] | None = None,
) -> list[dict[str, str]]:
    if trained_from_scratch(identity):
        return local_setup_rows(run_row, protocol)
    return verl_setup_rows(run_row, protocol, facts)


_LOCAL_PATH = re.compile(r"^(/|~|\$HOME|\.{1,2}/|[A-Za-z]:\\)")


def redact_paths(value: Any) -> Any:
    """Local paths say nothing to a reader of the Hub page and may reveal a host layout."""
    if isinstance(value, Mapping):
        return {key: redact_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [redact_paths(item) for item in value]
    if isinstance(value, str) and _LOCAL_PATH.match(value):
        return "(local path, not published)"
    return value


def panel_game_ids(config: Mapping[str, Any]) -> list[str]:
    ids = _mapping(config.get("eval_panel")).get("game_ids")
    return [str(game) for game in ids] if isinstance(ids, list) else []


def config_yaml(run_row: Mapping[str, Any], summary_path: str) -> str:
    config = config_of(run_row)
    if not config:
        return ""
    if panel_game_ids(config):
        # ALFWorld game ids read like "pick_and_place_simple-Apple-None-GarbageCan-0054" and can
        # run to hundreds of lines: the card gives their count, the summary JSON the list.
        panel = dict(config["eval_panel"])
        panel["game_ids"] = (
            f"{len(panel['game_ids'])} games, listed in {summary_path} (eval_panel_game_ids)"
        )
        config = dict(config, eval_panel=panel)
    return yaml.safe_dump(redact_paths(config), sort_keys=True, default_flow_style=False).strip()
