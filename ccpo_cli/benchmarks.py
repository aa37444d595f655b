"""Benchmarks as data: what each environment verl-agent ships logs, from configs/benchmarks/<name>.yaml.

A benchmark declares its display name and description, the metric names its logs use (the
success rate every evaluation records, the training success rate, WebShop's score), its task
types (short key, the metric verl-agent logs per type, label) or none, the prompt verl-agent
gives the model (described, not copied), which split a validation plays, and the published
results a card may cite (docs/benchmarks.md).

`detect_benchmark` names the benchmark a set of metric names belongs to: a benchmark is
recognised by names only it logs (its per-type rates, WebShop's score), never by
`val/success_rate`, which every environment logs. `benchmark_for_env_name` reads verl-agent's
`env.env_name` the way its `make_envs` does (a substring of the lowered name).

This module sits at the level of `arms.py`: it reads configs only and imports nothing from the
store, the report, the cards or the CLI.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from ccpo_cli.errors import InvalidInput
from ccpo_cli.paths import configs_dir

# verl-agent logs every per-type rate as val/<name>_success_rate, where <name> is what it
# matched in the game path (ALFWorld) or the sample's data_source (Search).
_TASK_METRIC = re.compile(r"val/(?P<name>.+)_success_rate")
_VALIDATION_PREFIX, _TRAINING_PREFIX = "val/", "episode/"
# libyaml's safe loader when PyYAML has it (ten times faster; these files load on import).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class TaskType:
    """One task type: the short key runs.db and the cards use, the validation metric verl-agent
    logs for it, the label a table prints, and (ALFWorld) the game folder prefix."""

    key: str
    metric: str
    label: str
    game_folder: str | None = None

    @property
    def source_name(self) -> str:
        """What verl-agent matched to log this type: `pick_and_place` for val/pick_and_place_success_rate."""
        match = _TASK_METRIC.fullmatch(self.metric)
        return match.group("name") if match else self.metric

    @property
    def training_metric(self) -> str:
        """The same rate over training rollouts (verl's episode/ metrics)."""
        return _TRAINING_PREFIX + self.metric[len(_VALIDATION_PREFIX) :]


@dataclass(frozen=True)
class PublishedBaseline:
    """One published result: held-out success in percent (and WebShop's score when given)."""

    benchmark: str
    method: str
    backbone: str
    success: float
    protocol: str
    source: str
    on_card: bool
    score: float | None = None
    paper: str | None = None  # the key of its paper in configs/papers.yaml


@dataclass(frozen=True)
class EvaluationSplit:
    """Which split a validation plays: read from one config key, else verl-agent's default."""

    default: str | None
    default_reason: str | None
    config_key: str | None = None
    values: Mapping[str, str] = field(default_factory=dict)

    def from_config(self, flat: Mapping[str, Any]) -> str | None:
        """The split a flattened verl config states, in ccpo's names; None when it states none."""
        if self.config_key is None or flat.get(self.config_key) is None:
            return None
        stated = str(flat[self.config_key])
        return self.values.get(stated, stated)


@dataclass(frozen=True)
class Benchmark:
    name: str
    display_name: str
    description: str
    env_name_contains: str
    success_metric: str
    train_success_metric: str
    score_metric: str | None
    task_types: tuple[TaskType, ...]
    # Metric names only this benchmark logs (its per-type rates, validation and training, and
    # any declared in the file): one of them in a log says the log is this benchmark's.
    identifying_metrics: frozenset[str]
    evaluation_split: EvaluationSplit | None
    prompt_source: str
    prompt_description: str
    protocols: Mapping[str, str]  # protocol id -> one-line description
    published_baselines: tuple[PublishedBaseline, ...]
    paper: str | None = None  # the benchmark's own paper, a key of configs/papers.yaml

    @property
    def task_type_metrics(self) -> dict[str, str]:
        """{validation metric name: short key}, in the declared order."""
        return {task.metric: task.key for task in self.task_types}

    def task_type(self, key: str) -> TaskType:
        for task in self.task_types:
            if task.key == key:
                return task
        raise InvalidInput(
            f"benchmark {self.name!r} has no task type {key!r} "
            f"(its task types: {', '.join(t.key for t in self.task_types) or 'none'})"
        )


def benchmarks_dir() -> Path:
    return configs_dir() / "benchmarks"


def list_benchmarks() -> list[str]:
    """The names of every declared benchmark, sorted."""
    return sorted(path.stem for path in benchmarks_dir().glob("*.yaml"))


def _text(
    document: Mapping[str, Any], key: str, where: str, *, required: bool = True
) -> str | None:
    value = document.get(key)
    if value is None:
        if required:
            raise InvalidInput(f"{where}: missing field {key!r}")
        return None
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise InvalidInput(f"{where}: field {key!r} must be text, got {type(value).__name__}")
    return str(value).strip()


def _mapping(document: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = document.get(key) or {}
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{where}: field {key!r} must be a mapping")
    return value


def _list(document: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = document.get(key) or []
    if not isinstance(value, list):
        raise InvalidInput(f"{where}: field {key!r} must be a list")
    return value


def _task_types(document: Mapping[str, Any], where: str) -> tuple[TaskType, ...]:
    tasks = []
    for index, entry in enumerate(_list(document, "task_types", where), start=1):
        at = f"{where}: task_types[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"{at}: expected a mapping with key, metric and label")
        task = TaskType(
            key=_text(entry, "key", at),
            metric=_text(entry, "metric", at),
            label=_text(entry, "label", at),
            game_folder=_text(entry, "game_folder", at, required=False),
        )
        if not _TASK_METRIC.fullmatch(task.metric):
            raise InvalidInput(
                f"{at}: metric {task.metric!r} is not of verl-agent's form val/<name>_success_rate"
            )
        tasks.append(task)
    keys = [task.key for task in tasks]
    if len(set(keys)) != len(keys):
        raise InvalidInput(f"{where}: task type keys repeat ({', '.join(keys)})")
    return tuple(tasks)


def _split(document: Mapping[str, Any], where: str) -> EvaluationSplit | None:
    if document.get("evaluation_split") is None:
        return None
    spec = _mapping(document, "evaluation_split", where)
    at = f"{where}: evaluation_split"
    values = {str(k): str(v) for k, v in _mapping(spec, "values", at).items()}
    return EvaluationSplit(
        default=_text(spec, "default", at, required=False),
        default_reason=_text(spec, "default_reason", at, required=False),
        config_key=_text(spec, "config_key", at, required=False),
        values=MappingProxyType(values),
    )


def _baselines(
    name: str, document: Mapping[str, Any], protocols: Mapping[str, str], where: str
) -> tuple[PublishedBaseline, ...]:
    rows = []
    for index, entry in enumerate(_list(document, "published_baselines", where), start=1):
        at = f"{where}: published_baselines[{index}]"
        if not isinstance(entry, Mapping):
            raise InvalidInput(f"{at}: expected a mapping")
        protocol = _text(entry, "protocol", at)
        if protocol not in protocols:
            raise InvalidInput(f"{at}: protocol {protocol!r} is not declared under 'protocols'")
        if "success" not in entry:
            raise InvalidInput(f"{at}: missing field 'success'")
        success = _percent(entry["success"], f"{at}: success")
        score = None if entry.get("score") is None else _percent(entry["score"], f"{at}: score")
        rows.append(
            PublishedBaseline(
                benchmark=name,
                method=_text(entry, "method", at),
                backbone=_text(entry, "backbone", at),
                success=success,
                protocol=protocol,
                source=_text(entry, "source", at),
                on_card=bool(entry.get("on_card", False)),
                score=score,
                paper=_paper_key(entry, at),
            )
        )
    return tuple(rows)


def _percent(value: Any, where: str) -> float:
    """A published percentage: a finite number in [0, 100] (a success rate of 140 or -3, a
    fraction mistaken for 0.7 %, NaN or `true` is a typo a card must never print as a result)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InvalidInput(f"{where}: expected a number in percent (0-100), not {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise InvalidInput(
            f"{where}: expected a number in percent (0-100), not {value!r}"
        ) from None
    if not math.isfinite(number) or not 0 <= number <= 100:
        raise InvalidInput(f"{where}: {value!r} is not a percentage in [0, 100]")
    return number


def _paper_key(entry: Mapping[str, Any], where: str) -> str | None:
    """A paper named by key must be declared in configs/papers.yaml (its arXiv id lives there)."""
    key = entry.get("paper")
    if key is None:
        return None
    from ccpo_cli.papers import load_papers

    if str(key) not in load_papers().papers:
        raise InvalidInput(f"{where}: paper {key!r} is not declared in configs/papers.yaml")
    return str(key)


def _read_benchmark(path: Path) -> Benchmark:
    try:
        document = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        raise InvalidInput(
            f"{path}: cannot read the benchmark ({error.__class__.__name__})"
        ) from None
    where = str(path)
    if not isinstance(document, Mapping):
        raise InvalidInput(f"{where}: expected a mapping (name, display_name, metrics, ...)")
    name = _text(document, "name", where)
    if name != path.stem:
        raise InvalidInput(f"{where}: name {name!r} differs from the file name {path.stem!r}")
    metrics = _mapping(document, "metrics", where)
    tasks = _task_types(document, where)
    declared = [str(metric) for metric in _list(document, "identifying_metrics", where)]
    identifying = frozenset(
        declared + [task.metric for task in tasks] + [task.training_metric for task in tasks]
    )
    protocols = {
        str(key): _text(spec or {}, "description", f"{where}: protocols.{key}")
        for key, spec in _mapping(document, "protocols", where).items()
    }
    prompt = _mapping(document, "prompt", where)
    return Benchmark(
        name=name,
        display_name=_text(document, "display_name", where),
        description=" ".join(_text(document, "description", where).split()),
        env_name_contains=_text(document, "env_name_contains", where).lower(),
        success_metric=_text(metrics, "success", f"{where}: metrics"),
        train_success_metric=_text(metrics, "train_success", f"{where}: metrics"),
        score_metric=_text(metrics, "score", f"{where}: metrics", required=False),
        task_types=tasks,
        identifying_metrics=identifying,
        evaluation_split=_split(document, where),
        prompt_source=_text(prompt, "source", f"{where}: prompt"),
        prompt_description=" ".join(_text(prompt, "description", f"{where}: prompt").split()),
        protocols=MappingProxyType(protocols),
        published_baselines=_baselines(name, document, protocols, where),
        paper=_paper_key(document, where),
    )


@cache
def _loaded(name: str) -> Benchmark:
    return _read_benchmark(benchmarks_dir() / f"{name}.yaml")


def load_benchmark(name: str) -> Benchmark:
    """The benchmark `name`; InvalidInput (exit 3) naming the known ones for any other name.
    The name is looked up among the declared files, never used as a path."""
    known = list_benchmarks()
    if name not in known:
        raise InvalidInput(f"unknown benchmark {name!r} (known: {', '.join(known)})")
    return _loaded(name)


def all_benchmarks() -> tuple[Benchmark, ...]:
    return tuple(load_benchmark(name) for name in list_benchmarks())


@lru_cache(maxsize=1)
def _identifying_index() -> Mapping[str, str]:
    index: dict[str, str] = {}
    for benchmark in all_benchmarks():
        for metric in benchmark.identifying_metrics:
            if metric in index:
                raise InvalidInput(
                    f"metric {metric!r} identifies both {index[metric]} and {benchmark.name}"
                )
            index[metric] = benchmark.name
    return MappingProxyType(index)


def detect_benchmark(metric_names: Iterable[str]) -> str | None:
    """The benchmark whose identifying metric names appear among `metric_names`; None when no
    benchmark's do (a log of `val/success_rate` alone says nothing). InvalidInput when names
    of two benchmarks appear together: such a log is not one benchmark's."""
    index = _identifying_index()
    found: dict[str, str] = {}
    for metric in metric_names:
        benchmark = index.get(metric)
        if benchmark is not None:
            found.setdefault(benchmark, metric)
    if len(found) > 1:
        named = "; ".join(f"{benchmark}: {metric!r}" for benchmark, metric in sorted(found.items()))
        raise InvalidInput(f"metric names of {len(found)} benchmarks in one log ({named})")
    return next(iter(found), None)


def benchmark_for_env_name(env_name: Any) -> str | None:
    """The benchmark of verl-agent's `env.env_name` (Webshop, alfworld/AlfredTWEnv,
    gym_cards/EZPoints-v0, ...); None for a name no benchmark, or more than one, claims."""
    if not isinstance(env_name, str) or not env_name:
        return None
    lowered = env_name.lower()
    matches = [
        benchmark.name for benchmark in all_benchmarks() if benchmark.env_name_contains in lowered
    ]
    return matches[0] if len(matches) == 1 else None


@lru_cache(maxsize=1)
def task_type_keys() -> frozenset[str]:
    """Every benchmark's task-type short keys (runs.db's task_type values)."""
    return frozenset(task.key for benchmark in all_benchmarks() for task in benchmark.task_types)
