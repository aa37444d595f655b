"""Learning curves for `ccpo compare --plot` and the card (matplotlib, Agg backend, no display).

One curve per arm (a comparison unit, `Comparison.arms`): at every step, the mean over the
seeds that evaluated there (several runs of one seed are first averaged into that seed), with a
95 % t interval over those seeds where there are at least two. Steps where some of the arm's
seeds have no evaluation are drawn hollow, so a mean over fewer seeds is never mistaken for the
full one. Reference runs (oracle, random, evaluated checkpoints) and each arm's untrained
policy (its step-0 evaluations) are drawn as horizontal reference lines. Where arms of one
setting share seeds, a second panel draws the paired difference to the leading arm at each step,
the mean over the seeds both evaluated there, with its 95 % t interval over those pairs.
Nothing is dropped because another seed did not evaluate at a step.

Each point carries its own error bar: the t interval over seeds from two seeds on, else the
95 % Wilson interval of that one evaluation's episodes (none when they are not recorded).
Retracted evaluations (left out of every number) are marked on the step axis. The file's
extension picks the format (png, pdf, svg), the legend sits outside the axes, and the title says
what a curve is: a mean over seeds only where there are several.

One concern, kept in one file past 400 lines: the one learning-curve figure. Its curves, their
intervals, the reference levels and the paired panel are drawn from one comparison with one
colour per arm and one legend; split, the colours and the title's notes would be decided apart.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ccpo_cli.errors import InvalidInput

if TYPE_CHECKING:
    from ccpo_cli.report.comparison import Comparison, RunEntry

INTERVAL_LABEL = "95 % t interval over seeds"
MIN_INTERVAL_SEEDS = 2
FORMATS = ("png", "pdf", "svg")


def figure_format(path: Path) -> str:
    """The format the file's extension names; InvalidInput for any other."""
    suffix = path.suffix.lower().lstrip(".")
    if suffix not in FORMATS:
        raise InvalidInput(f"{path}: the extension picks the format; use .{', .'.join(FORMATS)}")
    return suffix


def single_evaluation_counts(comparison: Comparison) -> dict[str, dict[int, tuple[int, int]]]:
    """{arm label: {step: (successes, episodes)}} of the arms whose curve is one run's evaluations
    (their error bars are Wilson intervals of those counts)."""
    runs_by_label: dict[str, list[RunEntry]] = defaultdict(list)
    for run in comparison.runs:
        if run.arm_label is not None and run.evaluations:
            runs_by_label[run.arm_label].append(run)
    counts = {}
    for label, runs in runs_by_label.items():
        if len(runs) == 1:
            counts[label] = {
                point["step"]: (successes, episodes)
                for point in runs[0].evaluations
                if (episodes := point["episodes"]) and (successes := point["successes"]) is not None
            }
    return counts


def seed_curves(comparison: Comparison) -> dict[str, dict[object, dict[int, float]]]:
    """{arm label: {seed: {step: success}}} for every trained run of the comparison; the runs of one
    seed are averaged into it at each step, and a run without a seed is a curve of its own."""
    values: dict[str, dict[object, dict[int, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    for run in comparison.runs:
        label = run.arm_label
        if label is None or not run.evaluations:
            continue
        seed = run.seed if run.seed is not None else f"run {run.run}"
        for point in run.evaluations:
            values[label][seed][point["step"]].append(point["success"])
    return {
        label: {
            seed: {step: sum(rates) / len(rates) for step, rates in steps.items()}
            for seed, steps in seeds.items()
        }
        for label, seeds in values.items()
    }


def _t_quantile(n: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, n - 1))


def pointwise(per_seed: dict[object, dict[int, float]]) -> list[dict]:
    """Per step any seed evaluated: the mean over those seeds, their count, whether some seed is
    missing there, and the 95 % t interval over seeds (None below two)."""
    steps = sorted({step for curve in per_seed.values() for step in curve})
    points = []
    for step in steps:
        present = [curve[step] for curve in per_seed.values() if step in curve]
        n = len(present)
        mean = sum(present) / n
        low = high = None
        if n >= MIN_INTERVAL_SEEDS:
            sd = math.sqrt(sum((value - mean) ** 2 for value in present) / (n - 1))
            half = _t_quantile(n) * sd / math.sqrt(n)
            low, high = mean - half, mean + half
        points.append(
            {
                "step": step,
                "mean": mean,
                "n": n,
                "missing": n < len(per_seed),
                "low": low,
                "high": high,
            }
        )
    return points


def paired_differences(
    first: dict[object, dict[int, float]], second: dict[object, dict[int, float]]
) -> dict[object, dict[int, float]]:
    """Per seed both arms ran, first - second at each step both evaluated."""
    return {
        seed: {
            step: first[seed][step] - second[seed][step]
            for step in first[seed]
            if step in second[seed]
        }
        for seed in first
        if seed in second and not isinstance(seed, str)
    }


def _compared_pairs(comparison: Comparison, leader: str) -> list[str]:
    """The arms compared with the leading arm (the same setting: they differ only in the arm)."""
    return [
        pair.second.name if pair.first.name == leader else pair.first.name
        for pair in comparison.pairs_of(leader)
    ]


def _window(comparison: Comparison) -> tuple[int | None, str]:
    starts = sorted({run.window.start for run in comparison.runs if run.arm_label})
    if not starts:
        return None, ""
    if len(starts) == 1:
        return starts[0], f"compared window (step >= {starts[0]})"
    return starts[0], f"windows start at steps {', '.join(map(str, starts))}"


def _with_wilson(points: list[dict], counts: dict[int, tuple[int, int]]) -> list[dict]:
    from ccpo_cli.stats import wilson_interval

    for point in points:
        if point["low"] is None and point["step"] in counts:
            successes, episodes = counts[point["step"]]
            low, high = wilson_interval(successes, episodes)
            point.update(low=100 * low, high=100 * high, interval="wilson")
    return points


def _draw_curve(axes, points: list[dict], colour, label: str) -> None:
    steps = [point["step"] for point in points]
    axes.plot(steps, [point["mean"] for point in points], color=colour, linewidth=1.4, label=label)
    barred = [point for point in points if point["low"] is not None]
    if barred:
        axes.errorbar(
            [p["step"] for p in barred],
            [p["mean"] for p in barred],
            yerr=[[p["mean"] - p["low"] for p in barred], [p["high"] - p["mean"] for p in barred]],
            fmt="none",
            ecolor=colour,
            elinewidth=0.8,
            capsize=2,
            alpha=0.8,
        )
    full = [point for point in points if not point["missing"]]
    partial = [point for point in points if point["missing"]]
    axes.scatter([p["step"] for p in full], [p["mean"] for p in full], color=colour, s=14, zorder=4)
    if partial:
        axes.scatter(
            [p["step"] for p in partial],
            [p["mean"] for p in partial],
            facecolors="white",
            edgecolors=colour,
            s=26,
            zorder=4,
        )
    banded = [point for point in points if point["low"] is not None]
    if banded:
        axes.fill_between(
            [p["step"] for p in banded],
            [p["low"] for p in banded],
            [p["high"] for p in banded],
            color=colour,
            alpha=0.18,
            linewidth=0,
        )


def _mark_retracted(axes, comparison: Comparison, colours: dict) -> None:
    """An x on the step axis at each retracted evaluation of a drawn arm (left out of the curve)."""
    arm_of = {run.run: run.arm_label for run in comparison.runs}
    retracted = [
        (entry["step"], arm_of.get(entry["run"]))
        for entry in comparison.retracted.get("evaluations") or []
    ]
    retracted = [(step, arm) for step, arm in retracted if arm in colours]
    if retracted:
        axes.scatter(
            [step for step, _ in retracted],
            [1.5] * len(retracted),
            marker="x",
            s=30,
            zorder=5,
            color=[colours[arm] for _, arm in retracted],
            label="retracted evaluation (left out)",
        )


def plot_learning_curves(comparison: Comparison, path: str | Path) -> Path:
    """Draw the comparison's arms (see the module docstring); write `path` in the format its
    extension names and return it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fmt = figure_format(path)
    if not path.parent.is_dir():
        raise InvalidInput(f"{path}: folder {path.parent} does not exist")
    figure = learning_curve_figure(comparison)
    partial = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        figure.savefig(partial, format=fmt, bbox_inches="tight")
        partial.replace(path)  # a reader never sees half a figure
    finally:
        plt.close(figure)
        partial.unlink(missing_ok=True)
    return path


def _listed_colours(name: str) -> tuple:
    """The colours of one of matplotlib's listed colour maps, the tuple matplotlib keeps."""
    from matplotlib import colormaps
    from matplotlib.colors import ListedColormap

    colormap = colormaps[name]
    colours = colormap.colors if isinstance(colormap, ListedColormap) else None
    # matplotlib types `colors` as any array-like; tab10 and Dark2 hold a tuple.
    assert isinstance(colours, tuple), f"matplotlib's {name} is not a tuple of colours"
    return colours


def learning_curve_figure(comparison: Comparison):
    """The matplotlib figure of the comparison's curves (the caller saves and closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = seed_curves(comparison)
    short = {arm.name: arm.label or arm.name for arm in comparison.arms}
    order = [arm.name for arm in comparison.arms if arm.name in curves]
    palette = _listed_colours("tab10") + _listed_colours("Dark2")
    colours = {arm: palette[index % len(palette)] for index, arm in enumerate(order)}
    leader = order[0] if order else None
    pairs = _paired_to_leader(comparison, curves, leader)
    many = len(order) > 4
    if pairs:
        figure, (top, bottom) = plt.subplots(
            2,
            1,
            figsize=(11 if many else 9, 7.5),
            dpi=120,
            sharex=True,
            gridspec_kw={"height_ratios": [3, 2]},
        )
    else:
        figure, top = plt.subplots(figsize=(11 if many else 8.5, 4.8), dpi=120)
        bottom = None
    drawn = _draw_arm_curves(top, comparison, curves, order, colours, short)
    _mark_retracted(top, comparison, colours)
    _draw_levels(top, comparison, colours)
    start, window_label = _window(comparison)
    if start is not None:
        top.axvspan(
            start, max(drawn.last_step, start), color="grey", alpha=0.12, label=window_label
        )
    top.set_ylim(0, 100)
    split = comparison.split
    top.set_ylabel(f"{'held-out' if split == 'heldout' else split} success (%)")
    top.set_title("; ".join(drawn.notes(comparison)), fontsize="medium", wrap=True)
    if top.get_legend_handles_labels()[0]:
        # Outside the axes: a long label or many arms never cover the curves or run off the figure.
        top.legend(
            fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0
        )
    if bottom is not None:
        _draw_differences(bottom, pairs, colours, short, leader)
    else:
        top.set_xlabel("training step")
    return figure


def _paired_to_leader(
    comparison: Comparison, curves: dict, leader: str | None
) -> dict[str, dict[Any, Any]]:
    """Per arm compared with the leading arm, its per-seed differences to the leader on the
    seeds both ran (arms without one are left out)."""
    if leader is None:
        return {}
    partners = [arm for arm in _compared_pairs(comparison, leader) if arm in curves]
    pairs = {
        arm: {
            seed: curve
            for seed, curve in paired_differences(curves[leader], curves[arm]).items()
            if curve
        }
        for arm in partners
    }
    return {arm: differences for arm, differences in pairs.items() if differences}


@dataclass
class _DrawnCurves:
    """What the drawn curves show, for the figure's title: seeds per curve, and whether any
    point misses seeds or carries a band or a one-seed Wilson interval."""

    seed_counts: list[int] = field(default_factory=list)
    last_step: int = 0
    any_missing: bool = False
    any_band: bool = False
    any_wilson: bool = False

    def notes(self, comparison: Comparison) -> list[str]:
        counts = self.seed_counts
        if counts and max(counts) == 1:
            notes = ["one seed per curve: its evaluations"]
        elif counts and min(counts) == 1:
            notes = ["mean over seeds where a curve has several (seeds in the legend)"]
        else:
            notes = ["mean over seeds at each step"]
        if self.any_band:
            notes.append(f"band and bars = {INTERVAL_LABEL}")
        if self.any_wilson:
            notes.append("one-seed bars = 95 % Wilson interval of the evaluation")
        if self.any_missing:
            notes.append("hollow = some seeds not evaluated there")
        if comparison.untrained:
            notes.append("dotted = untrained (step 0)")
        return notes


def _draw_arm_curves(
    axes, comparison: Comparison, curves: dict, order: list[str], colours: dict, short: dict
) -> _DrawnCurves:
    """Each arm's curve over its seeds (a one-seed curve with its evaluations' Wilson bars)."""
    single = single_evaluation_counts(comparison)
    drawn = _DrawnCurves()
    for arm in order:
        points = pointwise(curves[arm])
        if not points:
            continue
        n_seeds = len(curves[arm])
        drawn.seed_counts.append(n_seeds)
        if n_seeds == 1 and arm in single:
            points = _with_wilson(points, single[arm])
        drawn.any_missing |= any(point["missing"] for point in points)
        drawn.any_band |= any(
            point["low"] is not None and point.get("interval") != "wilson" for point in points
        )
        drawn.any_wilson |= any(point.get("interval") == "wilson" for point in points)
        drawn.last_step = max(drawn.last_step, points[-1]["step"])
        _draw_curve(
            axes,
            points,
            colours[arm],
            f"{short.get(arm, arm)} ({n_seeds} seed{'s' if n_seeds != 1 else ''})",
        )
    return drawn


def _draw_levels(axes, comparison: Comparison, colours: dict) -> None:
    """The untrained level of each arm (dotted, its colour) and each reference agent's level."""
    for level in comparison.untrained:
        if level.arm in colours:
            axes.axhline(
                level.mean, color=colours[level.arm], linestyle=":", linewidth=0.9, alpha=0.8
            )
    for index, reference in enumerate(comparison.reference_agents()):
        assert reference.mean is not None  # reference_agents() keeps the references with a level
        axes.axhline(
            reference.mean,
            color="black",
            linestyle=("--", "-.", ":")[index % 3],
            linewidth=0.9,
            label=f"reference: {reference.label} ({reference.mean:.1f}%)",
        )


def _draw_differences(axes, pairs: dict, colours: dict, short: dict, leader: str | None) -> None:
    """The lower panel: each compared arm's paired difference to the leading arm, per step."""
    for arm, differences in pairs.items():
        points = pointwise(differences)
        _draw_curve(
            axes,
            points,
            colours[arm],
            f"{short.get(leader or '', leader)} - {short.get(arm, arm)} ({len(differences)} paired seeds)",
        )
    axes.axhline(0.0, color="black", linewidth=0.8)
    axes.set_ylabel("difference, same seed (points)")
    axes.set_title(
        "Paired difference to the leading arm (band = 95 % t interval over pairs)",
        fontsize="medium",
    )
    axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    axes.set_xlabel("training step")
