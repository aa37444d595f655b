"""A run's recorded identity: which experiment a run is, read in one place.

Which arm a run trained (name, resolved flags, the overrides on top of the arm file, the
fingerprint), on which base model, with which backend, on which benchmark, from which seed, and
under which evaluation protocol (split, temperature, episodes per evaluation, turn limit) is
decided here and nowhere else: compare, the isolation check, cards and publish read it through
`read_identities` / `run_identity`, typed.

Where each part comes from, first source that has it:

- arm flags: the flags the run recorded (`runs.arm_flags`, else the `arm.flags` of its recorded
  config), else ccpo's arm file of that name with the run's overrides, but only when it computes
  the fingerprint the run recorded (a changed arm file describes another arm);
- overrides: `runs.arm_overrides`, else the config's `arm.overrides`, else the recorded flags that
  differ from the arm file's;
- protocol: the evaluations' own episodes and temperature (the most common pair; a run that used
  more than one is `mixed`), else the run's facts; episodes never recorded are inferred from the
  rates' common denominator when that is unambiguous, else stay not recorded;
- external arm: a run with no arm whose log printed verl's `algorithm.*` keys (the fact
  `algorithm`) trained an estimator by its own name, which ccpo need not implement (PPO/GAE,
  HGAE, RLOO, GiGPO's mean_norm, ...): a named external arm whose flags are the keys as printed
  and whose fingerprint is theirs (`external_arm`), so two logs of one setting are one arm;
- kind: `evaluation` for a reference run that only evaluated an agent (`ccpo eval` under a new
  run name), `training` otherwise.

Two runs are pooled as replicates of one arm only when their `ComparisonUnit`s are equal: the
same arm fingerprint, base model, backend, benchmark and protocol.

One concern, kept in one file past 400 lines: this is the one reader of a run's identity
(docs/architecture.md §3): the typed identity, how each part is resolved from the recorded
columns, facts and evaluations, and the comparison unit built from it stay together so that no
second reader arises.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import sqlite_utils

from ccpo_cli.store.field_values import field_values
from ccpo_cli.store.queries import list_runs
from ccpo_cli.store.records import STANDING

TRAINING = "training"
EVALUATION = "evaluation"
FLAGS_RECORDED = "recorded by the run"
FLAGS_REGISTRY = "ccpo's arm file (it computes the fingerprint the run recorded)"
FLAGS_REGISTRY_UNCHECKED = "ccpo's arm file (the run recorded no fingerprint to check it against)"
FLAGS_COMPLETED = "the run's record, completed from ccpo's arm file"
FLAGS_STATED = "ccpo's arm file, with the flags the run's own log printed in its place"
FLAGS_NOT_RECORDED = "not recorded"
FLAGS_EXTERNAL = (
    "the run's log (verl's algorithm.* keys as printed; an estimator outside ccpo's arm files)"
)
EXTERNAL_PREFIX = "verl-agent:"
EPISODES_RECORDED = "recorded"
EPISODES_NOT_RECORDED = "not recorded"
# Rates beyond this many episodes are read as exact fractions only with full precision.
MAX_INFERRED_EPISODES = 4096
# Inference is accepted when a smaller panel fitting every rate by chance is this unlikely, and
# only from this many distinct informative rates: with fewer, every success count can share a
# factor with the panel (all even, say) and the common denominator is a fraction of it.
INFERENCE_CHANCE = 0.01
MIN_INFERENCE_RATES = 5


@dataclass(frozen=True)
class ArmIdentity:
    """The arm a run trained: `flags` in their recorded form (`Arm.flags()`), None when neither
    the run nor an arm file that matches its fingerprint says them."""

    name: str
    fingerprint: str | None
    flags: Mapping[str, Any] | None
    overrides: Mapping[str, Any]
    flags_source: str
    description: str = ""
    # Flags the run's log printed that contradict the arm file: flag -> (printed, arm file's).
    contradictions: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    recorded_fingerprint: str | None = (
        None  # what the run recorded, when the printed flags change it
    )

    @property
    def is_external(self) -> bool:
        """An estimator known only from the run's log (`external_arm`), not from ccpo's arm files."""
        return self.flags_source == FLAGS_EXTERNAL

    @property
    def label(self) -> str:
        """The arm's name, with the flags set on top of its arm file: an override arm is its own arm."""
        if not self.overrides:
            return self.name
        return f"{self.name} [{', '.join(f'{key}={value}' for key, value in sorted(self.overrides.items()))}]"

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "label": self.label,
            "fingerprint": self.fingerprint,
            "flags": None if self.flags is None else dict(self.flags),
            "overrides": dict(self.overrides),
            "flags_source": self.flags_source,
            "contradictions": {
                flag: {"printed": printed, "arm_file": other}
                for flag, (printed, other) in self.contradictions.items()
            },
            "recorded_fingerprint": self.recorded_fingerprint,
        }


@dataclass(frozen=True)
class ExternalArm:
    """An arm recorded by its name and fingerprint alone: the arm of a run ccpo did not resolve
    itself, such as a log trained elsewhere that `ccpo ingest --arm NAME` names, or an arm ccpo
    does not define. `ensure_run` records its name and fingerprint and no flags or overrides (the
    flags such a run used are the ones its log printed, kept as facts and read back here).

    It is what a writer hands `ensure_run` in place of a typed `Arm`; `ArmIdentity` is the
    reader's answer (flags, where they came from, contradictions), which a writer never records.
    The dataclass's own constructor is the one way to build it, and it checks its fields."""

    name: str
    fingerprint: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"an external arm's name is a non-empty string, not {self.name!r}")
        if self.fingerprint is not None and (
            not isinstance(self.fingerprint, str) or not self.fingerprint
        ):
            raise TypeError(
                f"an external arm's fingerprint is a non-empty string or None, not {self.fingerprint!r}"
            )


@dataclass(frozen=True)
class EvaluationProtocol:
    """How a run's held-out evaluations were taken."""

    split: str | None
    temperature: float | None
    episodes: int | None
    episodes_basis: str
    turn_limit: int | None
    mixed: bool = False  # the run's evaluations used more than one (episodes, temperature)
    # How the split is known: None when recorded, else why it is assumed (a benchmark's default).
    split_assumed: str | None = None
    # The (episodes, temperature) pair as the protocol's evaluation rows recorded it (None where a
    # row did not): the rows a window averages are those with exactly this pair.
    evaluation_key: tuple = (None, None)
    # An inferred count is a common factor of the run's success counts, so the true panel is a
    # multiple of it: the one count recorded by the runs of its setting that it divides, which it
    # is pooled and compared by (`settle_inferred_episodes`); None when no recorded count fits.
    pooled_episodes: int | None = None

    @property
    def episodes_inferred(self) -> bool:
        return self.episodes is not None and self.episodes_basis != EPISODES_RECORDED

    @property
    def episodes_uncertain(self) -> bool:
        """Pooled by a recorded count the inference cannot confirm (a sub-multiple panel)."""
        return self.pooled_episodes is not None and self.pooled_episodes != self.episodes

    def key(self) -> tuple:
        """What must agree for runs to be pooled. Episodes by value: a recorded count, or the
        recorded count an inferred one was settled to (a recorded 128 and an inferred 128 are
        one protocol; an inferred 32 of a 64 panel is pooled with the 64, named as uncertain).
        A count inferred with no recorded count to settle to, or not recorded at all, says
        nothing that splits one arm's seeds apart."""
        episodes = (
            self.episodes if self.episodes_basis == EPISODES_RECORDED else self.pooled_episodes
        )
        return (self.split, self.temperature, episodes, self.turn_limit)

    def as_dict(self) -> dict[str, Any]:
        # The evaluation key is how rows are matched, not part of what the protocol says.
        document = field_values(self, leave_out=frozenset({"evaluation_key"}))
        return {**document, "episodes_uncertain": self.episodes_uncertain}


@dataclass(frozen=True)
class ComparisonUnit:
    """What must agree for runs to be seeds of one arm. `arm_key` is the fingerprint (for an arm
    that recorded none, its name with its overrides; for a run without an arm, the run itself)."""

    arm_key: str
    base_model: str | None
    backend: str | None
    benchmark: str | None
    protocol: tuple

    def setting(self) -> tuple:
        """Everything but the arm: two units with the same setting differ only in the estimator."""
        return (self.base_model, self.backend, self.benchmark, self.protocol)


# The fields of a unit, named as a label or a reason says them.
UNIT_FIELDS = (
    "arm",
    "base model",
    "backend",
    "benchmark",
    "split",
    "temperature",
    "episodes",
    "turn limit",
)


@dataclass(frozen=True)
class RunIdentity:
    run: str
    run_id: int
    uid: str | None
    host: str | None
    kind: str
    arm: ArmIdentity | None
    seed: int | None
    base_model: str | None
    backend: str | None
    benchmark: str | None
    protocol: EvaluationProtocol
    total_steps: int | None
    agent: str | None = None  # the agent a reference run evaluated (oracle, random, hf, ...)
    start: Mapping[str, Any] | None = None  # a fork's start (a matrix's shared warm start)
    facts: Mapping[str, Any] = field(default_factory=dict)
    # A local run's training-noise replicate (`train.rollout_stream`; 0 the ordinary run, None
    # not recorded). Not part of the arm: two streams of one arm are one arm's runs, and the
    # isolation check names the config difference, so an A/A pair is never an arm comparison.
    rollout_stream: int | None = None

    @property
    def is_reference(self) -> bool:
        return self.kind == EVALUATION

    @property
    def unit(self) -> ComparisonUnit:
        # Without a recorded fingerprint an arm is known by its name and overrides alone; without
        # an arm the run is never pooled with anything.
        if self.arm is None:
            arm_key = f"run:{self.run}"
        else:
            arm_key = self.arm.fingerprint or f"name:{self.arm.label}"
        return ComparisonUnit(
            arm_key, self.base_model, self.backend, self.benchmark, self.protocol.key()
        )

    def unit_values(self) -> dict[str, Any]:
        """The unit's fields by their names in UNIT_FIELDS (for labels and reasons)."""
        protocol = self.protocol
        return dict(
            zip(
                UNIT_FIELDS,
                (
                    self.arm.fingerprint if self.arm is not None else None,
                    self.base_model,
                    self.backend,
                    self.benchmark,
                    protocol.split,
                    protocol.temperature,
                    protocol.key()[2],  # the count it is pooled by (unit and label agree)
                    protocol.turn_limit,
                ),
            )
        )

    def as_dict(self) -> dict[str, Any]:
        # The row id is this database's own and the facts are their own document.
        document = field_values(self, leave_out=frozenset({"run_id", "facts"}))
        document.update(
            arm=None if self.arm is None else self.arm.as_dict(),
            protocol=self.protocol.as_dict(),
            start=None if self.start is None else dict(self.start),
        )
        return document


def unit_differences(first: RunIdentity, second: RunIdentity) -> list[str]:
    """The unit fields in which two runs differ, each as 'field: a vs b'."""
    a, b = first.unit_values(), second.unit_values()
    return [
        f"{name}: {_shown(a[name])} vs {_shown(b[name])}"
        for name in UNIT_FIELDS
        if a[name] != b[name]
    ]


def _shown(value: Any) -> str:
    return "not recorded" if value is None else str(value)


# ---- reading -------------------------------------------------------------------------------


def _json(value: Any) -> Any:
    if value is None or isinstance(value, (dict, list)):
        return value
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@functools.lru_cache(maxsize=256)
def _registry_arm(name: str, overrides: tuple[tuple[str, Any], ...]) -> Any:
    """The arm file's arm with these overrides, or None (no such arm file, a broken one, or an
    override this version does not accept)."""
    from ccpo_cli import arms
    from ccpo_cli.errors import CcpoError

    if name not in arms.list_arms():
        return None
    try:
        return arms.load_arm(name, dict(overrides) or None)
    except CcpoError:
        return None


def _registry_flags(name: str) -> Mapping[str, Any] | None:
    arm = _registry_arm(name, ())
    return None if arm is None else arm.flags()


def _with_stated_flags(arm: ArmIdentity, facts: Mapping[str, Any]) -> ArmIdentity:
    """What the run's log printed beats what ccpo's arm file says: flags the log states replace the
    arm file's (and so the fingerprint: it is another arm that ran), and each contradiction is kept
    for the card. Flags the run recorded itself (a ccpo trainer) stand; a contradiction with them
    is kept as well."""
    from ccpo_cli.store.facts import stated_arm_flags

    stated = stated_arm_flags(facts)
    if not stated or arm.flags is None:
        return arm
    contradictions = {
        flag: (value, arm.flags[flag])
        for flag, value in stated.items()
        if flag in arm.flags and arm.flags[flag] != value
    }
    if not contradictions:
        return arm
    if arm.flags_source == FLAGS_RECORDED:
        return replace(arm, contradictions=contradictions)
    from ccpo_cli import arms

    flags = {**arm.flags, **{flag: printed for flag, (printed, _) in contradictions.items()}}
    typed = arms.arm_from_flags(arm.name, flags, arm.description)
    return replace(
        arm,
        flags=flags,
        flags_source=FLAGS_STATED,
        contradictions=contradictions,
        fingerprint=typed.fingerprint if typed is not None else None,
        recorded_fingerprint=arm.fingerprint,
    )


def _arm_identity(row: Mapping[str, Any]) -> ArmIdentity | None:
    name = row.get("arm")
    if not name:
        return None
    config_arm = _mapping(_mapping(row.get("config")).get("arm"))
    fingerprint = row.get("arm_fingerprint")
    flags = _json(row.get("arm_flags"))
    if not isinstance(flags, Mapping):
        flags = config_arm.get("flags") if isinstance(config_arm.get("flags"), Mapping) else None
    overrides = _json(row.get("arm_overrides"))
    if not isinstance(overrides, Mapping):
        overrides = config_arm.get("overrides")
    if not isinstance(overrides, Mapping):
        overrides = _mapping(row.get("config")).get("arm_overrides")
    base = _registry_flags(str(name))
    if not isinstance(overrides, Mapping):
        # Recorded flags without recorded overrides: the overrides are what differs from the arm file.
        overrides = (
            {
                key: value
                for key, value in (flags or {}).items()
                if base is not None and key in base and base[key] != value
            }
            if flags
            else {}
        )
    overrides = {str(key): value for key, value in overrides.items()}
    registry = _registry_arm(str(name), tuple(sorted(overrides.items())))
    description = registry.description if registry is not None else ""
    flags, source = _flags_and_source(flags, registry, fingerprint)
    return ArmIdentity(
        str(name),
        fingerprint,
        None if flags is None else dict(flags),
        overrides,
        source,
        description,
    )


def _flags_and_source(
    flags: Mapping[str, Any] | None, registry: Any, fingerprint: str | None
) -> tuple[Mapping[str, Any] | None, str]:
    """The arm's flags and where they come from: as recorded, completed or given by the arm
    file (`_registry_arm`) when its fingerprint does not contradict the run's, else not
    recorded."""
    fits = registry is not None and fingerprint in (None, registry.fingerprint)
    if flags is not None and fits and not set(registry.flags()) <= set(flags):
        # A partial record (older configs kept only some flags): the arm file fills in the rest.
        return {**registry.flags(), **flags}, FLAGS_COMPLETED
    if flags is not None:
        return flags, FLAGS_RECORDED
    if fits:
        return registry.flags(), (FLAGS_REGISTRY if fingerprint else FLAGS_REGISTRY_UNCHECKED)
    return None, FLAGS_NOT_RECORDED


def external_arm(algorithm: Mapping[str, Any]) -> ArmIdentity | None:
    """The arm of a log that printed verl's `algorithm.*` keys (by their names under
    `algorithm.`) and named no ccpo arm: `verl-agent:<adv_estimator>`, with the estimator's
    own mode where it has one (`verl-agent:gigpo(mean_norm)`; GRPO's std normalisation), the
    keys as flags, and the sha256 of their canonical JSON as fingerprint: every printed key
    that differs makes another arm, and two logs printing the same keys share it."""
    estimator = algorithm.get("adv_estimator")
    if not isinstance(estimator, str) or not estimator:
        return None
    mode = algorithm.get(f"{estimator}.mode")
    if estimator == "grpo" and algorithm.get("norm_adv_by_std_in_grpo") is not None:
        mode = (
            "mean_std_norm"
            if str(algorithm["norm_adv_by_std_in_grpo"]).lower() in ("true", "1")
            else "mean_norm"
        )
    name = f"{EXTERNAL_PREFIX}{estimator}" + (f"({mode})" if isinstance(mode, str) and mode else "")
    flags = dict(sorted(algorithm.items()))
    canonical = json.dumps(
        {"external": "verl-agent", "algorithm": flags},
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return ArmIdentity(
        name,
        hashlib.sha256(canonical.encode()).hexdigest(),
        flags,
        {},
        FLAGS_EXTERNAL,
        f"verl-agent's {estimator} estimator, as the run's log printed it",
    )


def _run_arm(row: Mapping[str, Any], facts: Mapping[str, Any]) -> ArmIdentity | None:
    arm = _arm_identity(row)
    if arm is not None:
        return _with_stated_flags(arm, facts)
    algorithm = facts.get("algorithm")
    return external_arm(algorithm) if isinstance(algorithm, Mapping) else None


# Beside a run's facts while they are read: why its split is assumed (None: recorded).
SPLIT_ASSUMED_KEY = "_split_assumed"
# The source older ingests gave a benchmark's default split they recorded for a log that named none.
_ASSUMED = "assumed (the log names no split): "


def _facts_by_run(db: sqlite_utils.Database, run_ids: Sequence[int]) -> dict[int, dict[str, Any]]:
    facts: dict[int, dict[str, Any]] = defaultdict(dict)
    if not run_ids or "run_facts" not in db.table_names():
        return facts
    marks = ", ".join("?" for _ in run_ids)
    for row in db.query(
        f"SELECT run_id, key, value, source FROM run_facts WHERE run_id IN ({marks}) ORDER BY id",
        list(run_ids),
    ):
        if row["key"] == "split" and (row["source"] or "").startswith(_ASSUMED):
            continue  # an older ingest's benchmark default, not the log's word: the split is not recorded
        facts[row["run_id"]].setdefault(
            row["key"], _json(row["value"])
        )  # the first value recorded stands
        if row["key"] == "split" and SPLIT_ASSUMED_KEY not in facts[row["run_id"]]:
            facts[row["run_id"]][SPLIT_ASSUMED_KEY] = None
    return facts


def _protocols_by_run(
    db: sqlite_utils.Database, run_ids: Sequence[int], split: str | None
) -> dict[int, Counter]:
    """Per run, how many evaluations used each (episodes, temperature)."""
    counts: dict[int, Counter] = defaultdict(Counter)
    if not run_ids:
        return counts
    marks = ", ".join("?" for _ in run_ids)
    # Standing evaluations only: a retracted one (store/retractions.py) says nothing of the protocol.
    where = f"run_id IN ({marks}) AND {STANDING}" + (" AND split = ?" if split is not None else "")
    params = [*run_ids, *([split] if split is not None else [])]
    for row in db.query(
        f"SELECT run_id, episodes, temperature, COUNT(*) AS n FROM evaluations WHERE {where} "
        "GROUP BY run_id, episodes, temperature",
        params,
    ):
        counts[row["run_id"]][(row["episodes"], row["temperature"])] += row["n"]
    return counts


def _rates_without_episodes(
    db: sqlite_utils.Database, run_ids: Sequence[int], split: str | None
) -> dict[int, list[float]]:
    rates: dict[int, list[float]] = defaultdict(list)
    if not run_ids:
        return rates
    marks = ", ".join("?" for _ in run_ids)
    where = f"run_id IN ({marks}) AND episodes IS NULL AND {STANDING}" + (
        " AND split = ?" if split is not None else ""
    )
    params = [*run_ids, *([split] if split is not None else [])]
    for row in db.query(f"SELECT run_id, success_rate FROM evaluations WHERE {where}", params):
        rates[row["run_id"]].append(float(row["success_rate"]))
    return rates


def _decimals(fraction: float) -> int:
    text = repr(round(fraction, 12))
    return len(text.split(".")[1]) if "." in text and "e" not in text else 12


def infer_episodes(rates_percent: Iterable[float]) -> int | None:
    """The number of episodes per evaluation that the success rates imply, or None.

    Each rate is successes / episodes. The smallest panel size every rate fits (within the
    precision the rates were written with) is the inference; it is accepted only from at least
    MIN_INFERENCE_RATES distinct rates, and when some smaller panel would fit them all by chance
    with probability under INFERENCE_CHANCE. Rates of 0 and 100 % fit every panel and say
    nothing. When every rate's success count happens to share a factor, the true panel is a
    multiple of the inferred one, so the inferred size never understates the noise of one
    evaluation.
    """
    fractions = sorted({round(rate / 100.0, 12) for rate in rates_percent})
    informative = [value for value in fractions if 0.0 < value < 1.0]
    if len(informative) < MIN_INFERENCE_RATES:
        return None
    digits = max(_decimals(value) for value in informative)
    tolerance = (0.5 * 10.0**-digits if digits < 9 else 1e-9) + 1e-12  # float error on the boundary
    candidate = None
    for episodes in range(2, MAX_INFERRED_EPISODES + 1):
        if all(
            abs(round(value * episodes) / episodes - value) <= tolerance for value in informative
        ):
            candidate = episodes
            break
    if candidate is None:
        return None
    # Chance that a smaller panel fits one rate: about the width of the rounding window times it.
    chance = sum(min(1.0, 2 * tolerance * size) ** len(informative) for size in range(2, candidate))
    if digits >= 9:
        chance = 0.0  # exact fractions: the smallest denominator is the reduced fraction's
    return candidate if chance < INFERENCE_CHANCE else None


def _protocol(facts: Mapping[str, Any], counts: Counter, rates: list[float]) -> EvaluationProtocol:
    if counts:
        (episodes, temperature), _ = max(
            counts.items(), key=lambda item: (item[1], item[0][0] or 0)
        )
    else:
        episodes, temperature = None, None
    evaluation_key = (episodes, temperature)
    mixed = len(counts) > 1
    if temperature is None and facts.get("temperature") is not None:
        temperature = float(facts["temperature"])
    basis = EPISODES_RECORDED
    if episodes is None and facts.get("episodes") is not None:
        episodes = int(facts["episodes"])
    if episodes is None:
        inferred = infer_episodes(rates)
        if inferred is not None:
            episodes = inferred
            basis = f"inferred: every rate is a multiple of 1/{inferred}"
        else:
            basis = EPISODES_NOT_RECORDED
    turn_limit = facts.get("max_steps")
    return EvaluationProtocol(
        split=None if facts.get("split") is None else str(facts["split"]),
        temperature=None if temperature is None else float(temperature),
        episodes=None if episodes is None else int(episodes),
        episodes_basis=basis,
        turn_limit=None if turn_limit is None else int(turn_limit),
        mixed=mixed,
        evaluation_key=evaluation_key,
        split_assumed=facts.get(SPLIT_ASSUMED_KEY),
    )


def _kind(row: Mapping[str, Any]) -> str:
    kind = row.get("kind")
    return kind if kind in (TRAINING, EVALUATION) else TRAINING


def _identity(
    row: Mapping[str, Any], run_facts: dict[str, Any], counts: Counter, rates: list
) -> RunIdentity:
    """One run's identity from its row, its recorded facts and its evaluations' protocols."""
    split_assumed = run_facts.pop(SPLIT_ASSUMED_KEY, None)
    config = _mapping(row.get("config"))
    start = config.get("start")
    stream = _mapping(config.get("train")).get("rollout_stream")
    return RunIdentity(
        run=row["name"],
        run_id=int(row["id"]),
        uid=row.get("uid"),
        host=row.get("host"),
        kind=_kind(row),
        arm=_run_arm(row, run_facts),
        seed=row.get("seed"),
        base_model=row.get("base_model"),
        backend=row.get("backend"),
        benchmark=row.get("benchmark"),
        protocol=_protocol({**run_facts, SPLIT_ASSUMED_KEY: split_assumed}, counts, rates),
        total_steps=row.get("total_steps"),
        agent=run_facts.get("agent"),
        start=dict(start) if isinstance(start, Mapping) else None,
        facts=dict(run_facts),
        rollout_stream=stream if isinstance(stream, int) and not isinstance(stream, bool) else None,
    )


def read_identities(
    db: sqlite_utils.Database,
    run_rows: Sequence[Mapping[str, Any]],
    *,
    split: str | None = "heldout",
    settle: bool = True,
) -> dict[str, RunIdentity]:
    """The identity of each run (rows of `store.list_runs`), keyed by run name; `split` is the
    evaluations' split whose protocol is read (the held-out role by default). Three queries in
    all, three more when an inferred episode count is settled against the database's runs."""
    ids = [int(row["id"]) for row in run_rows]
    facts = _facts_by_run(db, ids)
    counts = _protocols_by_run(db, ids, split)
    unrecorded = [
        identifier
        for identifier in ids
        if not any(episodes is not None for episodes, _ in counts.get(identifier, {}))
        and facts.get(identifier, {}).get("episodes") is None
    ]
    rates = _rates_without_episodes(db, unrecorded, split)
    identities = {
        row["name"]: _identity(
            row,
            facts.get(int(row["id"]), {}),
            counts.get(int(row["id"]), Counter()),
            rates.get(int(row["id"]), []),
        )
        for row in run_rows
    }
    if settle and any(identity.protocol.episodes_inferred for identity in identities.values()):
        everyone = (
            identities
            if len(run_rows) == db["runs"].count
            else read_identities(db, list_runs(db), split=split, settle=False)
        )
        identities = settle_inferred_episodes(identities, everyone.values())
    return identities


def _setting_but_episodes(identity: RunIdentity) -> tuple:
    protocol = identity.protocol
    return (
        identity.base_model,
        identity.backend,
        identity.benchmark,
        protocol.split,
        protocol.temperature,
        protocol.turn_limit,
    )


def settle_inferred_episodes(
    identities: dict[str, RunIdentity], everyone: Iterable[RunIdentity]
) -> dict[str, RunIdentity]:
    """Each run whose episode count was inferred, pooled by the recorded count of the database's
    runs of its setting (its own arm's first) that the inference divides, when exactly one does.
    Read over every run of the database, so compare and the cards group any subset alike."""
    recorded: dict[tuple, set[int]] = defaultdict(set)
    for other in everyone:
        protocol = other.protocol
        if protocol.episodes_basis == EPISODES_RECORDED and protocol.episodes is not None:
            setting = _setting_but_episodes(other)
            recorded[setting].add(protocol.episodes)
            recorded[(other.unit.arm_key, *setting)].add(protocol.episodes)
    settled = dict(identities)
    for name, identity in identities.items():
        inferred = identity.protocol.episodes
        if not identity.protocol.episodes_inferred or inferred is None:
            continue
        setting = _setting_but_episodes(identity)
        for counts in (recorded.get((identity.unit.arm_key, *setting)), recorded.get(setting)):
            fits = {count for count in counts or () if count % inferred == 0}
            if len(fits) == 1:
                protocol = replace(identity.protocol, pooled_episodes=fits.pop())
                settled[name] = replace(identity, protocol=protocol)
                break
    return settled


def run_identity(
    db: sqlite_utils.Database, run: str | int, *, split: str | None = "heldout"
) -> RunIdentity:
    """One run's identity (InvalidInput if there is no such run)."""
    from ccpo_cli.store.queries import get_run

    row = get_run(db, run)
    return read_identities(db, [row], split=split)[row["name"]]


def all_identities(
    db: sqlite_utils.Database, *, split: str | None = "heldout"
) -> dict[str, RunIdentity]:
    return read_identities(db, list_runs(db), split=split)


def unit_labels(identities: Iterable[RunIdentity]) -> dict[ComparisonUnit, str]:
    """A display label per comparison unit: the arm's label, and where two units share it, the
    unit fields that tell them apart (e.g. `return-hard (base model Qwen/Qwen2.5-7B-Instruct)`)."""
    members: dict[ComparisonUnit, RunIdentity] = {}
    for identity in identities:
        members.setdefault(identity.unit, identity)
    by_label: dict[str, list[ComparisonUnit]] = defaultdict(list)
    for unit, identity in members.items():
        by_label[_arm_label(identity)].append(unit)
    labels: dict[ComparisonUnit, str] = {}
    for label, units in by_label.items():
        if len(units) == 1:
            labels[units[0]] = label
            continue
        values = {unit: members[unit].unit_values() for unit in units}
        differing = [
            name
            for name in UNIT_FIELDS
            if len({json.dumps(values[unit][name], sort_keys=True, default=str) for unit in units})
            > 1
        ]
        for index, unit in enumerate(units, 1):
            parts = [f"{name} {_short(name, values[unit][name])}" for name in differing]
            # Units that differ in nothing a label can show stay apart by number, never "()".
            labels[unit] = f"{label} ({', '.join(parts) or f'unit {index}'})"
    return labels


def _arm_label(identity: RunIdentity) -> str:
    if identity.arm is None:
        return f"(run {identity.run}: arm not recorded)"
    return identity.arm.label


def _short(name: str, value: Any) -> str:
    if value is None:
        return "not recorded"
    if name == "arm":
        return str(value)[:8]
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return str(value)
