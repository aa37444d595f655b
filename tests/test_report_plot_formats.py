"""`compare --plot` writes the format its extension names, keeps the legend
outside the axes, draws an error bar per point (t over seeds, else the Wilson interval of the one
evaluation), marks retracted evaluations and says in its title what a curve is.

Asked for in issue 32, item 6.
"""

from __future__ import annotations

import pytest
from matplotlib.container import ErrorbarContainer

from ccpo_cli.arms import load_arm
from ccpo_cli.errors import InvalidInput
from ccpo_cli.report.compare import compare_runs
from ccpo_cli.report.plot import learning_curve_figure, plot_learning_curves
from ccpo_cli.store import ensure_run, open_db, record_evaluation
from ccpo_cli.store.retractions import retract


def _document(tmp_path, seeds=(0,)):
    db = open_db(tmp_path / "runs.db")
    for seed in seeds:
        name = f"rh-{seed}"
        ensure_run(
            db,
            name,
            arm=load_arm("return-hard"),
            seed=seed,
            base_model="m",
            backend="local",
            benchmark="alfworld",
            total_steps=30,
        )
        for step in range(0, 31, 5):
            record_evaluation(
                db, name, step, successes=20 + step + seed, episodes=64, temperature=0.4
            )
    retract(db, "rh-0", step=25, reason="evaluated on the training games")
    return compare_runs(db)


@pytest.mark.parametrize(
    ("suffix", "magic"), [(".pdf", b"%PDF"), (".svg", b"<?xml"), (".png", b"\x89PNG")]
)
def test_the_extension_picks_the_format(tmp_path, suffix, magic):
    path = plot_learning_curves(_document(tmp_path), tmp_path / f"curves{suffix}")
    assert path.read_bytes()[: len(magic)] == magic
    assert sorted(
        p.name for p in tmp_path.iterdir() if p.name.startswith((".curves", "curves"))
    ) == [f"curves{suffix}"]


def test_another_extension_is_refused(tmp_path):
    with pytest.raises(InvalidInput, match=r"use \.png, \.pdf, \.svg"):
        plot_learning_curves(_document(tmp_path), tmp_path / "curves.jpg")


def test_one_seed_gets_wilson_bars_an_honest_title_and_its_retraction_marked(tmp_path):
    figure = learning_curve_figure(_document(tmp_path))
    axes = figure.axes[0]
    bars = [container for container in axes.containers if isinstance(container, ErrorbarContainer)]
    assert (
        len(bars) == 1 and len(bars[0].lines[2][0].get_segments()) == 6
    )  # one bar per standing evaluation
    title = axes.get_title()
    assert (
        title.startswith("one seed per curve")
        and "mean over seeds" not in title
        and "Wilson" in title
    )
    labels = axes.get_legend_handles_labels()[1]
    assert "retracted evaluation (left out)" in labels and "return-hard (1 seed)" in labels
    figure.canvas.draw()
    legend, frame = axes.get_legend().get_window_extent(), axes.get_window_extent()
    assert legend.x0 >= frame.x1  # outside the axes


def test_several_seeds_get_t_bars_and_the_mean_title(tmp_path):
    figure = learning_curve_figure(_document(tmp_path, seeds=(0, 1, 2)))
    axes = figure.axes[0]
    assert (
        axes.get_title().startswith("mean over seeds at each step")
        and "Wilson" not in axes.get_title()
    )
    assert any(isinstance(container, ErrorbarContainer) for container in axes.containers)
