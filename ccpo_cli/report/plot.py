"""Learning curves for `ccpo compare --plot` and the card (matplotlib, Agg backend, no display).

One curve per arm (comparison unit of the compare document): at every step, the mean over the
seeds that evaluated there (several runs of one seed are first averaged into that seed), with a
95 % t interval over those seeds where there are at least two. Steps where some of the arm's
seeds have no evaluation are drawn hollow, so a mean over fewer seeds is never mistaken for the
full one. Reference runs (oracle, random, evaluated checkpoints) and each arm's untrained
policy (its step-0 evaluations) are drawn as horizontal reference lines. Where arms of one
setting share seeds, a second panel draws the paired difference to the leading arm at each step,
the mean over the seeds both evaluated there, with its 95 % t interval over those pairs.
Nothing is dropped because another seed did not evaluate at a step.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from ccpo_cli.errors import InvalidInput

INTERVAL_LABEL = "95 % t interval over seeds"
MIN_INTERVAL_SEEDS = 2


def seed_curves(document: dict) -> dict[str, dict[object, dict[int, float]]]:
    """{arm label: {seed: {step: success}}} for every trained run of the document; the runs of one
    seed are averaged into it at each step, and a run without a seed is a curve of its own."""
    values: dict[str, dict[object, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run in document["runs"]:
        label = run.get("arm_label")
        if label is None or not run["evaluations"]:
            continue
        seed = run["seed"] if run["seed"] is not None else f"run {run['run']}"
        for point in run["evaluations"]:
            values[label][seed][point["step"]].append(point["success"])
    return {label: {seed: {step: sum(rates) / len(rates) for step, rates in steps.items()}
                    for seed, steps in seeds.items()} for label, seeds in values.items()}


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
        points.append({"step": step, "mean": mean, "n": n, "missing": n < len(per_seed), "low": low, "high": high})
    return points


def paired_differences(first: dict[object, dict[int, float]],
                       second: dict[object, dict[int, float]]) -> dict[object, dict[int, float]]:
    """Per seed both arms ran, first - second at each step both evaluated."""
    return {
        seed: {step: first[seed][step] - second[seed][step] for step in first[seed] if step in second[seed]}
        for seed in first if seed in second and not isinstance(seed, str)
    }


def _compared_pairs(document: dict, leader: str) -> list[str]:
    """The arms compared with the leading arm (the same setting: they differ only in the arm)."""
    partners = []
    for row in document.get("comparisons") or []:
        if row["arm_a"] == leader:
            partners.append(row["arm_b"])
        elif row["arm_b"] == leader:
            partners.append(row["arm_a"])
    return partners


def _window(document: dict) -> tuple[int | None, str]:
    starts = sorted({run["window"]["start"] for run in document["runs"] if run.get("arm_label")})
    if not starts:
        return None, ""
    if len(starts) == 1:
        return starts[0], f"compared window (step >= {starts[0]})"
    return starts[0], f"windows start at steps {', '.join(map(str, starts))}"


def _draw_curve(axes, points: list[dict], colour, label: str) -> None:
    steps = [point["step"] for point in points]
    axes.plot(steps, [point["mean"] for point in points], color=colour, linewidth=1.4, label=label)
    full = [point for point in points if not point["missing"]]
    partial = [point for point in points if point["missing"]]
    axes.scatter([p["step"] for p in full], [p["mean"] for p in full], color=colour, s=14, zorder=4)
    if partial:
        axes.scatter([p["step"] for p in partial], [p["mean"] for p in partial], facecolors="white",
                     edgecolors=colour, s=26, zorder=4)
    banded = [point for point in points if point["low"] is not None]
    if banded:
        axes.fill_between([p["step"] for p in banded], [p["low"] for p in banded], [p["high"] for p in banded],
                          color=colour, alpha=0.18, linewidth=0)


def plot_learning_curves(document: dict, path: str | Path) -> Path:
    """Draw the document's arms (see the module docstring); write a PNG to `path` and return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    path = Path(path)
    if not path.parent.is_dir():
        raise InvalidInput(f"{path}: folder {path.parent} does not exist")
    curves = seed_curves(document)
    order = [arm["arm"] for arm in document["arms"] if arm["arm"] in curves]
    palette = colormaps["tab10"].colors + colormaps["Dark2"].colors
    colours = {arm: palette[index % len(palette)] for index, arm in enumerate(order)}
    leader = order[0] if order else None
    partners = [arm for arm in _compared_pairs(document, leader) if arm in curves] if leader else []
    pairs = {arm: {seed: curve for seed, curve in paired_differences(curves[leader], curves[arm]).items() if curve}
             for arm in partners}
    pairs = {arm: differences for arm, differences in pairs.items() if differences}
    many = len(order) > 4
    if pairs:
        figure, (top, bottom) = plt.subplots(2, 1, figsize=(11 if many else 9, 7.5), dpi=120, sharex=True,
                                             gridspec_kw={"height_ratios": [3, 2]})
    else:
        figure, top = plt.subplots(figsize=(11 if many else 8.5, 4.8), dpi=120)
        bottom = None
    any_missing = any_band = False
    last_step = 0
    for arm in order:
        points = pointwise(curves[arm])
        if not points:
            continue
        n_seeds = len(curves[arm])
        any_missing |= any(point["missing"] for point in points)
        any_band |= any(point["low"] is not None for point in points)
        last_step = max(last_step, points[-1]["step"])
        _draw_curve(top, points, colours[arm], f"{arm} ({n_seeds} seed{'s' if n_seeds != 1 else ''})")
    for level in (document.get("reference_levels") or {}).get("untrained", []):
        if level["arm"] in colours:
            top.axhline(level["mean"], color=colours[level["arm"]], linestyle=":", linewidth=0.9, alpha=0.8)
    for index, reference in enumerate((document.get("reference_levels") or {}).get("agents", [])):
        top.axhline(reference["mean"], color="black", linestyle=("--", "-.", ":")[index % 3], linewidth=0.9,
                    label=f"reference: {reference['label']} ({reference['mean']:.1f}%)")
    start, window_label = _window(document)
    if start is not None:
        top.axvspan(start, max(last_step, start), color="grey", alpha=0.12, label=window_label)
    top.set_ylim(0, 100)
    split = document.get("split", "heldout")
    top.set_ylabel(f"{'held-out' if split == 'heldout' else split} success (%)")
    notes = ["mean over seeds at each step"]
    if any_band:
        notes.append(f"band = {INTERVAL_LABEL}")
    if any_missing:
        notes.append("hollow = some seeds not evaluated there")
    if (document.get("reference_levels") or {}).get("untrained"):
        notes.append("dotted = untrained (step 0)")
    top.set_title("; ".join(notes), fontsize="medium")
    if many:
        top.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    elif top.get_legend_handles_labels()[0]:
        top.legend(fontsize="small", loc="lower right")
    if bottom is not None:
        for arm, differences in pairs.items():
            points = pointwise(differences)
            _draw_curve(bottom, points, colours[arm], f"{leader} - {arm} ({len(differences)} paired seeds)")
        bottom.axhline(0.0, color="black", linewidth=0.8)
        bottom.set_ylabel("difference, same seed (points)")
        bottom.set_title("Paired difference to the leading arm (band = 95 % t interval over pairs)", fontsize="medium")
        bottom.legend(fontsize="small", loc="best")
        bottom.set_xlabel("training step")
    else:
        top.set_xlabel("training step")
    figure.tight_layout()
    try:
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
