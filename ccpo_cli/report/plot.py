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
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

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
    single = single_evaluation_counts(comparison)
    short = {arm.name: arm.label or arm.name for arm in comparison.arms}
    order = [arm.name for arm in comparison.arms if arm.name in curves]
    palette = _listed_colours("tab10") + _listed_colours("Dark2")
    colours = {arm: palette[index % len(palette)] for index, arm in enumerate(order)}
    leader = order[0] if order else None
    partners = (
        [arm for arm in _compared_pairs(comparison, leader) if arm in curves] if leader else []
    )
    # Read only when there are partners, that is when there is a leader.
    leader_curves = curves[leader] if leader else {}
    pairs = {
        arm: {
            seed: curve
            for seed, curve in paired_differences(leader_curves, curves[arm]).items()
            if curve
        }
        for arm in partners
    }
    pairs = {arm: differences for arm, differences in pairs.items() if differences}
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
    any_missing = any_band = any_wilson = False
    seed_counts = []
    last_step = 0
    for arm in order:
        points = pointwise(curves[arm])
        if not points:
            continue
        n_seeds = len(curves[arm])
        seed_counts.append(n_seeds)
        if n_seeds == 1 and arm in single:
            points = _with_wilson(points, single[arm])
        any_missing |= any(point["missing"] for point in points)
        any_band |= any(
            point["low"] is not None and point.get("interval") != "wilson" for point in points
        )
        any_wilson |= any(point.get("interval") == "wilson" for point in points)
        last_step = max(last_step, points[-1]["step"])
        _draw_curve(
            top,
            points,
            colours[arm],
            f"{short.get(arm, arm)} ({n_seeds} seed{'s' if n_seeds != 1 else ''})",
        )
    _mark_retracted(top, comparison, colours)
    for level in comparison.untrained:
        if level.arm in colours:
            top.axhline(
                level.mean, color=colours[level.arm], linestyle=":", linewidth=0.9, alpha=0.8
            )
    for index, reference in enumerate(comparison.reference_agents()):
        assert reference.mean is not None  # reference_agents() keeps the references with a level
        top.axhline(
            reference.mean,
            color="black",
            linestyle=("--", "-.", ":")[index % 3],
            linewidth=0.9,
            label=f"reference: {reference.label} ({reference.mean:.1f}%)",
        )
    start, window_label = _window(comparison)
    if start is not None:
        top.axvspan(start, max(last_step, start), color="grey", alpha=0.12, label=window_label)
    top.set_ylim(0, 100)
    split = comparison.split
    top.set_ylabel(f"{'held-out' if split == 'heldout' else split} success (%)")
    if seed_counts and max(seed_counts) == 1:
        notes = ["one seed per curve: its evaluations"]
    elif seed_counts and min(seed_counts) == 1:
        notes = ["mean over seeds where a curve has several (seeds in the legend)"]
    else:
        notes = ["mean over seeds at each step"]
    if any_band:
        notes.append(f"band and bars = {INTERVAL_LABEL}")
    if any_wilson:
        notes.append("one-seed bars = 95 % Wilson interval of the evaluation")
    if any_missing:
        notes.append("hollow = some seeds not evaluated there")
    if comparison.untrained:
        notes.append("dotted = untrained (step 0)")
    top.set_title("; ".join(notes), fontsize="medium", wrap=True)
    if top.get_legend_handles_labels()[0]:
        # Outside the axes: a long label or many arms never cover the curves or run off the figure.
        top.legend(
            fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0
        )
    if bottom is not None:
        for arm, differences in pairs.items():
            points = pointwise(differences)
            _draw_curve(
                bottom,
                points,
                colours[arm],
                f"{short.get(leader or '', leader)} - {short.get(arm, arm)} ({len(differences)} paired seeds)",
            )
        bottom.axhline(0.0, color="black", linewidth=0.8)
        bottom.set_ylabel("difference, same seed (points)")
        bottom.set_title(
            "Paired difference to the leading arm (band = 95 % t interval over pairs)",
            fontsize="medium",
        )
        bottom.legend(
            fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0
        )
        bottom.set_xlabel("training step")
    else:
        top.set_xlabel("training step")
    return figure
