"""Protocol facts of a run: what it was evaluated on and how it was trained, as recorded.

A fact is one named value (`FACT_KEYS`) of a run, from an ingest option or from the run's
verl configuration (`facts_from_config`: the resolved Hydra YAML, or the launch command with its
`key=value` overrides). Facts are append-only, like evaluations: the first value recorded for a
key stands, and a different value recorded later is kept beside it as a conflict, never a silent
change. `total_steps` lives in the runs table; a re-ingest that names another total is recorded
here as a conflict of that key (`reconcile_total_steps`).

Split names are the benchmark's (configs/benchmarks/<name>.yaml): verl-agent's ALFWorld
validation runs on `env.alfworld.eval_dataset` (`eval_in_distribution` is ALFWorld's
`valid_seen` games, `eval_out_of_distribution` `valid_unseen`). A run's split is recorded only
when its log or its user names it; the benchmark's verl-agent default is never recorded as if
the log had said it, so a log that names no split has its split not recorded (docs/runs-db.md).

What a log printed about its own run (`facts_from_log`: verl's resolved config, the traced
launch and data-preparation commands) is recorded the same way, before the options given to
ingest, so a contradiction between the two is kept as a conflict. `stated_arm_flags` turns the
recorded facts into ccpo arm-flag names, for comparing what a run says it trained with what
the arm registry says.

One concern, kept in one file past 400 lines: the fact keys (`FACT_KEYS`), the rules that read
each key from a verl config or a log and the append-only recording that checks facts against the
same keys are one vocabulary; split, a new fact would be added in two places.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeGuard

import sqlite_utils

from ccpo_cli.arms import FLAG_NAMES, FLAG_SPECS, coerce_flag
from ccpo_cli.benchmarks import all_benchmarks, benchmark_for_env_name, load_benchmark
from ccpo_cli.bounded_yaml import YamlSyntaxError, load_yaml, read_bounded_text
from ccpo_cli.errors import CcpoError, InvalidInput
from ccpo_cli.store.db import utc_now
from ccpo_cli.store.readers.base import StatedConfig

FACT_KEYS = (
    "split",
    "temperature",
    "episodes",
    "seed",
    "hardware",
    "model",
    "estimator",
    "batch",
    "group",
    "max_steps",
    "gamma",
    "lr",
    "kl",
    "total_steps",
    "adv_mode",
    "step_advantage_w",
    "invalid_penalty",
    "arm_flags",
    "agent",
    "resumed_from",
    "algorithm",
    "adapter",
    "crashed_after_step",
    "task_types",
)
# The one verl-agent Hydra key each plain fact is read from (verl/trainer/config/ppo_trainer.yaml).
# The split (ALFWorld's key is named here for the card's evidence), the estimator's own
# settings and the facts a switch can cancel are read by `facts_from_config` below.
VERL_CONFIG_KEYS = {
    "split": "env.alfworld.eval_dataset",
    "temperature": "actor_rollout_ref.rollout.val_kwargs.temperature",
    "seed": "env.seed",
    "model": "actor_rollout_ref.model.path",
    "batch": "data.train_batch_size",
    "group": "env.rollout.n",
    "max_steps": "env.max_steps",
    "gamma": "algorithm.gamma",
    "lr": "actor_rollout_ref.actor.optim.lr",
    "kl": "actor_rollout_ref.actor.kl_loss_coef",
    "total_steps": "trainer.total_training_steps",
}
HARDWARE_KEYS = ("trainer.nnodes", "trainer.n_gpus_per_node")


def _alfworld_splits() -> dict[str, str]:
    split = load_benchmark("alfworld").evaluation_split
    # The shipped alfworld.yaml states its evaluation_split; None would mean a broken install.
    assert split is not None, "configs/benchmarks/alfworld.yaml has no evaluation_split"
    return dict(split.values)


# ALFWorld's verl-agent split names -> ccpo's (configs/benchmarks/alfworld.yaml).
VERL_SPLITS = _alfworld_splits()
# Switches that cancel a stated value: greedy validation has temperature 0 whatever
# val_kwargs.temperature says; without the KL loss or the invalid-action penalty their
# coefficients are not applied.
_CANCELLED_BY = {
    "temperature": "actor_rollout_ref.rollout.val_kwargs.do_sample",
    "kl": "actor_rollout_ref.actor.use_kl_loss",
    "invalid_penalty": "actor_rollout_ref.actor.use_invalid_action_penalty",
}
ESTIMATOR_KEY = "algorithm.adv_estimator"
# ccpo's verl launcher names the arm's own flags under this prefix (`+algorithm.ccpo.<flag>`)
# and sets algorithm.adv_estimator to ccpo whatever the arm's estimator.
CCPO_FLAG_PREFIX = "algorithm.ccpo."
# Facts that are arm flags under another name (or the same one): fact -> Arm flag.
FACT_FLAGS = {
    "estimator": "estimator",
    "adv_mode": "adv_mode",
    "gamma": "gamma",
    "invalid_penalty": "invalid_penalty",
    "step_advantage_w": "step_advantage_w",
}
_RECORDED_FORM = {spec.name: spec for spec in FLAG_SPECS}
# verl-agent's data preparation: the placeholder rows one epoch and one validation read.
_PREPARE_SIZE = re.compile(r"--(?P<which>train|val)_data_size[ =](?P<rows>\d+)\b")


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


# A line of a YAML document: blank, a comment, a list item, a `key:` (quoted or not), or an
# indented continuation of the value above. Anything else at the left margin is other output.
_YAML_LINE = re.compile(r"^(?:\s*(?:#.*)?|\s*- .*|\s*-|\s*['\"\w.+/$-][^:]*:(?:\s.*)?|\s+\S.*)$")


def _yaml_around_foreign_lines(text: str, source: str, dropped: list[int]) -> Any:
    """The YAML document of `text`, read around lines that are not YAML when it does not read
    whole (their numbers added to `dropped`); None when it is no YAML either way."""
    try:
        return load_yaml(text, source)
    except YamlSyntaxError:
        pass
    lines = text.splitlines()
    foreign = [number for number, line in enumerate(lines, 1) if not _YAML_LINE.match(line)]
    if not foreign or len(foreign) == len(lines):
        return None  # not YAML: maybe a launch command
    skipped = set(foreign)
    kept = "\n".join(line for number, line in enumerate(lines, 1) if number not in skipped)
    try:
        document = load_yaml(kept, source)
    except YamlSyntaxError:
        return None
    dropped.extend(foreign)
    return document


def _command_overrides(text: str, left_out: list[int] | None = None) -> dict[str, Any]:
    """The `key=value` Hydra overrides of a launch command (`+key`, `++key` alike). A line
    that does not split as shell words (other output with an unbalanced quote) is left out and
    its number added to `left_out`; the command's other lines are read."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as error:
        words = []
        for number, line in enumerate(text.splitlines(), 1):
            try:
                words += shlex.split(line.rstrip().removesuffix("\\"), comments=True)
            except ValueError:
                if left_out is None:
                    raise InvalidInput(f"cannot split the launch command ({error})") from None
                left_out.append(number)
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


# ccpo's own definition files, told apart by the keys only they hold at the top (their readers:
# benchmarks.py, arms.py, experiments/designs.py, the protocol files). Such a file flattens into
# keys no run has, so taken as a run's config it would be recorded silently as facts of nothing.
_CCPO_DEFINITIONS = (
    (
        "benchmark definition",
        "configs/benchmarks",
        "name the benchmark with --benchmark {name}",
        {"env_name_contains", "identifying_metrics", "evaluation_split", "published_baselines"},
    ),
    ("arm definition", "configs/arms", "name the arm with --arm {name}", {"flags"}),
    (
        "design",
        "configs/designs",
        "a design is for `ccpo matrix --design {name}`",
        {"warm_start", "eval_every", "eval_from", "window_start", "eval_games"},
    ),
    (
        "launch protocol",
        "configs/protocol",
        "give the run's resolved Hydra config or its launch command",
        {"entrypoint", "host_profiles", "placeholder_data"},
    ),
    (
        "table of base-model licenses",
        "configs",
        "give the run's resolved Hydra config or its launch command",
        {"base_model_licenses"},
    ),
)


def _refuse_ccpo_definition(path: Path, document: Mapping[str, Any]) -> None:
    keys = {str(key) for key in document}
    for kind, folder, hint, marks in _CCPO_DEFINITIONS:
        if keys & marks:
            name = str(document.get("name") or "NAME")
            raise InvalidInput(
                f"{path}: this is a ccpo {kind} (like those in {folder}/), not a run's config; "
                + hint.format(name=name)
            )


def read_config_file(path: str | Path, left_out: list[int] | None = None) -> dict[str, Any]:
    """The flattened configuration of a verl run: a resolved Hydra YAML file, or a text file
    holding the launch command with `key=value` overrides. InvalidInput when neither.

    Other output caught in the file (a `WARNING:` line, a Ray actor's line) is read around: a
    line that does not continue the YAML document or the command is left out, its number added
    to `left_out`, and the rest is read."""
    path = Path(path)
    try:
        text = read_bounded_text(path)
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(f"{path}: cannot read the run config ({error})") from None
    dropped: list[int] = []
    document = _yaml_around_foreign_lines(text, str(path), dropped)
    if isinstance(document, Mapping):
        _refuse_ccpo_definition(path, document)
        flat = flatten(document)
    else:
        dropped = []
        flat = _command_overrides(text, dropped)
    if left_out is not None:
        left_out.extend(dropped)
    if not flat:
        raise InvalidInput(
            f"{path}: neither a Hydra config nor a launch command with key=value overrides"
        )
    return flat


def _split_from_config(flat: Mapping[str, Any]) -> str | None:
    """The split the config states, in the benchmark's names: from the benchmark env.env_name
    names, else from whichever benchmark's split key the config sets."""
    named = benchmark_for_env_name(flat.get("env.env_name"))
    candidates = [load_benchmark(named)] if named else list(all_benchmarks())
    for benchmark in candidates:
        if benchmark.evaluation_split is not None:
            split = benchmark.evaluation_split.from_config(flat)
            if split is not None:
                return split
    if named and load_benchmark(named).evaluation_split is not None:
        # The benchmark's split is its own (a key, or verl-agent's default), and data.val_files
        # holds placeholder rows for its environment, not the questions validated on.
        return None
    return _split_from_val_files(flat.get(VAL_FILES_KEY))


# verl's validation data: the split of a benchmark without a split key of its own is the file it
# validates on (Search-R1's test.parquet, verl-agent search's validation.parquet).
VAL_FILES_KEY = "data.val_files"
# verl-agent's environment benchmarks validate on placeholder rows (prepare.py --mode text or
# visual writes data/<mode>/test.parquet): such a file names no split.
_PLACEHOLDER_FOLDERS = frozenset({"text", "visual"})


def _split_from_val_files(files: Any) -> str | None:
    """The split a `data.val_files` value names: each file's name without its extension
    (`.../test.parquet` is `test`), several joined with `+`; None for verl-agent's placeholder
    rows and for a value that names no file."""
    if isinstance(files, str) and files.startswith("["):
        files = _scalar(files)
    paths = [files] if isinstance(files, str) else files
    if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
        return None
    names = []
    for text in paths:
        path = PurePosixPath(text.strip())
        if not path.name or path.parent.name in _PLACEHOLDER_FOLDERS:
            return None
        names.append(path.name.split(".")[0])
    return "+".join(dict.fromkeys(names)) or None


def _estimator_settings(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The estimator a run trained and the settings of it the config states. A ccpo launch
    names the arm's flags under algorithm.ccpo (its adv_estimator is always ccpo); verl-agent's
    own GRPO normalises by the group's std when algorithm.norm_adv_by_std_in_grpo is true, its
    GiGPO by algorithm.gigpo.mode."""
    arm_flags = {
        key[len(CCPO_FLAG_PREFIX) :]: value
        for key, value in flat.items()
        if key.startswith(CCPO_FLAG_PREFIX) and key[len(CCPO_FLAG_PREFIX) :] in FLAG_NAMES
    }
    facts: dict[str, Any] = {}
    estimator = arm_flags.get("estimator", flat.get(ESTIMATOR_KEY))
    if estimator is not None:
        facts["estimator"] = estimator
    if arm_flags:
        facts["arm_flags"] = dict(sorted(arm_flags.items()))
        for flag in ("adv_mode", "step_advantage_w"):
            if arm_flags.get(flag) is not None:
                facts[flag] = arm_flags[flag]
    elif estimator == "grpo" and flat.get("algorithm.norm_adv_by_std_in_grpo") is not None:
        facts["adv_mode"] = (
            "mean_std_norm" if _true(flat["algorithm.norm_adv_by_std_in_grpo"]) else "mean_norm"
        )
    elif estimator == "gigpo":
        if flat.get("algorithm.gigpo.mode") is not None:
            facts["adv_mode"] = flat["algorithm.gigpo.mode"]
        if flat.get("algorithm.gigpo.step_advantage_w") is not None:
            facts["step_advantage_w"] = flat["algorithm.gigpo.step_advantage_w"]
    return facts


# A value a launch script never expanded (`key=$train_data_size`, Hydra's `${oc.env:X}`).
_VARIABLE = re.compile(r"\$\{?([A-Za-z_][\w.:]*)")
VAL_ONLY_KEY = "trainer.val_only"
ALGORITHM_PREFIX = "algorithm."


# A model loaded from the Hugging Face cache: <cache>/models--<org>--<name>/snapshots/<revision>
# (the cache writes a repository id's "/" as "--", which a Hub name may not contain).
_HUB_CACHE_MODEL = re.compile(r"(?:^|/)models--(?P<repo>[^/]+?)/snapshots/[^/]+/?$")


def hub_model_id(model: str) -> str:
    """The Hub repository id of a model path in the Hugging Face cache
    (`.../models--Qwen--Qwen2.5-1.5B-Instruct/snapshots/989a...` is Qwen/Qwen2.5-1.5B-Instruct);
    any other value as it is: a local folder names no Hub model for sure."""
    found = _HUB_CACHE_MODEL.search(model)
    if found is None or "--" not in found.group("repo"):
        return model
    return found.group("repo").replace("--", "/", 1)


def unexpanded_variables(flat: Mapping[str, Any] | None) -> dict[str, str]:
    """{config key: the variable its value names} for values that are a shell or Hydra
    variable, not a value: they are never facts (the script's variable is not what ran)."""
    found = {}
    for key, value in (flat or {}).items():
        if isinstance(value, str) and (match := _VARIABLE.search(value)):
            found[key] = match.group(1)
    return found


def states_val_only(flat: Mapping[str, Any] | None) -> bool:
    """Whether a config says the run only validated (verl's `trainer.val_only=True`)."""
    return flat is not None and flat.get(VAL_ONLY_KEY) is not None and _true(flat[VAL_ONLY_KEY])


def algorithm_settings(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Every `algorithm.*` key the config states, as printed, by its name under `algorithm.`:
    what an estimator ccpo does not implement is known by (store/identity.py)."""
    return {
        key[len(ALGORITHM_PREFIX) :]: value
        for key, value in sorted(flat.items())
        if key.startswith(ALGORITHM_PREFIX) and not key.startswith(CCPO_FLAG_PREFIX)
    }


def _true(value: Any) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1")


def facts_from_config(flat: Mapping[str, Any]) -> dict[str, Any]:
    """The facts a flattened verl configuration gives (`VERL_CONFIG_KEYS`, the split, the
    estimator and its settings, the GPUs), only those it states. A value that is an unexpanded
    variable (`unexpanded_variables`) states nothing."""
    variables = unexpanded_variables(flat)
    flat = {key: value for key, value in flat.items() if key not in variables}
    facts = {
        name: flat[key]
        for name, key in VERL_CONFIG_KEYS.items()
        if name != "split" and flat.get(key) is not None
    }
    coefficient = flat.get("actor_rollout_ref.actor.invalid_action_penalty_coef")
    if coefficient is not None:
        facts["invalid_penalty"] = coefficient
    for fact, switch in _CANCELLED_BY.items():
        if fact in facts and flat.get(switch) is not None and not _true(flat[switch]):
            facts[fact] = 0.0
    split = _split_from_config(flat)
    if split is not None:
        facts["split"] = split
    facts.update(_estimator_settings(flat))
    if facts.get("total_steps") is not None and int(facts["total_steps"]) <= 0:
        del facts["total_steps"]  # verl's "-1 / null: derived from epochs", not a number of steps
    nodes, gpus = (flat.get(key) for key in HARDWARE_KEYS)
    if gpus:
        facts["hardware"] = f"{int(nodes or 1)} node(s) x {int(gpus)} GPUs"
    algorithm = algorithm_settings(flat)
    if algorithm.get("adv_estimator") is not None:
        facts["algorithm"] = algorithm
    adapter = _adapter(flat)
    if adapter is not None:
        facts["adapter"] = adapter
    return facts


# verl's LoRA settings: a rank above 0 trains low-rank adapters on a frozen base model, not the
# base model's weights (verl-agent and verl < 0.6 name them model.lora_*, later verl model.lora.*).
_LORA_RANK_KEYS = ("actor_rollout_ref.model.lora_rank", "actor_rollout_ref.model.lora.rank")


def _adapter(flat: Mapping[str, Any]) -> dict[str, Any] | None:
    """{"type": "lora", "rank", "alpha", "target_modules"} when the config trains LoRA adapters."""
    for rank_key in _LORA_RANK_KEYS:
        rank = flat.get(rank_key)
        if _positive_int(rank):
            stem = rank_key[: -len("rank")]
            adapter = {"type": "lora", "rank": rank}
            for name in ("alpha", "target_modules"):
                if flat.get(stem + name) is not None:
                    adapter[name] = flat[stem + name]
            return adapter
    return None


def flat_config(event: StatedConfig) -> dict[str, Any] | None:
    """The flattened config a printed config or a traced launch command states; None for other
    events and for a command that does not split."""
    if event.kind == "resolved":
        return flatten(event.value)
    if event.kind == "launch":
        try:
            return _command_overrides(event.value)
        except InvalidInput:
            return None
    return None


def facts_from_log(stated: Sequence[StatedConfig]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """What a log printed about its own run, as (the flattened resolved config or None, facts).

    The resolved config verl prints wins over the traced launch command (it is what the
    command resolved to). The data-preparation command gives the validation's episodes (its
    `--val_data_size` rows, each played `val_kwargs.n` times, when the config states n) and,
    when `trainer.total_training_steps` is not set, the total steps verl derives: total_epochs
    x (train rows // train batch size), its dataloader dropping the last partial batch."""
    resolved = next((flatten(item.value) for item in stated if item.kind == "resolved"), None)
    launched: dict[str, Any] = {}
    for item in stated:
        if item.kind == "launch":
            launched.update(
                flat_config(item) or {}
            )  # a traced line that does not split states nothing
    flat = dict(launched, **(resolved or {}))
    facts = facts_from_config(flat) if flat else {}
    resumed = [item.value for item in stated if item.kind == "resume"]
    if resumed:
        facts["resumed_from"] = resumed[0]  # where this log's training starts again
    rows: dict[str, int] = {}
    for item in stated:
        if item.kind == "prepare":
            for match in _PREPARE_SIZE.finditer(item.value):
                rows.setdefault(match.group("which"), int(match.group("rows")))
    repeats = flat.get("actor_rollout_ref.rollout.val_kwargs.n")
    if (
        "val" in rows
        and isinstance(repeats, int)
        and not isinstance(repeats, bool)
        and repeats >= 1
    ):
        facts["episodes"] = rows["val"] * repeats
    epochs, batch = flat.get("trainer.total_epochs"), flat.get("data.train_batch_size")
    if (
        "total_steps" not in facts
        and "train" in rows
        and _positive_int(epochs)
        and _positive_int(batch)
    ):
        steps = int(epochs) * (rows["train"] // int(batch))
        if steps > 0:
            facts["total_steps"] = steps
    return resolved, facts


def _positive_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def stated_arm_flags(facts: Mapping[str, Any]) -> dict[str, Any]:
    """The arm flags a run's recorded facts state, by ccpo flag name (`ccpo_cli.arms.FLAG_NAMES`)
    and in the recorded form of `Arm.flags()`, so they compare directly with the registry's.

    Only stated flags appear: a flag the run did not state is absent, never filled in. The
    plain facts give estimator, adv_mode, gamma, invalid_penalty and step_advantage_w; a ccpo
    launch's `arm_flags` give every flag it named and win over the plain facts. A stated
    value that is not a valid value of its flag is returned as it was recorded (it still
    differs from the registry's). Whether a difference matters (an inert flag) is for
    `ccpo_cli.arms.inert_flags` to say."""
    stated: dict[str, Any] = {
        flag: facts[fact] for fact, flag in FACT_FLAGS.items() if facts.get(fact) is not None
    }
    arm_flags = facts.get("arm_flags")
    if isinstance(arm_flags, Mapping):
        stated.update({flag: value for flag, value in arm_flags.items() if flag in FLAG_NAMES})
    recorded = {}
    for flag, value in stated.items():
        try:
            recorded[flag] = _RECORDED_FORM[flag].recorded(
                coerce_flag(flag, value, source="recorded fact")
            )
        except CcpoError:
            recorded[flag] = value
    return {flag: recorded[flag] for flag in FLAG_NAMES if flag in recorded}


def _encode(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _record(
    db: sqlite_utils.Database, run_id: int, key: str, value: Any, source: str | None
) -> None:
    db.table("run_facts").insert(
        {
            "run_id": run_id,
            "key": key,
            "value": _encode(value),
            "source": source,
            "recorded_at": utc_now(),
        },
        ignore=True,  # the same value again is already on record
    )


def record_facts(
    db: sqlite_utils.Database, run_id: int, facts: Mapping[str, Any], source: str | None = None
) -> list[dict]:
    """Record facts of a run; returns the conflicts this created ({key, recorded, given})."""
    unknown = sorted(set(facts) - set(FACT_KEYS))
    if unknown:
        raise InvalidInput(
            f"unknown run facts: {', '.join(unknown)} (known: {', '.join(FACT_KEYS)})"
        )
    recorded = run_facts(db, run_id)["values"]
    conflicts = []
    for key, value in facts.items():
        if value is None:
            continue
        if key in recorded and recorded[key] != value:
            conflicts.append({"key": key, "recorded": recorded[key], "given": value})
        _record(db, run_id, key, value, source)
    return conflicts


def record_run_facts(
    db: sqlite_utils.Database, run: str, facts: Mapping[str, Any], source: str
) -> list[dict]:
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
    for row in db.table("run_facts").rows_where("run_id = ?", [run_id], order_by="id"):
        value = json.loads(row["value"])
        values.setdefault(row["key"], value)
        seen.setdefault(row["key"], [])
        if value not in seen[row["key"]]:
            seen[row["key"]].append(value)
    return {
        "values": values,
        "conflicts": {key: found for key, found in seen.items() if len(found) > 1},
    }


def _run_row(db: sqlite_utils.Database, run: str) -> dict | None:
    rows = list(
        db.table("runs").rows_where(
            "name = ?", [run], select="id, total_steps, last_step, status, config"
        )
    )
    return rows[0] if rows else None


def reconcile_total_steps(
    db: sqlite_utils.Database, run: str, given: int | None, source: str | None = None
) -> tuple[int | None, dict | None]:
    """The total steps to write for `run`, and the conflict when `given` differs from what is
    recorded: the recorded total stays in the runs table, and both values are kept as facts, so
    a shorter total can never make an unfinished run look finished."""
    row = _run_row(db, run)
    if (
        given is None
        or row is None
        or row["total_steps"] is None
        or int(given) == int(row["total_steps"])
    ):
        return given, None
    _record(db, row["id"], "total_steps", int(row["total_steps"]), "runs.total_steps")
    _record(db, row["id"], "total_steps", int(given), source)
    return None, {"key": "total_steps", "recorded": int(row["total_steps"]), "given": int(given)}


def derived_status(last_step: int | None, total_steps: list[int], ended: bool) -> str | None:
    """The run status the data gives: finished at or past the largest recorded total; below it
    (or before any step), stopped when the caller says the run has ended (an explicit marker),
    else running."""
    if last_step is None:
        return "stopped" if ended else None
    if total_steps and last_step >= max(total_steps):
        return "finished"
    return "stopped" if ended else "running"


def record_ingest_facts(
    db: sqlite_utils.Database,
    run: str,
    facts: Mapping[str, Any],
    *,
    config: Mapping[str, Any] | None = None,
    ended: bool = False,
    source: str | None = None,
    stated: Mapping[str, Any] | None = None,
    stated_source: str | None = None,
) -> list[dict]:
    """After an ingest: record what the log stated (`stated`, first), then the facts given (a
    split neither names stays not recorded); keep the config when the run has none, and set the
    status from the data. Returns the fact conflicts this created."""
    row = _run_row(db, run)
    # The ingest recorded the run (ensure_run) before its facts.
    assert row is not None, f"run {run!r} is not recorded"
    facts = {key: value for key, value in facts.items() if value is not None}
    stated = {key: value for key, value in (stated or {}).items() if value is not None}
    conflicts = record_facts(db, row["id"], stated, stated_source) if stated else []
    conflicts += record_facts(db, row["id"], facts, source)
    changes: dict[str, Any] = {}
    if config and not row["config"]:
        changes["config"] = json.dumps(dict(config), sort_keys=True, separators=(",", ":"))
    totals = [
        int(value)
        for value in [
            row["total_steps"],
            *run_facts(db, row["id"])["conflicts"].get("total_steps", []),
        ]
        if value is not None
    ]
    status = derived_status(row["last_step"], totals, ended)
    if status == "running" and row["status"] in ("stopped", "failed"):
        status = None  # an ingest without --ended never undoes the word that the run has ended
    if status is not None and status != row["status"]:
        changes["status"] = status
    if changes:
        db.table("runs").update(row["id"], dict(changes, updated_at=utc_now()))
    return conflicts


def protocol_facts(
    config_file: str | Path | None, *, left_out: list[int] | None = None, **given: Any
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The flattened config (None without a file) and the facts of an ingest: those the config
    gives, overridden by the options given (None means not given). The lines of other output
    the config file was read around go to `left_out`."""
    flat = read_config_file(config_file, left_out) if config_file is not None else None
    facts = facts_from_config(flat) if flat else {}
    facts.update({key: value for key, value in given.items() if value is not None})
    for key, value in facts.items():  # runs.db holds 64-bit integers; a config may state more
        if type(value) is int and not -(2**63) <= value < 2**63:
            raise InvalidInput(
                f"the config's {key} {value}: a whole number past what runs.db holds (2^63 - 1)"
            )
    if isinstance(
        facts.get("seed"), int
    ):  # given, or read from the config: one seed range (seeds.py)
        from ccpo_cli.seeds import check_seed

        check_seed(
            facts["seed"], "--seed" if given.get("seed") is not None else "the config's seed"
        )
    if facts.get("episodes") is not None and int(facts["episodes"]) <= 0:
        raise InvalidInput(
            f"--episodes must be a positive number of episodes, got {facts['episodes']}"
        )
    return flat, facts
