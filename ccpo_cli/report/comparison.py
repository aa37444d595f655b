"""The typed comparison: what `compare_runs` returns and what tables, plots, power and cards read.

A `Comparison` holds one `RunEntry` per run (with the run's `RunIdentity`), one `ArmSummary`
per comparison unit (with the unit's `ComparisonUnit` and the `RunIdentity` of its first run),
the `PairComparison`s of units that differ only in the arm, the `NotCompared` pairs with their
reason, and the reference runs. `Comparison.as_json()` is the one writer of the `ccpo compare
--json` document (docs/compare.schema.json): the identity is flattened into the document's keys
there and nowhere else, so no reader rebuilds an arm from flat keys.

A run's window (with its trend) and best evaluation are typed by their one producer
(`report/window.py`, `stats.py`) and write their own keys (`to_document`); the other statistics
inside an entry (the single-evaluation interval, an arm's IQM, a pair's tests and isolation) are
the plain mappings their one producer returns (`report/window.py`, `stats.py`,
`report/isolation.py`); they are JSON already.

One concern, kept in one file past 400 lines: the typed comparison and its one JSON writer.
Each class writes its own keys beside its fields, so the document's keys are spelled in this file
alone; split, the schema would be written in several.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ccpo_cli.report.window import BestPoint, Window
from ccpo_cli.store.identity import ArmIdentity, ComparisonUnit, RunIdentity

# The protocol fields an arm, a reference and a label show (the pooling key's fields).
SHOWN_PROTOCOL_FIELDS = ("split", "temperature", "episodes", "turn_limit")
# The parts of a unit besides its arm, as `not_compared[].differ_in` names them.
SETTING_FIELDS = ("base model", "backend", "benchmark", "protocol")


class CurvePoint(TypedDict):
    """One evaluation of a run's learning curve (`runs[].evaluations[]`)."""

    evaluation_id: int
    step: int
    success: float
    mean_turns: float | None
    episodes: int | None
    successes: int | None


def _arm_json(arm: ArmIdentity | None) -> dict[str, Any]:
    """The document's flat arm keys of one identity (runs[] and arms[] share them)."""
    return {
        "arm_fingerprint": None if arm is None else arm.fingerprint,
        "arm_flags": None if arm is None or arm.flags is None else dict(arm.flags),
        "arm_overrides": {} if arm is None else dict(arm.overrides),
        "arm_flags_source": None if arm is None else arm.flags_source,
        "arm_description": None if arm is None else arm.description,
    }


def shown_protocol(identity: RunIdentity) -> dict[str, Any]:
    """The protocol as an arm or a reference shows it: split, temperature, episodes, turn limit.
    The episodes are the count the unit is pooled by (`EvaluationProtocol.key()`): a recorded
    count, or the recorded count an inferred one was settled to; None when no count pools the
    unit (an unconfirmed inference is one run's, not its unit's: `runs[].protocol` keeps it)."""
    recorded = dict(identity.protocol.as_dict(), episodes=identity.protocol.key()[2])
    return {key: recorded[key] for key in SHOWN_PROTOCOL_FIELDS}


class _OfIdentity:
    """The arm a typed entry reads from its `identity` (a run's, or its unit's first run's)."""

    identity: RunIdentity

    @property
    def arm(self) -> ArmIdentity | None:
        return self.identity.arm

    @property
    def arm_name(self) -> str | None:
        """The arm file's name (None when the runs recorded no arm)."""
        return None if self.identity.arm is None else self.identity.arm.name


class _OfRun(_OfIdentity):
    """What a typed entry of one run reads from its run's identity."""

    @property
    def run(self) -> str:
        return self.identity.run

    @property
    def seed(self) -> int | None:
        """The run's recorded seed (None: not recorded, and then never counted as a seed)."""
        return self.identity.seed


@dataclass(frozen=True)
class RunEntry(_OfRun):
    """One run of the comparison: its identity, its window statistics and its learning curve."""

    identity: RunIdentity
    status: str | None
    run_state: str
    window: Window
    window_task_types: dict[str, dict[str, Any]]
    best: BestPoint | None
    single_eval_interval: dict[str, Any] | None
    protocols: list[dict[str, Any]]
    protocol_mixed: bool
    last_step: int | None
    last_eval_step: int | None
    total_steps: int | None
    total_steps_recorded: list[int]
    facts: dict[str, Any]
    conflicts: int  # open conflicts (a settled one is not counted)
    conflicting_steps: list[int]
    fact_conflicts: dict[str, Any]
    evaluations: list[CurvePoint]
    # The unit's full label, its short label and stable key (None for a reference or a left-out run).
    arm_label: str | None = None
    unit_label: str | None = None
    unit_key: str | None = None

    @property
    def is_reference(self) -> bool:
        return self.identity.is_reference

    @property
    def n_evaluations(self) -> int:
        return len(self.evaluations)

    def as_json(self) -> dict[str, Any]:
        identity = self.identity
        return {
            "run": identity.run,
            "run_id": identity.run_id,
            "kind": identity.kind,
            "arm": self.arm_name,
            **_arm_json(identity.arm),
            "seed": identity.seed,
            "base_model": identity.base_model,
            "benchmark": identity.benchmark,
            "backend": identity.backend,
            "protocol": identity.protocol.as_dict(),
            "identity": identity.as_dict(),
            "status": self.status,
            "run_state": self.run_state,
            "n_evaluations": self.n_evaluations,
            "window": self.window.to_document(),
            "window_task_types": self.window_task_types,
            "best": None if self.best is None else self.best.to_document(),
            "single_eval_interval": self.single_eval_interval,
            "protocols": self.protocols,
            "protocol_mixed": self.protocol_mixed,
            "last_step": self.last_step,
            "last_eval_step": self.last_eval_step,
            "total_steps": self.total_steps,
            "total_steps_recorded": self.total_steps_recorded,
            "facts": self.facts,
            "conflicts": self.conflicts,
            "conflicting_steps": self.conflicting_steps,
            "fact_conflicts": self.fact_conflicts,
            "evaluations": [dict(point) for point in self.evaluations],
            "arm_label": self.arm_label,
            "unit_label": self.unit_label,
            "unit_key": self.unit_key,
        }


@dataclass(frozen=True)
class ArmSummary(_OfIdentity):
    """One comparison unit (an "arm" of the document): its seeds and their across-seed summary.

    `name` is the unit's full label (`arms[].arm`), `label` the short one tables and plots show
    (report/labels.py), `identity` the first run's identity (every run of a unit shares its
    arm, base model, backend, benchmark and protocol)."""

    name: str
    identity: RunIdentity
    n_seeds: int
    mean: float | None
    sd: float | None
    n: int
    sd_over: str | None  # "seeds" from two seeds on, else "evaluations"
    runs: list[str]
    seeds: list[Any]
    seed_runs: dict[Any, list[str]]
    seed_window_means: list[float]
    repeated_seeds: dict[Any, list[str]]
    unseeded_runs: list[str]
    identical_runs: list[list[str]]
    n_evaluations: int
    evaluation_ids: list[int]
    fingerprints: list[str]
    window_steps: list[int] | None
    resolved: bool
    note: str | None
    seed_notes: list[str]
    headline: bool
    headline_note: str | None
    seed_task_types: list[dict[str, float]]
    iqm: dict[str, Any] | None
    label: str = ""
    unit_key: str = ""

    @property
    def unit(self) -> ComparisonUnit:
        return self.identity.unit

    @property
    def arm_recorded(self) -> bool:
        return self.identity.arm is not None

    @property
    def arm_stable(self) -> str | None:
        """The arm with its `--set` overrides on top: stable whatever else is compared."""
        return None if self.identity.arm is None else self.identity.arm.label

    @property
    def arm_fingerprint(self) -> str | None:
        return None if self.identity.arm is None else self.identity.arm.fingerprint

    @property
    def protocol(self) -> dict[str, Any]:
        return shown_protocol(self.identity)

    @property
    def seed_means(self) -> dict[Any, float]:
        """{seed: the mean of that seed's runs' window means}, in seed order."""
        return dict(zip(self.seed_runs, self.seed_window_means))

    def as_json(self) -> dict[str, Any]:
        return {
            "arm": self.name,
            "arm_name": self.arm_name,
            "arm_recorded": self.arm_recorded,
            **_arm_json(self.identity.arm),
            "base_model": self.identity.base_model,
            "backend": self.identity.backend,
            "benchmark": self.identity.benchmark,
            "protocol": self.protocol,
            "n_seeds": self.n_seeds,
            "mean": self.mean,
            "sd": self.sd,
            "n": self.n,
            "sd_over": self.sd_over,
            "runs": self.runs,
            "seeds": self.seeds,
            "seed_runs": self.seed_runs,
            "seed_window_means": self.seed_window_means,
            "repeated_seeds": self.repeated_seeds,
            "unseeded_runs": self.unseeded_runs,
            "identical_runs": self.identical_runs,
            "n_evaluations": self.n_evaluations,
            "evaluation_ids": self.evaluation_ids,
            "fingerprints": self.fingerprints,
            "window_steps": self.window_steps,
            "resolved": self.resolved,
            "note": self.note,
            "seed_notes": self.seed_notes,
            "headline": self.headline,
            "headline_note": self.headline_note,
            "seed_task_types": self.seed_task_types,
            "iqm": self.iqm,
            "label": self.label,
            "unit_key": self.unit_key,
            "arm_stable": self.arm_stable,
            **self.protocol,
        }


@dataclass(frozen=True)
class PairComparison:
    """Two units that differ only in the arm, with the test `stats.two_arm_test` chose."""

    first: ArmSummary
    second: ArmSummary
    difference: float | None
    welch: dict[str, Any]
    test: dict[str, Any]  # stats.two_arm_test: paired on the seeds the design paired, else Welch
    probability_of_improvement: float | None
    poi_note: str | None
    poi_tasks: list[str]
    isolation: dict[str, Any]  # verdict, differences, not_recorded (report/isolation.py)
    resolved: bool
    window_coverage: str | None
    note: str | None

    @property
    def verdict(self) -> str:
        return str(self.isolation["verdict"])

    def as_json(self) -> dict[str, Any]:
        return {
            "arm_a": self.first.name,
            "arm_b": self.second.name,
            "difference": self.difference,
            "welch": self.welch,
            "test": self.test,
            "probability_of_improvement": self.probability_of_improvement,
            "poi_note": self.poi_note,
            "poi_tasks": self.poi_tasks,
            "isolation": self.isolation,
            "resolved": self.resolved,
            "window_coverage": self.window_coverage,
            "note": self.note,
            "label_a": self.first.label,
            "label_b": self.second.label,
        }


@dataclass(frozen=True)
class NotCompared:
    """A pair of units that is not compared, and why (`differ_in` names what else differs)."""

    first: ArmSummary
    second: ArmSummary
    differ_in: list[str]
    note: str

    def as_json(self) -> dict[str, Any]:
        return {
            "arm_a": self.first.name,
            "arm_b": self.second.name,
            "differ_in": self.differ_in,
            "note": self.note,
            "label_a": self.first.label,
            "label_b": self.second.label,
        }


@dataclass(frozen=True)
class Reference(_OfRun):
    """An evaluation-only run (the oracle, the random agent, a checkpoint): a level, not an arm."""

    identity: RunIdentity
    mean: float | None
    sd: float | None
    n_evaluations: int
    steps: list[int]
    evaluation_ids: list[int]
    # The evaluation seeds its evaluations ran under (none named: not recorded).
    evaluation_seeds: list[int] = field(default_factory=list)

    @property
    def agent(self) -> str | None:
        return self.identity.agent

    @property
    def label(self) -> str:
        return self.identity.agent or self.identity.run

    def as_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "agent": self.agent,
            "label": self.label,
            "benchmark": self.identity.benchmark,
            "protocol": shown_protocol(self.identity),
            "mean": self.mean,
            "sd": self.sd,
            "n_evaluations": self.n_evaluations,
            "steps": self.steps,
            "evaluation_ids": self.evaluation_ids,
            "evaluation_seeds": self.evaluation_seeds,
        }


@dataclass(frozen=True)
class UntrainedLevel:
    """A unit's step-0 evaluations (the untrained policy), averaged over its seeds."""

    arm: str
    mean: float
    n_seeds: int

    def as_json(self) -> dict[str, Any]:
        return {"arm": self.arm, "mean": self.mean, "n_seeds": self.n_seeds}


@dataclass(frozen=True)
class Comparison:
    """What `compare_runs` found: the names below are the `ccpo compare --json` document's keys
    and this class's fields alike (the document's `comparisons` are the `pairs`, its
    `reference_levels.untrained` the `untrained` levels).

    Keys: window_start (the one given, else None: each run's window then starts at
    the start its matrix recorded, else the default rule (`report/window.py`); `window.start` and
    `window.start_basis` say where), split, runs[], arms[], comparisons[], not_compared[],
    references[], reference_levels, left_out, isolation, power. Success rates are percent.

    Per run: its `identity` (store.identity), window {mean, sd, n, steps, evaluation_ids,
    episodes, successes, start, start_basis, protocol, trend, converged, headline}, window_task_types
    {key: {mean, sd, n, episodes}}, best {step, success, task_types, task_type_episodes,
    mean_turns, train_success_rate, evaluation_id, n_candidates, expected_max_bias_sd,
    expected_max_bias_points, expected_max_bias_points_binomial, bias_noise},
    single_eval_interval {at, episodes, episodes_basis, low, high, half_width} (None when the
    episodes per evaluation are not recorded), run_state, last_step, last_eval_step, total_steps,
    facts, conflicts, evaluations[] (the learning curve).

    Per arm (a comparison unit; `arm` is its display label, `arm_name` the arm file's name):
    n_seeds (distinct recorded seeds), mean, sd, n (over seed means from two seeds on, else over
    the evaluations; `sd_over` says which), seeds, seed_runs, seed_window_means (one per seed:
    the mean of that seed's runs), repeated_seeds, unseeded_runs, identical_runs, iqm, resolved
    (at least 3 seeds), note, fingerprints, and the unit's base_model, backend, benchmark, protocol
    (and its split, temperature, episodes, turn_limit as keys of their own); `label` the short
    label that tables and plots show (report/labels.py: it changes with the units present),
    `arm_stable` the arm with its overrides and `unit_key` the unit's identity hash (both stable).
    Runs carry their unit's `unit_label` and `unit_key`, comparisons `label_a` and `label_b`.
    comparisons: arm pairs that differ only in the arm (`ComparisonUnit.setting()` agrees), with
    Welch's test on seed means and the `test` `stats.two_arm_test` chose (paired on the seeds the
    design paired, else Welch), the probability of improvement (None below two seeds per arm) and the pair's isolation verdict;
    not_compared: the other pairs and why. power: per compared pair the test, mdd, p and, with
    `detect`, seeds_needed. isolation.verdict is passes / fails / unverifiable. retracted: the runs
    left out because they were retracted ({run: reason, retracted_by, recorded_at}) and the
    retracted evaluations of the compared runs (never part of any number here);
    resolved_conflicts: per run, the settled conflicts (store/retractions.py).
    """

    window_start: int | None
    window_start_basis: str
    split: str
    runs: list[RunEntry]
    arms: list[ArmSummary]
    pairs: list[PairComparison]
    not_compared: list[NotCompared]
    references: list[Reference]
    untrained: list[UntrainedLevel]
    left_out: dict[str, str]
    isolation: dict[str, Any]
    protocol_mixed: bool
    conflicts: dict[str, dict[str, Any]]
    power: dict[str, Any]
    unit_differences: dict[str, list[str]]
    retracted: dict[str, Any]
    resolved_conflicts: dict[str, list[dict[str, Any]]]
    _by_run: dict[str, RunEntry] = field(init=False, repr=False, compare=False)
    _by_arm: dict[str, ArmSummary] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_run", {entry.run: entry for entry in self.runs})
        object.__setattr__(self, "_by_arm", {arm.name: arm for arm in self.arms})

    def run(self, name: str) -> RunEntry:
        return self._by_run[name]

    def find_run(self, name: str) -> RunEntry | None:
        return self._by_run.get(name)

    def arm(self, name: str) -> ArmSummary:
        """The unit whose full label is `name`."""
        return self._by_arm[name]

    def find_arm(self, name: str | None) -> ArmSummary | None:
        return None if name is None else self._by_arm.get(name)

    def arm_of(self, run: str) -> ArmSummary | None:
        """The unit a trained run belongs to (None for a reference or a left-out run)."""
        entry = self._by_run.get(run)
        return None if entry is None else self.find_arm(entry.arm_label)

    def pairs_of(self, arm: str) -> Iterator[PairComparison]:
        return (pair for pair in self.pairs if arm in (pair.first.name, pair.second.name))

    def reference_agents(self) -> list[Reference]:
        """The references with a level (a mean), as the plot and the cards draw them."""
        return [reference for reference in self.references if reference.mean is not None]

    def as_json(self) -> dict[str, Any]:
        """The `ccpo compare --json` document (without schema_version)."""
        return {
            "window_start": self.window_start,
            "window_start_basis": self.window_start_basis,
            "split": self.split,
            "runs": [entry.as_json() for entry in self.runs],
            "arms": [arm.as_json() for arm in self.arms],
            "comparisons": [pair.as_json() for pair in self.pairs],
            "not_compared": [pair.as_json() for pair in self.not_compared],
            "references": [reference.as_json() for reference in self.references],
            "reference_levels": {
                "untrained": [level.as_json() for level in self.untrained],
                "agents": [
                    {"label": reference.label, "mean": reference.mean, "run": reference.run}
                    for reference in self.reference_agents()
                ],
            },
            "left_out": self.left_out,
            "isolation": self.isolation,
            "protocol_mixed": self.protocol_mixed,
            "conflicts": self.conflicts,
            "power": self.power,
            "unit_differences": self.unit_differences,
            "retracted": self.retracted,
            "resolved_conflicts": self.resolved_conflicts,
        }


__all__ = [
    "SETTING_FIELDS",
    "SHOWN_PROTOCOL_FIELDS",
    "ArmSummary",
    "Comparison",
    "CurvePoint",
    "NotCompared",
    "PairComparison",
    "Reference",
    "RunEntry",
    "UntrainedLevel",
    "shown_protocol",
]
