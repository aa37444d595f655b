"""`ccpo compare --plot` when arms have several seeds: one mean curve per arm with a band over
its seeds, and a second panel with the per-seed (paired) difference of each arm to the leading
arm. A dozen separate seed lines cannot be read; a mean, its spread and the paired gap can."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np


def arm_curves(document: dict) -> dict[str, dict[object, dict[int, float]]]:
    """{arm: {seed: {step: success}}} of every run with an arm (a seed's last run wins)."""
    curves: dict[str, dict[object, dict[int, float]]] = defaultdict(dict)
    for run in document["runs"]:
        if run["arm"] is None or not run["evaluations"]:
            continue
        curves[run["arm"]][run["seed"]] = {point["step"]: point["success"] for point in run["evaluations"]}
    return dict(curves)


def mean_band(per_seed: dict[object, dict[int, float]]) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
    """Steps every seed evaluated, and the mean, minimum and maximum over seeds there."""
    steps = sorted(set.intersection(*(set(curve) for curve in per_seed.values())))
    values = np.array([[curve[step] for step in steps] for curve in per_seed.values()], dtype=float)
    if not steps:
        return [], np.array([]), np.array([]), np.array([])
    return steps, values.mean(axis=0), values.min(axis=0), values.max(axis=0)


def paired_differences(first: dict[object, dict[int, float]],
                       second: dict[object, dict[int, float]]) -> dict[object, dict[int, float]]:
    """Per shared seed, first - second at the steps both evaluated."""
    return {
        seed: {step: first[seed][step] - second[seed][step] for step in first[seed] if step in second[seed]}
        for seed in first if seed in second
    }


def plot_arm_bands(document: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors
    curves = arm_curves(document)
    order = [arm["arm"] for arm in document["arms"] if arm["arm"] in curves]
    colours = {arm: palette[index % len(palette)] for index, arm in enumerate(order)}
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7.5), dpi=120, sharex=True,
                                         gridspec_kw={"height_ratios": [3, 2]})
    for arm in order:
        steps, mean, low, high = mean_band(curves[arm])
        if not steps:
            continue
        top.plot(steps, mean, marker=".", color=colours[arm], label=f"{arm} (mean of {len(curves[arm])} seeds)")
        top.fill_between(steps, low, high, color=colours[arm], alpha=0.2, linewidth=0)
    top.axvspan(document["window_start"], max([document["window_start"]] + [
        step for arm in curves.values() for curve in arm.values() for step in curve]), color="grey", alpha=0.12,
        label=f"compared window (step >= {document['window_start']})")
    top.set_ylim(0, 100)
    top.set_ylabel("held-out success (%)")
    top.set_title("Each arm: mean over seeds, band = min to max over seeds")
    top.legend(fontsize="small", loc="lower right")
    leader = order[0] if order else None
    for arm in order[1:]:
        differences = paired_differences(curves[leader], curves[arm])
        differences = {seed: curve for seed, curve in differences.items() if curve}
        if len(differences) < 1:
            continue
        steps, mean, low, high = mean_band(differences)
        if not steps:
            continue
        bottom.plot(steps, mean, marker=".", color=colours[arm],
                    label=f"{leader} - {arm} ({len(differences)} paired seeds)")
        bottom.fill_between(steps, low, high, color=colours[arm], alpha=0.2, linewidth=0)
    bottom.axhline(0.0, color="black", linewidth=0.8)
    bottom.set_xlabel("training step")
    bottom.set_ylabel("difference, same seed (points)")
    bottom.set_title("Paired difference to the leading arm (band = min to max over seeds)")
    if bottom.get_legend_handles_labels()[0]:
        bottom.legend(fontsize="small", loc="best")
    figure.tight_layout()
    try:
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path


def wants_arm_bands(document: dict) -> bool:
    """Several seeds in some arm: draw bands instead of one line per run."""
    return any(arm["n_seeds"] >= 2 for arm in document["arms"] if arm["arm_recorded"])
