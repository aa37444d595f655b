"""The isolation check: does a comparison of runs isolate the estimator?

Three verdicts. *passes*: every field that must agree was recorded for every run and agrees.
*fails*: some recorded field differs (the differences name the field and the runs).
*unverifiable*: nothing recorded differs, but some field was not recorded for every run (named in
`not_recorded`), so agreement cannot be shown. Seeds of one arm are replicates: they may differ,
and the per-seed fields (data order, step-1 rollouts) are compared between runs of the same seed.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from ccpo_cli.store.facts import flatten
from ccpo_cli.store.identity import RunIdentity

# Fields of a run's recorded identity (store/identity.py) that must agree between every compared
# run for the comparison to isolate the estimator; the hardware is provenance, read from the run;
# and fields that must agree between runs of the same seed across arms.
SHARED_IDENTITY_FIELDS = ("base_model", "benchmark", "backend", "total_steps")
SHARED_RUN_FIELDS = ("hardware",)
PER_SEED_RUN_FIELDS = ("data_order_seed", "step1_rollout_hash")
# Config keys that differ between seeds by design but must agree within one: the checkpoint a
# matrix's shared warm start forks every arm of a seed from.
PER_SEED_CONFIG_KEYS = ("train.start_from",)
# Recorded facts (store/facts.py) compared like the shared fields; the estimator and the seed
# may differ, and split / temperature / episodes are compared as the evaluation protocol.
SHARED_FACTS = ("model", "batch", "group", "gamma", "lr", "kl")
PROTOCOL_FIELDS = ("split", "temperature", "episodes", "turn_limit")
# Config keys that belong to the estimator (allowed to differ between arms): any key under an
# `arm` or `ccpo` namespace, the estimator selector, and any key named like an arm flag (Hydra
# `+algorithm.ccpo.<flag>`, `algorithm.gamma`). Environment variables ccpo sets for its Ray
# workers (CCPO_*) carry the arm and the run. Seeds are checked separately, per arm.
ESTIMATOR_KEY_PARTS = {
    "arm",
    "ccpo",
    "adv_estimator",
    "arm_flags",
    "arm_fingerprint",
    "fingerprint",
}
# Keys that only name or locate one run (paths, names, resume state) or restate other keys.
RUN_LOCAL_KEY_PARTS = {
    "run",
    "run_name",
    "name",
    "experiment_name",
    "project_name",  # the tracker project the run was filed under: a label, not a setting
    "default_local_dir",
    "run_dir",
    "metrics_file",
    "metrics_path",
    "output_dir",
    "checkpoint_dir",
    "resume",
    "resume_mode",
    "resume_from_path",
    "hydra_overrides",
    "ray_address",
    "seed",
    "data_order_seed",
    "created_at",
    "wall_time",
    "resumes",
}
VERDICTS = ("passes", "fails", "unverifiable")


@functools.lru_cache(maxsize=1)
def _arm_flag_names() -> frozenset[str]:
    from ccpo_cli.arms import FLAG_NAMES

    return frozenset(FLAG_NAMES)


def _is_estimator_or_local(key: str) -> bool:
    parts = [part.lstrip("+") for part in key.split(".")]
    if parts[0] == "algorithm":
        return True  # verl's estimator section: what an arm is (an external arm's flags, store/identity.py)
    if any(part.startswith("CCPO_") for part in parts):
        return True
    if ESTIMATOR_KEY_PARTS.intersection(parts) or parts[-1] in _arm_flag_names():
        return True
    return parts[-1] in RUN_LOCAL_KEY_PARTS or parts[0] in RUN_LOCAL_KEY_PARTS


def _describe(values: dict[str, Any]) -> str:
    by_value: dict[str, list[str]] = defaultdict(list)
    for run, value in values.items():
        by_value["not recorded" if value is None else json.dumps(value)].append(run)
    return " vs ".join(f"{value} ({', '.join(runs)})" for value, runs in by_value.items())


def _field_check(
    name: str, values: dict[str, Any], differences: list[str], not_recorded: list[str]
) -> None:
    """A difference when recorded values disagree; not recorded when some run lacks the value."""
    recorded = {run: value for run, value in values.items() if value is not None}
    if len({json.dumps(value, sort_keys=True) for value in recorded.values()}) > 1:
        differences.append(f"{name}: {_describe(values)}")
    elif len(recorded) < len(values):
        missing = sorted(run for run in values if run not in recorded)
        not_recorded.append(name if not recorded else f"{name} (for {', '.join(missing)})")


def _config_differences(runs: list[dict], differences: list[str], not_recorded: list[str]) -> None:
    configs = {}
    for run in runs:
        config = run["config"] if isinstance(run["config"], dict) and run["config"] else None
        configs[run["name"]] = (
            None
            if config is None
            else {
                key: value
                for key, value in flatten(config).items()
                if not _is_estimator_or_local(key) and key not in PER_SEED_CONFIG_KEYS
            }
        )
    recorded = {name: flat for name, flat in configs.items() if flat is not None}
    if len(recorded) < len(configs):
        missing = sorted(name for name in configs if name not in recorded)
        not_recorded.append("config" if not recorded else f"config (for {', '.join(missing)})")
    for key in sorted({key for flat in recorded.values() for key in flat}):
        values = {name: flat.get(key) for name, flat in recorded.items()}
        if len({json.dumps(value, sort_keys=True) for value in values.values()}) > 1:
            differences.append(f"config {key}: {_describe(values)}")


def _protocol_value(identity: RunIdentity, field: str) -> Any:
    """A protocol field as the runs are pooled by it: an inferred episode count settled to the
    recorded count of its setting is that count (store/identity.py `pooled_episodes`)."""
    protocol = identity.protocol
    if field == "episodes" and protocol.pooled_episodes is not None:
        return protocol.pooled_episodes
    return getattr(protocol, field)


def _seed_differences(
    runs: list[dict], arm_of: dict[str, str], differences: list[str], not_recorded: list[str]
) -> None:
    # A run without a recorded seed is no seed: it enters no seed set, and is named as not recorded.
    seeds_by_arm: dict[str, set] = defaultdict(set)
    for run in runs:
        if run["seed"] is not None:
            seeds_by_arm[arm_of[run["name"]]].add(run["seed"])
    unseeded = sorted(run["name"] for run in runs if run["seed"] is None)
    if unseeded:
        not_recorded.append(f"seed (for {', '.join(unseeded)})")
    # Seeds within one arm are replicates; arms run on different seed sets are not paired.
    if len(seeds_by_arm) > 1 and len({frozenset(seeds) for seeds in seeds_by_arm.values()}) > 1:
        differences.append(
            "seed: "
            + " vs ".join(
                f"{sorted(seeds, key=str)} ({arm})" for arm, seeds in seeds_by_arm.items()
            )
        )
    by_seed: dict[Any, list[dict]] = defaultdict(list)
    for run in runs:
        if run["seed"] is not None:
            by_seed[run["seed"]].append(run)
    for field in PER_SEED_RUN_FIELDS:
        for seed, members in by_seed.items():
            label = field if len(by_seed) == 1 else f"{field} (seed {seed})"
            if len(members) > 1:
                _field_check(
                    label, {run["name"]: run[field] for run in members}, differences, not_recorded
                )
            elif members[0][field] is None:
                not_recorded.append(label)
    for key in PER_SEED_CONFIG_KEYS:
        for seed, members in by_seed.items():
            values = {
                run["name"]: flatten(run["config"]).get(key)
                if isinstance(run["config"], dict)
                else None
                for run in members
            }
            if any(value is not None for value in values.values()):
                label = f"config {key}" if len(by_seed) == 1 else f"config {key} (seed {seed})"
                _field_check(label, values, differences, not_recorded)


def isolation_check(
    runs: list[dict], identities: Mapping[str, RunIdentity], arm_of: dict[str, str]
) -> dict:
    """The isolation document of `ccpo compare --json` for `runs` (rows of list_runs: provenance,
    config, per-seed evidence); what each run is (model, benchmark, backend, seed, evaluation
    protocol, facts) is read from its recorded identity in `identities`; `arm_of` names each run's
    arm (its comparison unit, so two fingerprints under one arm name are two arms). Keys: verdict,
    estimator_only (verdict passes), compared_runs, differences, not_recorded, seeds_by_arm, note."""
    names = [run["name"] for run in runs]
    runs = [dict(run, seed=identities[run["name"]].seed) for run in runs]
    seeds_by_arm: dict[str, list] = defaultdict(list)
    for run in runs:
        if run["seed"] is not None:
            seeds_by_arm[arm_of[run["name"]]].append(run["seed"])
    differences: list[str] = []
    not_recorded: list[str] = []
    if len(runs) < 2:
        note = "one run: nothing to compare" if runs else "no runs: nothing to compare"
        return _document(names, differences, not_recorded, seeds_by_arm, note)
    for field in SHARED_IDENTITY_FIELDS:
        _field_check(
            field,
            {name: getattr(identities[name], field) for name in names},
            differences,
            not_recorded,
        )
    for field in SHARED_RUN_FIELDS:
        _field_check(field, {run["name"]: run[field] for run in runs}, differences, not_recorded)
    _seed_differences(runs, arm_of, differences, not_recorded)
    _config_differences(runs, differences, not_recorded)
    _evaluation_differences([identities[name] for name in names], differences, not_recorded)
    return _document(names, differences, not_recorded, seeds_by_arm)


def _evaluation_differences(
    identities: list[RunIdentity], differences: list[str], not_recorded: list[str]
) -> None:
    """The recorded facts and evaluation protocols that differ, or that some runs do not record;
    a fact or a turn limit no run records, and a split no run names, is not checked."""
    for fact in SHARED_FACTS:
        values = {identity.run: identity.facts.get(fact) for identity in identities}
        if any(value is not None for value in values.values()):
            _field_check(f"fact {fact}", values, differences, not_recorded)
    for field in PROTOCOL_FIELDS:
        values = {identity.run: _protocol_value(identity, field) for identity in identities}
        if field == "turn_limit" and all(value is None for value in values.values()):
            continue  # no run states its turn limit; a recorded difference is still caught
        if field == "split" and all(value is None for value in values.values()):
            continue  # no run names a dataset split; every evaluation is of the held-out role
        _field_check(f"evaluation {field}", values, differences, not_recorded)


def _document(
    names: list[str],
    differences: list[str],
    not_recorded: list[str],
    seeds_by_arm: dict[str, list],
    note: str | None = None,
) -> dict:
    """The isolation document, its verdict read from what differs and what is not recorded."""
    verdict = "fails" if differences else "unverifiable" if not_recorded else "passes"
    return {
        "verdict": verdict,
        "estimator_only": verdict == "passes",
        "compared_runs": names,
        "differences": differences,
        "not_recorded": not_recorded,
        "seeds_by_arm": dict(seeds_by_arm),
        "note": note,
    }


# A verdict's line names this many differences; the rest are counted (all are in the document).
SHOWN_DIFFERENCES = 3


def shown_differences(differences: list[str]) -> str:
    """The first SHOWN_DIFFERENCES differences, the rest counted: a line, not a list of kilobytes.
    A config difference is named by its key: its values (paths, often) are in the document."""
    shown = "; ".join(_config_key_only(text) for text in differences[:SHOWN_DIFFERENCES])
    more = len(differences) - SHOWN_DIFFERENCES
    return shown + (
        f"; and {more} more difference{'s' if more != 1 else ''} (ccpo compare --json lists them)"
        if more > 0
        else ""
    )


# A path on the author's disk inside a difference (a base model loaded from a folder): a line
# shows its last two parts, which name the model; the whole path stays in the compare document.
_PATH_IN_TEXT = re.compile(r"(?<![\w:/.])(?:/|~/)[^\s;,]+")


def _config_key_only(difference: str) -> str:
    if not difference.startswith("config "):
        return _PATH_IN_TEXT.sub(
            lambda found: (
                "a local path ending in " + "/".join(found.group(0).rstrip("/").split("/")[-2:])
            ),
            difference,
        )
    return f"{difference.split(': ', 1)[0]} differs"
