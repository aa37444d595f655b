"""The scipy-free distributions behind compare's start-up agree with scipy.

Asked for in issue 32, item 8.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from ccpo_cli import distributions as d


@pytest.mark.parametrize("p", [1e-9, 0.001, 0.0125, 0.025, 0.3, 0.5, 0.8, 0.975, 0.995, 1 - 1e-9])
def test_normal_quantile(p):
    assert d.normal_ppf(p) == pytest.approx(stats.norm.ppf(p), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("df", [1, 1.7, 2, 3.4, 5, 9, 30, 200.5])
def test_t_tail_and_quantile(df):
    for t in (-8.0, -2.1, -0.3, 0.0, 0.4, 1.96, 3.3, 12.0):
        assert d.t_sf(t, df) == pytest.approx(stats.t.sf(t, df), rel=1e-9, abs=1e-14)
    for p in (0.001, 0.025, 0.5, 0.9, 0.975, 0.999):
        assert d.t_ppf(p, df) == pytest.approx(stats.t.ppf(p, df), rel=1e-9, abs=1e-10)


def test_trim_mean_and_line_match_scipy():
    rng = np.random.default_rng(3)
    for n in (4, 7, 10, 13):
        values = rng.normal(size=n)
        assert d.trim_mean(values, 0.25) == pytest.approx(stats.trim_mean(values, 0.25))
    matrix = rng.normal(size=(50, 9))
    assert np.allclose(d.trim_mean(matrix, 0.25, axis=1), stats.trim_mean(matrix, 0.25, axis=1))
    x, y = np.arange(12.0), 3 + 0.4 * np.arange(12.0) + rng.normal(size=12)
    mine, theirs = d.least_squares_line(x, y), stats.linregress(x, y)
    for key in ("slope", "intercept", "stderr", "pvalue"):
        assert mine[key] == pytest.approx(getattr(theirs, key), rel=1e-9)


@pytest.mark.parametrize("df", [1, 1.3, 1.97, 3.4, 9, 30, 200.5, 5000])
def test_noncentral_t_tail(df):
    for t in (-3.0, 0.0, 2.1, 4.3, 12.7):
        for nc in (-20.0, -4.0, -0.5, 0.0, 0.7, 2.5, 6.0, 15.0, 40.0):
            assert d.noncentral_t_sf(t, df, nc) == pytest.approx(
                stats.nct.sf(t, df, nc), rel=1e-8, abs=1e-12
            )


def test_pair_power_p_values_match_scipy_tests():
    from ccpo_cli.report.power import pair_power

    a = {0: 41.0, 1: 47.5, 2: 39.0, 3: 52.0}
    b = {0: 38.0, 1: 40.0, 2: 37.5, 3: 45.0, 4: 36.0}
    paired = pair_power(a, b, paired_seeds=[0, 1, 2, 3])
    differences = [a[seed] - b[seed] for seed in range(4)]
    assert paired["p"] == pytest.approx(stats.ttest_1samp(differences, 0.0).pvalue, rel=1e-9)
    welch = pair_power(a, b)
    assert welch["p"] == pytest.approx(
        stats.ttest_ind(list(a.values()), list(b.values()), equal_var=False).pvalue, rel=1e-9
    )


def _compare_json_loads_scipy(db: Path) -> tuple[dict, str]:
    import subprocess
    import sys

    code = (
        "import runpy, sys\nsys.argv = ['ccpo', '--db', sys.argv[1], 'compare', '--json']\n"
        "try:\n    runpy.run_module('ccpo_cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('scipy loaded' if any(name.split('.')[0] == 'scipy' for name in sys.modules) else 'no scipy',"
        " file=sys.stderr)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code, str(db)],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    return json.loads(done.stdout), done.stderr.strip().splitlines()[-1]


def test_compare_json_with_a_pair_computes_its_power_without_scipy(tmp_path):
    # The pair's power (noncentral t) and p value once cost compare --json an import of scipy.stats.
    from ccpo_cli.arms import load_arm
    from ccpo_cli.store import ensure_run, open_db, record_evaluation

    db = open_db(tmp_path / "runs.db")
    for arm in ("return-hard", "grpo"):
        for seed in range(3):
            ensure_run(
                db,
                f"{arm}-{seed}",
                arm=load_arm(arm),
                seed=seed,
                base_model="m",
                backend="local",
                benchmark="alfworld",
                total_steps=30,
            )
            for step in range(0, 31, 3):
                lift = 5 if arm == "grpo" else 0
                record_evaluation(
                    db,
                    f"{arm}-{seed}",
                    step,
                    successes=20 + step + seed * seed + lift,
                    episodes=64,
                    temperature=0.4,
                )
    document, loaded = _compare_json_loads_scipy(tmp_path / "runs.db")
    assert loaded == "no scipy"
    (pair,) = document["power"]["pairs"]
    assert pair["mdd"] is not None and pair["p"] is not None


def test_compare_json_starts_without_scipy(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    from ccpo_cli.arms import load_arm
    from ccpo_cli.store import ensure_run, open_db, record_evaluation

    db = open_db(tmp_path / "runs.db")
    for seed in range(3):
        ensure_run(
            db,
            f"rh-{seed}",
            arm=load_arm("return-hard"),
            seed=seed,
            base_model="m",
            backend="local",
            benchmark="alfworld",
            total_steps=30,
        )
        for step in range(0, 31, 3):
            record_evaluation(
                db, f"rh-{seed}", step, successes=20 + step + seed, episodes=64, temperature=0.4
            )
    code = (
        "import runpy, sys\nsys.argv = ['ccpo', '--db', sys.argv[1], 'compare', '--json']\n"
        "try:\n    runpy.run_module('ccpo_cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('scipy loaded' if any(name.split('.')[0] == 'scipy' for name in sys.modules) else 'no scipy',"
        " file=sys.stderr)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "runs.db")],
        capture_output=True,
        text=True,
        cwd=root,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
    )
    assert (
        json.loads(done.stdout)["arms"][0]["n_seeds"] == 3
    )  # trend, bias, Wilson and IQM were all computed
    assert done.stderr.strip().splitlines()[-1] == "no scipy", done.stderr
