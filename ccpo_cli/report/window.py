"""A run's window: the rules that say where it starts, and its statistics.

Where a window starts is decided here and nowhere else (docs/architecture.md §3, "Window
statistics"), by one of two rules, each with the `describe` that every sentence about it (help
texts, the compare document, tables, cards) is generated from:
- the default rule, `DEFAULT_WINDOW`: the window starts at 7/15 of the run's recorded total steps
  (the seed card's step 70 of 150), ceil(7/15 · total steps);
- the matrix rule, `MatrixWindow`: the last few evaluation points of a design's run, never before
  its warm start ends. A matrix records the start it chose in each run (`TrainConfig.window_start`),
  and `run_window_start` reads that recorded start before the default, so `compare` and `card`
  of a matrix run average the window its matrix compared.

The statistics, typed (`Window`, `BestPoint`, each writing the compare document's keys): the
evaluations of its protocol from the window start on, their mean and sd, the trend test over
them (`stats.Trend`), the best point with its selection bias, and the noise of one evaluation. The window holds evaluations of one protocol, the run's recorded one
(`store.identity`: the episodes and temperature most of its evaluations used); evaluations of
another protocol in the window are listed as left out. A window of fewer than
`MIN_HEADLINE_EVALUATIONS` is never a headline, and one of fewer than `stats.MIN_TREND_POINTS`
is never called converged. A window whose slope interval excludes 0 is "not converged", and the
best point's bias is then measured on the detrended noise.

The rules import nothing heavy (`--help` states them); the statistics import numpy when they run.

One concern, kept in one file past 400 lines: a run's window, where it starts and what is
measured over it. The statistics read the start the rules give, and docs/architecture.md names
this one module for both; split, the window start and its statistics would be two places.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from fractions import Fraction
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ccpo_cli.stats import Trend
    from ccpo_cli.store.identity import EvaluationProtocol

# A window mean of fewer evaluations is one or two noisy points, not a level.
MIN_HEADLINE_EVALUATIONS = 3


@dataclass(frozen=True)
class FractionWindow:
    """The default rule: the window starts at `fraction` of the run's recorded total steps. A run
    of another length gets the same share of its own training, never the literal step 70."""

    fraction: Fraction
    example_total: int  # the seed card's run, named in the description

    @property
    def share(self) -> str:
        return f"{self.fraction.numerator}/{self.fraction.denominator}"

    def start(self, total_steps: int | None, last_step: int | None) -> tuple[int, str]:
        """(first step of the window, how it was chosen) of a run with no given start."""
        if total_steps:
            return math.ceil(
                total_steps * self.fraction
            ), f"{self.share} of the run's {total_steps} total steps"
        if last_step:
            return (
                math.ceil(last_step * self.fraction),
                f"total steps not recorded: {self.share} of the last step seen ({last_step})",
            )
        return 0, "neither total steps nor a step recorded: from step 0"

    def describe(self, whose: str = "each run's recorded", example: bool = True) -> str:
        """ "7/15 of each run's recorded total steps, the seed card's 70 of 150"."""
        text = f"{self.share} of {whose} total steps"
        if example:
            text += f", the seed card's {math.ceil(self.example_total * self.fraction)} of {self.example_total}"
        return text


DEFAULT_WINDOW = FractionWindow(Fraction(70, 150), 150)


def default_window_start(total_steps: int | None, last_step: int | None) -> tuple[int, str]:
    """The default rule's (start, basis) of one run (`DEFAULT_WINDOW.start`)."""
    return DEFAULT_WINDOW.start(total_steps, last_step)


@dataclass(frozen=True)
class MatrixWindow:
    """The matrix rule: a design's run compares its last `evaluations` evaluation points, never
    before its warm start ends; without evaluations, from the end of the warm start (half of the
    steps without one). The number of points is the design's (`Design.compared_evaluations`)."""

    evaluations: int

    def start(self, steps: int, warm_start: int, eval_every: int) -> int:
        if not eval_every:
            return warm_start or steps // 2
        return max(warm_start, 0, steps - eval_every * (self.evaluations - 1))

    @staticmethod
    def describe_rule() -> str:
        """The rule without a design's numbers, for a help text."""
        return "the design's last compared evaluation points, never before the warm start ends"

    def describe(self) -> str:
        points = (
            "the last evaluation point"
            if self.evaluations == 1
            else f"the last {self.evaluations} evaluation points"
        )
        return f"{points} of the run, never before the warm start ends"


RECORDED_BASIS = "the window its matrix compared, recorded with the run"


def recorded_window_start(config: Any) -> int | None:
    """The window start a matrix recorded in a run's config (`TrainConfig.window_start`), else None."""
    recorded = (
        ((config or {}).get("train") or {}).get("window_start")
        if isinstance(config, dict)
        else None
    )
    return recorded if isinstance(recorded, int) and not isinstance(recorded, bool) else None


def run_window_start(
    given: int | None, config: Any, total_steps: int | None, last_step: int | None
) -> tuple[int, str]:
    """Where one run's window starts, and why: a given `--window-start`; else the start its matrix
    recorded (so `compare` and `card` of a matrix run average the window the matrix compared,
    whatever `--eval-from` it trained with); else the default rule."""
    if given is not None:
        return given, "given"
    recorded = recorded_window_start(config)
    if recorded is not None:
        return recorded, RECORDED_BASIS
    return DEFAULT_WINDOW.start(total_steps, last_step)


def seeds_averaged(rows: list[dict]) -> list[dict]:
    """The evaluation rows with one row per step and protocol: the evaluations of one step under
    several evaluation seeds (`eval_seed`, three runs of one checkpoint's validation) are one
    protocol's measurement of that step, averaged, and say how many seeds they average
    (`evaluation_seeds`); a step evaluated once is its row as it is."""
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        key = (row["step"], row.get("split"), row.get("episodes"), row.get("temperature"))
        groups.setdefault(key, []).append(row)
    merged: list[dict] = []
    for group in groups.values():
        seeds = sorted({row["eval_seed"] for row in group if row.get("eval_seed") is not None})
        if len(group) == 1 or len(seeds) < len(group):
            # One evaluation, or repeats that name no seed each: not seeds to average.
            merged.extend(
                dict(row, evaluation_seeds=row.get("evaluation_seeds", seeds)) for row in group
            )
            continue
        merged.append(_mean_of_seeds(group, seeds))
    return sorted(merged, key=lambda row: (row["step"], row["id"]))


def _mean(values: list) -> float | None:
    known = [value for value in values if value is not None]
    return sum(known) / len(known) if known and len(known) == len(values) else None


def _mean_of_seeds(group: list[dict], seeds: list[int]) -> dict:
    first = group[0]
    successes = [row["successes"] for row in group]
    task_types = {}
    for key in sorted({key for row in group for key in row.get("task_types", {})}):
        cells = [row["task_types"][key] for row in group if key in row.get("task_types", {})]
        if len(cells) == len(group):
            task_types[key] = {
                "episodes": first["task_types"][key]["episodes"],
                "successes": None,
                "success": _mean([cell["success"] for cell in cells]),
            }
    return dict(
        first,
        success_rate=_mean([row["success_rate"] for row in group]),
        successes=None,
        mean_turns=_mean([row["mean_turns"] for row in group]),
        train_success_rate=first.get("train_success_rate"),
        eval_seed=None,
        task_types=task_types,
        evaluation_seeds=seeds,
        evaluation_ids=[row["id"] for row in group],
        # Every episode the seeds played, for the window's pooled interval.
        pooled_episodes=None if first["episodes"] is None else first["episodes"] * len(group),
        pooled_successes=None if None in successes else sum(successes),
    )


def _row_key(row: dict) -> tuple:
    return (row.get("episodes"), row.get("temperature"))


def task_type_keys(rows: list[dict]) -> list[str]:
    """The task types the rows report: the benchmark's order for ALFWorld's, then any other by name."""
    from ccpo_cli.task_types import TASK_TYPES

    present = {key for row in rows for key in row["task_types"]}
    return [key for key in TASK_TYPES if key in present] + sorted(present - set(TASK_TYPES))


@dataclass(frozen=True)
class BestPoint:
    """The best evaluation of a run's window and the selection bias of picking it: the expected
    maximum of `n_candidates` draws, in sds, and in points of the window's noise (`bias_noise`
    says which noise) and of one evaluation's binomial noise (None: not measured). Fields are in
    the order the compare document writes them (`to_document`)."""

    step: int
    success: float
    task_types: dict[str, float | None]
    task_type_episodes: dict[str, int | None]
    mean_turns: float | None
    episodes: int | None
    successes: int | None
    train_success_rate: float | None
    evaluation_id: int
    evaluation_seeds: list[int]
    chosen_from: str
    n_candidates: int
    expected_max_bias_sd: float
    expected_max_bias_points: float | None
    bias_noise: str
    expected_max_bias_points_binomial: float | None = None

    def to_document(self) -> dict[str, Any]:
        """The document's keys; the binomial bias only where one evaluation's noise is known."""
        document = {item.name: getattr(self, item.name) for item in fields(self)}
        if self.expected_max_bias_points_binomial is None:
            del document["expected_max_bias_points_binomial"]
        return document


@dataclass(frozen=True)
class Window:
    """A run's window: the evaluations of its recorded protocol from `start` on, their mean, sd
    and trend, and their pooled episodes. The fields are in the order the compare document
    writes them (`to_document`); `headline`, `headline_note` and `converged` are derived from
    the others when the window is made, never given."""

    mean: float | None
    sd: float | None
    n: int
    steps: list[int]
    start: int
    evaluation_ids: list[int]
    protocol: dict[str, Any]  # split, temperature, episodes of the evaluations averaged
    values: list[float]
    protocol_mixed: bool
    left_out_evaluation_ids: list[int]  # in the window, of another protocol
    evaluation_seeds: list[int]  # the evaluation seeds the points average (none named: one each)
    headline: bool = field(init=False)  # enough evaluations for a window mean to be a result
    headline_note: str | None = field(init=False)  # why not, when not
    trend: Trend
    converged: bool | None = field(init=False)  # the trend's verdict
    pooled_interval: dict[str, float] | None
    episodes: int | None  # every episode of the window (None: some evaluation's not recorded)
    successes: int | None
    start_basis: str

    def __post_init__(self) -> None:
        headline = self.n >= MIN_HEADLINE_EVALUATIONS
        object.__setattr__(self, "headline", headline)
        object.__setattr__(
            self,
            "headline_note",
            None
            if headline
            else (
                f"{self.n} evaluation{'s' if self.n != 1 else ''} at step >= {self.start}: "
                f"a window mean needs at least {MIN_HEADLINE_EVALUATIONS} to be a result"
            ),
        )
        object.__setattr__(self, "converged", self.trend.converged)

    def to_document(self) -> dict[str, Any]:
        document = {item.name: getattr(self, item.name) for item in fields(self)}
        return dict(document, trend=self.trend.to_document())


# The fields the best point keeps of its evaluation row, under the row's names.
BEST_ROW_FIELDS = (
    "step",
    "mean_turns",
    "episodes",
    "successes",
    "train_success_rate",
    "evaluation_seeds",
)


def _bias_noise(
    window_sd: float | None, n_candidates: int, trend: Trend
) -> tuple[float | None, str]:
    """The noise the best point's selection bias is measured on, and which it is: none below
    MIN_HEADLINE_EVALUATIONS candidates, the detrended noise of a window that still moves, else
    the window sd."""
    if n_candidates < MIN_HEADLINE_EVALUATIONS:
        return None, (
            f"left out: {n_candidates} evaluation{'s' if n_candidates != 1 else ''} "
            f"in the window, too few to measure their noise"
        )
    if trend.converged is False:
        return (
            trend.residual_sd,
            "the detrended window (the window still moves, so its sd counts the trend)",
        )
    return window_sd, "the window sd"


def _best(
    window_sd: float | None, window_evals: list[dict], trend: Trend, interval: dict | None
) -> BestPoint | None:
    from ccpo_cli import stats
    from ccpo_cli.store.queries import best_evaluation

    best = best_evaluation(window_evals)
    if best is None:
        return None
    n_candidates = len(window_evals)
    bias_sd = stats.expected_max_of_normals(n_candidates)
    noise_sd, basis = _bias_noise(window_sd, n_candidates, trend)
    keys = task_type_keys([best])
    binomial_sd = (
        None
        if interval is None
        else (interval["at"] * (100 - interval["at"]) / interval["episodes"]) ** 0.5
    )
    return BestPoint(
        success=best["success_rate"],
        task_types={key: best["task_types"][key]["success"] for key in keys},
        task_type_episodes={key: best["task_types"][key]["episodes"] for key in keys},
        evaluation_id=best["id"],
        chosen_from="window",
        **{key: best[key] for key in BEST_ROW_FIELDS},
        n_candidates=n_candidates,
        expected_max_bias_sd=bias_sd,
        expected_max_bias_points=None if noise_sd is None else bias_sd * noise_sd,
        bias_noise=basis,
        expected_max_bias_points_binomial=None if binomial_sd is None else bias_sd * binomial_sd,
    )


def _single_eval_interval(
    mean: float | None, protocol: EvaluationProtocol, confidence: float
) -> dict | None:
    """The Wilson interval of one evaluation at the window mean; None when the episodes per
    evaluation are not recorded (never an assumed panel size)."""
    from ccpo_cli import stats

    if mean is None or not protocol.episodes:
        return None
    episodes = int(protocol.episodes)
    low, high = stats.wilson_interval(mean / 100 * episodes, episodes, confidence)
    return {
        "at": mean,
        "episodes": episodes,
        "episodes_basis": protocol.episodes_basis,
        "confidence": confidence,
        "low": 100 * low,
        "high": 100 * high,
        "half_width": 100 * (high - low) / 2,
    }


def _window_task_types(window_evals: list[dict]) -> dict[str, dict]:
    from ccpo_cli import stats

    result = {}
    for key in task_type_keys(window_evals):
        rows = [row["task_types"][key] for row in window_evals if key in row["task_types"]]
        if not rows:
            continue
        episode_counts = [row["episodes"] for row in rows if row["episodes"] is not None]
        summary = stats.mean_sd_n([row["success"] for row in rows])
        summary["episodes"] = sum(episode_counts) if len(episode_counts) == len(rows) else None
        result[key] = summary
    return result


def _pooled(
    window_evals: list[dict], confidence: float
) -> tuple[int | None, int | None, dict[str, float] | None]:
    """(episodes, successes, interval) of the window's evaluations pooled: the measurement
    precision of the whole window, not of one evaluation. A count missing from any evaluation
    leaves the window's total not recorded (never 0 of its episodes), and then no interval."""
    from ccpo_cli import stats

    episode_counts = [row.get("pooled_episodes", row["episodes"]) for row in window_evals]
    success_counts = [row.get("pooled_successes", row["successes"]) for row in window_evals]
    if not window_evals or any(count is None for count in episode_counts):
        return None, None, None
    episodes = sum(episode_counts)
    if any(count is None for count in success_counts):
        return episodes, None, None
    successes = sum(success_counts)
    low, high = stats.wilson_interval(successes, episodes, confidence)
    return episodes, successes, {"low": 100 * low, "high": 100 * high, "confidence": confidence}


def _protocol_counts(evaluations: list[dict], split: str | None) -> list[dict[str, Any]]:
    """Every protocol the run's evaluations used, with how many evaluations each."""
    counts: dict[tuple, int] = {}
    for row in evaluations:
        counts[_row_key(row)] = counts.get(_row_key(row), 0) + 1
    return [
        {"split": split, "episodes": key[0], "temperature": key[1], "n": n}
        for key, n in counts.items()
    ]


def _window(
    chosen: list[dict],
    in_window: list[dict],
    protocol: EvaluationProtocol,
    window_start: int,
    start_basis: str,
    confidence: float,
) -> Window:
    """The statistics of the `chosen` evaluations (those of the run's protocol among the
    evaluations `in_window`): mean, sd, trend and pooled episodes, and what was left out."""
    from ccpo_cli import stats

    chosen_ids = {row["id"] for row in chosen}
    values = [row["success_rate"] for row in chosen]
    raw = stats.window_stats([row["step"] for row in chosen], values, window_start)
    episodes, successes, pooled_interval = _pooled(chosen, confidence)
    return Window(
        mean=raw["mean"],
        sd=raw["sd"],
        n=raw["n"],
        steps=raw["steps"],
        start=window_start,
        evaluation_ids=[row["id"] for row in chosen],
        protocol={
            "split": protocol.split,
            "temperature": protocol.temperature,
            "episodes": protocol.episodes,
        },
        values=values,
        protocol_mixed=len({_row_key(row) for row in in_window}) > 1,
        left_out_evaluation_ids=[row["id"] for row in in_window if row["id"] not in chosen_ids],
        evaluation_seeds=sorted({seed for row in chosen for seed in row["evaluation_seeds"]}),
        trend=stats.trend_test(raw["steps"], values, confidence),
        pooled_interval=pooled_interval,
        episodes=episodes,
        successes=successes,
        start_basis=start_basis,
    )


def window_entry(
    evaluations: list[dict],
    protocol: EvaluationProtocol,
    window_start: int,
    start_basis: str,
    confidence: float,
) -> dict:
    """{"window", "window_task_types", "best", "single_eval_interval", "protocols",
    "protocol_mixed"} of one run whose recorded protocol is `protocol` (the `RunEntry` fields of
    that name, report/comparison.py); the window starts at `window_start`, chosen as
    `start_basis` says."""
    evaluations = seeds_averaged(evaluations)
    in_window = [row for row in evaluations if row["step"] >= window_start]
    chosen = [row for row in in_window if _row_key(row) == protocol.evaluation_key]
    window = _window(chosen, in_window, protocol, window_start, start_basis, confidence)
    interval = _single_eval_interval(window.mean, protocol, confidence)
    protocols = _protocol_counts(evaluations, protocol.split)
    return {
        "window": window,
        "window_task_types": _window_task_types(chosen),
        "best": _best(window.sd, chosen, window.trend, interval),
        "single_eval_interval": interval,
        "protocols": protocols,
        "protocol_mixed": len(protocols) > 1,
    }


def run_state(status: str | None, last_step: int | None, total_steps: list[int]) -> str:
    """running / stopped-early / finished / failed / interrupted from the data: the last step seen
    against the largest total recorded; a run below it is stopped-early only when an ingest said it
    ended (`ccpo ingest --ended`, stored as status "stopped"), failed or interrupted when its
    status says so, else running."""
    if status == "failed":
        return "failed"
    if not total_steps or last_step is None:
        return "unknown"
    if last_step >= max(total_steps):
        return "finished"
    if status == "interrupted":
        return "interrupted"
    return "stopped-early" if status == "stopped" else "running"
