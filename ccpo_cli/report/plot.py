"""Learning curves for `ccpo compare --plot` (matplotlib, Agg backend, no display needed)."""

from __future__ import annotations

from pathlib import Path

from ccpo_cli.errors import InvalidInput

_SEED_LINE_STYLES = ("-", "--", ":", "-.")


def run_styles(runs: list[dict]) -> list[tuple[tuple[float, ...], str]]:
    """(colour, line style) per run: one colour per arm, so seeds of an arm read as a family, and
    one line style per seed within it (a run without an arm is its own family)."""
    from matplotlib import colormaps

    palette = colormaps["tab10"].colors + colormaps["Dark2"].colors
    families: dict[str, int] = {}
    members: dict[str, int] = {}
    styles = []
    for run in runs:
        family = run["arm"] if run["arm"] is not None else f"run:{run['run']}"
        colour_index = families.setdefault(family, len(families))
        member = members.get(family, 0)
        members[family] = member + 1
        styles.append((palette[colour_index % len(palette)], _SEED_LINE_STYLES[member % len(_SEED_LINE_STYLES)]))
    return styles


def plot_learning_curves(document: dict, path: str | Path) -> Path:
    """Draw each run's held-out success over steps, shade the compared window and mark each
    run's best evaluation; write a PNG to `path` and return it. With several seeds in an arm,
    draw arm means with bands and paired differences instead (`report/plot_arms.py`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if not path.parent.is_dir():
        raise InvalidInput(f"{path}: folder {path.parent} does not exist")
    from ccpo_cli.report.plot_arms import plot_arm_bands, wants_arm_bands

    if wants_arm_bands(document):
        return plot_arm_bands(document, path)
    many = len(document["runs"]) > 4  # then the legend goes beside the axes, off the curves
    figure, axes = plt.subplots(figsize=(11 if many else 8, 4.8), dpi=120)
    last_step = 0
    for run, (colour, line_style) in zip(document["runs"], run_styles(document["runs"])):
        curve = run["evaluations"]
        if not curve:
            continue
        steps = [point["step"] for point in curve]
        rates = [point["success"] for point in curve]
        last_step = max(last_step, max(steps))
        label = run["run"] if run["arm"] is None else f"{run['run']} ({run['arm']})"
        axes.plot(steps, rates, marker=".", linewidth=1.2, color=colour, linestyle=line_style, label=label)
        best = run["best"]
        if best is not None:
            axes.scatter([best["step"]], [best["success"]], marker="*", s=140, color=colour, edgecolors="black", zorder=5)
        if run["window"]["mean"] is not None:
            axes.hlines(run["window"]["mean"], document["window_start"], max(steps), colors=colour,
                        linestyles=line_style, linewidth=0.8, alpha=0.6)
    axes.axvspan(document["window_start"], max(last_step, document["window_start"]), color="grey", alpha=0.15,
                 label=f"compared window (step >= {document['window_start']})")
    axes.set_xlabel("training step")
    split = document.get("split", "heldout")
    axes.set_ylabel(f"{'held-out' if split == 'heldout' else split} success (%)")
    axes.set_ylim(0, 100)
    axes.set_title("Held-out success; star = best evaluation (biased upward), thin line = window mean")
    if many:
        axes.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        axes.legend(fontsize="small", loc="lower right")
    figure.tight_layout()
    try:
        figure.savefig(path, format="png")
    finally:
        plt.close(figure)
    return path
