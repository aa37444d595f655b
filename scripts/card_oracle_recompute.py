#!/usr/bin/env python3
"""Check what ccpo's model cards and `ccpo compare --json` say against runs.db's rows alone.

    python scripts/card_oracle_recompute.py runs.db CARD_DIR... [--compare compare.json]

An independent oracle (issue 39): it imports nothing of ccpo. It reads runs.db with sqlite3,
recomputes each run's window, the comparison units, the seeds and their means with numpy and
scipy from the rules docs/statistics.md and docs/runs-db.md state, and checks every number and
sentence of each card (CARD_DIR/README.md and CARD_DIR/results/ccpo_summary.json) and of the
compare document it can check. It prints each false claim (where, the sentence, why) and the
counts, and exits 1 when one is false. The property tests (tests/test_card_oracle.py) run the
same checks on generated databases.

The rules, as the docs state them:
- window: the held-out evaluations that stand (not retracted, run not retracted) at step >=
  ceil(7/15 * total steps) (else of the last step; a matrix's recorded `train.window_start`
  first), of the run's most common (temperature, episodes); mean, sample sd, n.
- episodes: recorded, else the smallest panel every rate is a multiple of (an inference), else
  not recorded.
- unit: training runs with the same arm (name and fingerprint), base model, backend, benchmark,
  split, temperature, turn limit and episodes; an inferred count is a lower bound (the true
  panel is a multiple of it): it pools with the one count recorded in its setting (by any run
  of the database, its own arm's runs first) that it divides; when none fits it takes no part in pooling, and the run joins its arm's runs of no
  recorded count (inferred or not), as docs/runs-db.md states it and its pandas recipe's null
  group does. Rates printed to 3 or 4 decimals (verl's console) cannot say their panel: such a
  run joins the one count recorded in its setting, else the runs of no recorded count.
- seed: a distinct recorded seed of the unit (a run without a seed is no seed); a seed's mean is
  the mean of its runs' window means; the arm's mean is the mean of its seed means.
- trend: OLS slope of the window against step (scipy's linregress), undefined with fewer than 5
  points or no variation; converged only when its 95 % interval covers 0 and spans at most 15
  points over the window.
- resolved: at least 3 seeds per arm and the Welch 95 % interval of the difference excludes 0.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sqlite3
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

TOLERANCE = 1e-6
CONVERGED_MAX_SPAN = 15.0
MIN_TREND_POINTS = 5
MIN_SEEDS_RESOLVED = 3
MIN_INFERENCE_RATES = 5
MAX_PANEL = 4096
PLACEHOLDERS = (
    (re.compile(r"\bNone\b"), "a Python None"),
    (re.compile(r"\bnan\b", re.IGNORECASE), "a NaN"),
    (re.compile(r"\{\{|\}\}|\{%|%\}"), "a template placeholder"),
    (re.compile(r"\(\s*\)"), "an empty label"),
    (re.compile(r"\bTODO\b|\bXXX\b|\bTBD\b"), "a placeholder word"),
)
HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
# The facts that state an estimator's settings in a log that names no ccpo arm.
ARM_FACTS = (
    "estimator",
    "arm_flags",
    "adv_mode",
    "step_advantage_w",
    "invalid_penalty",
    "algorithm",
)


# ---------------------------------------------------------------------------------- the rows


@dataclass
class Run:
    name: str
    kind: str
    arm: str | None
    fingerprint: str | None
    seed: int | None
    base_model: str | None
    backend: str | None
    benchmark: str | None
    total_steps: int | None
    last_step: int | None
    status: str | None
    hardware: str | None
    data_order_seed: int | None
    step1_hash: str | None
    config: dict[str, Any]
    facts: dict[str, Any]
    retracted: bool
    evaluations: list[dict[str, Any]] = field(default_factory=list)
    # Recomputed below.
    episodes: int | None = None
    episodes_basis: str = "not recorded"
    temperature: float | None = None
    window_start: int = 0
    window: list[dict[str, Any]] = field(default_factory=list)

    @property
    def values(self) -> np.ndarray:
        return np.array([row["success_rate"] for row in self.window], dtype=float)

    @property
    def mean(self) -> float | None:
        return float(self.values.mean()) if self.window else None

    @property
    def setting(self) -> tuple:
        """What two runs must share to be compared: everything but the arm and the seed."""
        return (
            self.base_model,
            self.backend,
            self.benchmark,
            self.facts.get("split"),
            self.temperature,
            self.facts.get("max_steps"),  # the turn limit
        )

    @property
    def arm_identity(self) -> tuple:
        """The arm as recorded (name and fingerprint); for a run whose log named no ccpo arm, the
        estimator and its settings the log stated (facts); a run with neither is its own arm."""
        if self.arm is not None:
            return (self.arm, self.fingerprint)
        stated = tuple(json.dumps(self.facts.get(key), sort_keys=True) for key in ARM_FACTS)
        if self.facts.get("estimator") is None:
            return ("(no arm)", self.name)
        return ("(stated)", stated)


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def infer_panel(rates: list[float]) -> int | None:
    """The smallest panel every rate is a whole number of successes of (rates in percent), when
    the rates are written exactly; None when too few rates say anything."""
    informative = sorted({round(rate / 100.0, 12) for rate in rates if 0.0 < rate < 100.0})
    if len(informative) < MIN_INFERENCE_RATES:
        return None
    denominator = 1
    for value in informative:
        fraction = Fraction(value).limit_denominator(MAX_PANEL)
        if abs(float(fraction) - value) > 1e-9:
            return None
        denominator = (
            denominator * fraction.denominator // math.gcd(denominator, fraction.denominator)
        )
    return denominator if denominator <= MAX_PANEL else None


def rounded(rates: list[float]) -> bool:
    """Rates written to at most 4 decimals of a fraction (verl's console prints 3): their panel
    cannot be read exactly from them."""
    informative = [rate / 100.0 for rate in rates if 0.0 < rate < 100.0]
    return bool(informative) and all(abs(round(v, 4) - v) < 1e-12 for v in informative)


def read_runs(db_path: Path) -> dict[str, Run]:
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    connection.row_factory = sqlite3.Row
    retracted_runs = {
        row[0]
        for row in connection.execute("SELECT run_id FROM retractions WHERE evaluation_id IS NULL")
    }
    retracted_evaluations = {
        row[0]
        for row in connection.execute(
            "SELECT evaluation_id FROM retractions WHERE evaluation_id IS NOT NULL"
        )
    }
    facts: dict[int, dict[str, Any]] = defaultdict(dict)
    for row in connection.execute("SELECT run_id, key, value FROM run_facts ORDER BY id"):
        facts[row["run_id"]][row["key"]] = _json(row["value"])
    runs: dict[str, Run] = {}
    by_id: dict[int, Run] = {}
    for row in connection.execute("SELECT * FROM runs ORDER BY id"):
        run = Run(
            name=row["name"],
            kind=row["kind"] or "training",
            arm=row["arm"],
            fingerprint=row["arm_fingerprint"],
            seed=row["seed"],
            base_model=row["base_model"],
            backend=row["backend"],
            benchmark=row["benchmark"],
            total_steps=row["total_steps"],
            last_step=row["last_step"],
            status=row["status"],
            hardware=row["hardware"],
            data_order_seed=row["data_order_seed"],
            step1_hash=row["step1_rollout_hash"],
            config=_json(row["config"]) or {},
            facts=facts.get(row["id"], {}),
            retracted=row["id"] in retracted_runs,
        )
        runs[run.name] = by_id[row["id"]] = run
    for row in connection.execute(
        "SELECT id, run_id, step, split, episodes, successes, success_rate, temperature "
        "FROM evaluations ORDER BY run_id, step, id"
    ):
        if row["id"] not in retracted_evaluations:
            by_id[row["run_id"]].evaluations.append(dict(row))
    connection.close()
    for run in runs.values():
        _recompute_window(run)
    return runs


def _recompute_window(run: Run) -> None:
    rows = run.evaluations
    recorded = Counter(row["episodes"] for row in rows if row["episodes"] is not None)
    if recorded:
        run.episodes, run.episodes_basis = recorded.most_common(1)[0][0], "recorded"
    elif isinstance(run.facts.get("episodes"), int):
        run.episodes, run.episodes_basis = run.facts["episodes"], "recorded"
    elif rounded([row["success_rate"] for row in rows]):
        run.episodes, run.episodes_basis = None, "rounded"
    else:
        run.episodes = infer_panel([row["success_rate"] for row in rows])
        run.episodes_basis = "inferred" if run.episodes is not None else "not recorded"
    temperatures = Counter(row["temperature"] for row in rows)
    run.temperature = temperatures.most_common(1)[0][0] if temperatures else None
    window_temperature = run.temperature
    if run.temperature is None and isinstance(run.facts.get("temperature"), (int, float)):
        run.temperature = float(run.facts["temperature"])  # stated by the log's config
    window = (run.config.get("train") or {}).get("window_start")
    if isinstance(window, int):
        run.window_start = window
    elif run.total_steps:
        run.window_start = math.ceil(Fraction(7, 15) * run.total_steps)
    elif run.last_step:
        run.window_start = math.ceil(Fraction(7, 15) * run.last_step)
    run.window = [
        row
        for row in rows
        if row["step"] >= run.window_start
        and row["temperature"] == window_temperature
        and (row["episodes"] is None or recorded == Counter() or row["episodes"] == run.episodes)
    ]


# ------------------------------------------------------------------------ the units and seeds


@dataclass
class Unit:
    arm: str | None
    fingerprint: str | None
    setting: tuple
    episodes: int | None
    runs: list[Run]

    @property
    def seed_means(self) -> dict[int, float]:
        by_seed: dict[int, list[float]] = defaultdict(list)
        for run in self.runs:
            if run.seed is not None and run.window:
                by_seed[run.seed].append(run.values.mean())
        return {seed: float(np.mean(means)) for seed, means in sorted(by_seed.items())}

    @property
    def n_seeds(self) -> int:
        return len(self.seed_means)

    @property
    def mean(self) -> float | None:
        means = list(self.seed_means.values())
        return float(np.mean(means)) if means else None

    @property
    def names(self) -> set[str]:
        return {run.name for run in self.runs}


def compared_runs(runs: dict[str, Run], include_failed: bool = False) -> list[Run]:
    return [
        run
        for run in runs.values()
        if run.kind == "training"
        and not run.retracted
        and (include_failed or run.status != "failed")
    ]


def units(runs: dict[str, Run], include_failed: bool = False) -> list[Unit]:
    """The comparison units: an inferred panel joins the one count recorded in its setting (by
    any arm) that it divides."""
    groups: dict[tuple, list[Run]] = defaultdict(list)
    for run in compared_runs(runs, include_failed):
        groups[(run.arm_identity, run.setting)].append(run)
    # The counts recorded in a setting, by every run of the database (retracted and failed ones
    # too: a count is a fact of the protocol), and by the runs of each arm in it.
    recorded_in: dict[tuple, set[int]] = defaultdict(set)
    for run in runs.values():
        if run.episodes_basis == "recorded":
            recorded_in[run.setting].add(run.episodes)
            recorded_in[(run.arm_identity, *run.setting)].add(run.episodes)
    result = []
    for ((arm, fingerprint), setting), members in groups.items():
        by_panel: dict[int | None, list[Run]] = defaultdict(list)
        for run in members:
            panel = run.episodes if run.episodes_basis == "recorded" else None
            if run.episodes_basis in ("inferred", "rounded"):
                # The true panel is a multiple of an inferred one: the one count recorded in the
                # setting that it divides, its own arm's first; else the count takes no part in
                # pooling (the run joins the arm's runs of no recorded count), docs/runs-db.md.
                for counts in (recorded_in[(run.arm_identity, *setting)], recorded_in[setting]):
                    fits = [
                        size
                        for size in counts
                        if run.episodes_basis == "rounded" or size % run.episodes == 0
                    ]
                    if len(fits) == 1:
                        panel = fits[0]
                        break
            by_panel[panel].append(run)
        for panel, grouped in by_panel.items():
            result.append(Unit(arm, fingerprint, setting, panel, grouped))
    return result


def unit_of(all_units: list[Unit], run_name: str) -> Unit | None:
    return next((unit for unit in all_units if run_name in unit.names), None)


# ----------------------------------------------------------------------------- the findings


@dataclass
class Findings:
    claims: int = 0
    false: list[tuple[str, str, str]] = field(default_factory=list)

    def check(self, ok: bool, where: str, sentence: str, why: str) -> None:
        self.claims += 1
        if not ok:
            self.false.append((where, sentence.strip()[:400], why))

    def extend(self, other: Findings) -> None:
        self.claims += other.claims
        self.false.extend(other.false)


def _close(a: Any, b: Any, tolerance: float = TOLERANCE) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return abs(float(a) - float(b)) <= tolerance * max(1.0, abs(float(b)))


def welch(a: list[float], b: list[float]) -> tuple[float, float, float] | None:
    """(p, ci_low, ci_high) of mean(a) - mean(b), Welch's t at 95 %; None below 2 per arm."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    se = math.sqrt(va + vb)
    difference = float(np.mean(a) - np.mean(b))
    if se == 0:
        return None
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.975, df) * se
    p = float(stats.ttest_ind(a, b, equal_var=False).pvalue)
    return p, difference - half, difference + half


def trend_verdict(run: Run) -> str:
    """converged / not converged / undefined (too few points, no variation, too uncertain)."""
    if len(run.window) < MIN_TREND_POINTS:
        return "undefined"
    steps = np.array([row["step"] for row in run.window], dtype=float)
    values = run.values
    if np.ptp(values) == 0 or np.ptp(steps) == 0:
        return "undefined"
    fit = stats.linregress(steps, values)
    if not np.isfinite(fit.stderr):
        return "undefined"
    half = stats.t.ppf(0.975, len(steps) - 2) * fit.stderr
    low, high = fit.slope - half, fit.slope + half
    if low > 0 or high < 0:
        return "not converged"
    if (high - low) * np.ptp(steps) > CONVERGED_MAX_SPAN:
        return "undefined"
    return "converged"


# ---------------------------------------------------------------------------- compare --json


def check_compare(
    document: dict[str, Any], runs: dict[str, Run], include_failed: bool = False
) -> Findings:
    """The compare document (`--include-failed` when it was asked with it) against the rows."""
    found = Findings()
    all_units = units(runs, include_failed)
    for row in document.get("runs", []):
        run = runs.get(row["run"])
        window = row.get("window") or {}
        if run is None or run.kind != "training":
            continue
        _check_window(found, "compare runs[]", f"{row['run']}: ", window, run)
    for arm in document.get("arms", []):
        names = set(arm.get("runs") or [])
        mine = [unit for unit in all_units if unit.names & names]
        label = f"arm {arm.get('label')!r} (runs {sorted(names)})"
        found.check(
            len(mine) == 1 and mine[0].names == names,
            "compare arms[]",
            label,
            "the rows group these runs as "
            + "; ".join(f"{sorted(unit.names)}" for unit in mine)
            + " (one unit: same arm, model, backend, benchmark and protocol)",
        )
        if len(mine) == 1:
            unit = mine[0]
            found.check(
                arm.get("n_seeds") == unit.n_seeds,
                "compare arms[]",
                f"{label}: {arm.get('n_seeds')} seeds",
                f"the rows give {unit.n_seeds} seeds {sorted(unit.seed_means)}",
            )
            if unit.n_seeds:
                found.check(
                    _close(arm.get("mean"), unit.mean),
                    "compare arms[]",
                    f"{label}: mean {arm.get('mean')}",
                    f"the mean of the seed means is {unit.mean}",
                )
        panel = (arm.get("protocol") or {}).get("episodes")
        for name in names if isinstance(panel, int) and panel > 0 else ():
            run = runs.get(name)
            if run is None:
                continue
            # Rates printed rounded (verl's console) say nothing about the panel.
            fits = rounded([row["success_rate"] for row in run.window]) or all(
                abs(row["success_rate"] * panel / 100 - round(row["success_rate"] * panel / 100))
                < 1e-6
                for row in run.window
            )
            found.check(
                fits and (run.episodes_basis != "recorded" or run.episodes == panel),
                "compare arms[]",
                f"{label}: {panel} episodes per evaluation, for run {name}",
                f"run {name} records {run.episodes} episodes ({run.episodes_basis}); "
                + (
                    "its rates are whole successes of that panel"
                    if fits
                    else f"its rates are not whole successes of {panel} episodes"
                ),
            )
        found.check(
            not arm.get("resolved") or (arm.get("n_seeds") or 0) >= MIN_SEEDS_RESOLVED,
            "compare arms[]",
            f"{label}: resolved",
            f"resolved needs {MIN_SEEDS_RESOLVED} seeds",
        )
    for pair in (document.get("power") or {}).get("pairs", []):
        if "welch" in str(pair.get("test", "")).lower():
            text = json.dumps(pair).lower()
            found.check(
                "exact" not in text or "approximat" in text or "not exact" in text,
                "compare power.pairs[]",
                json.dumps(pair)[:300],
                "Welch power by the noncentral t with Welch's df is not exact (issue 39, cause 7)",
            )
    by_label = {arm.get("label"): arm for arm in document.get("arms", [])}
    for pair in document.get("comparisons", []):
        a, b = by_label.get(pair.get("label_a")), by_label.get(pair.get("label_b"))
        sentence = f"{pair.get('label_a')} vs {pair.get('label_b')}"
        if a is None or b is None:
            found.check(
                False, "compare comparisons[]", sentence, "an arm it names is not in arms[]"
            )
            continue
        seeds_a = list(a.get("seed_window_means") or [])
        seeds_b = list(b.get("seed_window_means") or [])
        found.check(
            bool(seeds_a) and bool(seeds_b),
            "compare comparisons[]",
            f"{sentence}: difference {pair.get('difference')}",
            "an arm without a recorded seed has no difference to state",
        )
        recomputed = welch(seeds_a, seeds_b)
        test = pair.get("test") or pair.get("welch") or {}
        paired = bool(test.get("paired_seeds")) and "paired" in str(test.get("test", "")).lower()
        if recomputed is not None and not paired:
            p, low, high = recomputed
            found.check(
                _close(test.get("p"), p, 1e-4) and _close(test.get("ci_low"), low, 1e-4),
                "compare comparisons[]",
                f"{sentence}: p {test.get('p')}, CI [{test.get('ci_low')}, {test.get('ci_high')}]",
                f"Welch on the seed means gives p {p:.4g}, CI [{low:.4g}, {high:.4g}]",
            )
        if pair.get("resolved"):
            low, high = test.get("ci_low"), test.get("ci_high")
            found.check(
                len(seeds_a) >= MIN_SEEDS_RESOLVED
                and len(seeds_b) >= MIN_SEEDS_RESOLVED
                and low is not None
                and high is not None
                and (low > 0 or high < 0),
                "compare comparisons[]",
                f"{sentence}: resolved",
                f"resolved needs >= {MIN_SEEDS_RESOLVED} seeds per arm and a CI that excludes 0 "
                f"(seeds {len(seeds_a)}/{len(seeds_b)}, CI [{low}, {high}])",
            )
    return found


# ------------------------------------------------------------------------------------ cards


def prose_lines(readme: str) -> list[str]:
    """The card's words: the README without its YAML front matter and fenced blocks."""
    body = readme.split("\n---\n", 1)[1] if readme.startswith("---\n") else readme
    lines, fenced = [], False
    for line in body.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("<"):
            lines.append(line)
    return lines


def paragraphs(lines: list[str]) -> list[str]:
    text = "\n".join(line for line in lines if not line.startswith("|"))
    return [part.replace("\n", " ").strip() for part in re.split(r"\n\s*\n", text) if part.strip()]


def sentences(lines: list[str]) -> list[str]:
    return [
        sentence
        for paragraph in paragraphs(lines)
        for sentence in re.split(r"(?<=[.:])\s+(?=[A-Z*])", paragraph)
        if sentence.strip()
    ]


def _in_setting(run: Run, card_run: Run) -> bool:
    return run.setting == card_run.setting and (
        run.episodes == card_run.episodes
        or None in (run.episodes, card_run.episodes)
        or bool({"inferred", "rounded"} & {run.episodes_basis, card_run.episodes_basis})
    )


def check_card(
    card_dir: Path, runs: dict[str, Run], compare: dict[str, Any] | None = None
) -> Findings:
    found = Findings()
    readme = (card_dir / "README.md").read_text()
    summary = json.loads((card_dir / "results" / "ccpo_summary.json").read_text())
    where = f"card of {summary.get('run')}"
    run = runs.get(summary.get("run"))
    if run is None:
        found.check(False, where, str(summary.get("run")), "the card's run is not in the database")
        return found
    lines = prose_lines(readme)
    said = sentences(lines)
    include_failed = run.status == "failed"
    all_units = units(runs, include_failed)
    unit = unit_of(all_units, run.name)

    # No placeholder, None, NaN or empty label anywhere in the words.
    for line in lines:
        for pattern, what in PLACEHOLDERS:
            found.check(not pattern.search(line), where, line, f"it holds {what}")

    # The title and status lines: "step A of B" are the run's last step and total steps.
    for line in lines:
        for last, total in re.findall(r"step (\S+) of (\S+?)[),.]", line):
            found.check(
                last == str(run.last_step) and total == str(run.total_steps),
                where,
                line,
                f"the run is at step {run.last_step} of {run.total_steps}",
            )

    # The window the card reads.
    window = summary.get("window") or {}
    _check_window(found, where, "", window, run)
    if run.window:
        found.check(
            window.get("start") == run.window_start,
            where,
            f"window start {window.get('start')}",
            f"ceil(7/15 x {run.total_steps or run.last_step}) is {run.window_start}",
        )
    recorded_successes = [row["successes"] for row in run.window]
    if window.get("successes") is not None:
        found.check(
            None not in recorded_successes and window["successes"] == sum(recorded_successes),
            where,
            f"window successes {window.get('successes')} of {window.get('episodes')} episodes",
            "the rows record successes "
            + (str(sum(recorded_successes)) if None not in recorded_successes else "for no run")
            + f" at a mean rate of {run.mean}",
        )
    verdict = trend_verdict(run)
    for sentence in said:
        positive = re.search(r"\bconverged\b", sentence, re.IGNORECASE) and not re.search(
            r"not (called |be called )?converged|never (called )?converged", sentence, re.IGNORECASE
        )
        if positive and "window" in sentence.lower():
            found.check(
                verdict == "converged",
                where,
                sentence,
                f"the window's trend is {verdict} (scipy linregress on {len(run.window)} points, "
                f"values {'constant' if run.window and np.ptp(run.values) == 0 else 'varying'})",
            )

    # The card's arm: its seeds and mean equal the recomputation and compare's.
    arms = summary.get("arms") or []
    this_arm = next((arm for arm in arms if run.name in (arm.get("runs") or [])), None)
    found.check(this_arm is not None, where, "this arm", "the card's run is in none of its arms")
    if this_arm is not None and unit is not None:
        found.check(
            this_arm.get("n_seeds") == unit.n_seeds,
            where,
            f"this arm has {this_arm.get('n_seeds')} seeds",
            f"the rows give {unit.n_seeds}: {sorted(unit.seed_means)} over runs {sorted(unit.names)}",
        )
        if unit.n_seeds:
            found.check(
                _close(this_arm.get("mean"), unit.mean),
                where,
                f"this arm's mean {this_arm.get('mean')}",
                f"the mean of the seed means is {unit.mean}",
            )
    if compare is not None and this_arm is not None:
        theirs = [arm for arm in compare.get("arms", []) if run.name in (arm.get("runs") or [])]
        found.check(
            len(theirs) == 1
            and theirs[0].get("n_seeds") == this_arm.get("n_seeds")
            and _close(theirs[0].get("mean"), this_arm.get("mean")),
            where,
            f"this arm: {this_arm.get('n_seeds')} seeds, mean {this_arm.get('mean')}",
            "compare says "
            + "; ".join(f"{a.get('n_seeds')} seeds, mean {a.get('mean')}" for a in theirs),
        )
    for sentence in said:
        match = re.search(r"This arm has (\d+|one|no) recorded seeds?", sentence)
        if match and unit is not None:
            stated = {"one": 1, "no": 0}.get(match.group(1), None)
            stated = int(match.group(1)) if stated is None else stated
            found.check(
                stated == unit.n_seeds,
                where,
                sentence,
                f"the rows give {unit.n_seeds} seeds over runs {sorted(unit.names)}",
            )
            means = re.search(r"mean over its seeds' window means is ([\d.]+) \(sd", sentence)
            if means and unit.mean is not None:
                found.check(
                    abs(float(means.group(1)) - unit.mean) <= 0.051,
                    where,
                    sentence,
                    f"the mean of the seed means is {unit.mean:.2f}",
                )

    # Every arm the card compares is of the card's setting, and its row is the recomputed one.
    for arm in arms:
        for name in arm.get("runs") or []:
            other = runs.get(name)
            found.check(
                other is not None and _in_setting(other, run),
                where,
                f"arm {arm.get('label')!r} compared with this run, through run {name}",
                "the run is in another setting: "
                + (str(other.setting) if other else "not in the database")
                + f" against {run.setting}",
            )
        mine = [u for u in all_units if u.names & set(arm.get("runs") or [])]
        if len(mine) == 1:
            found.check(
                arm.get("n_seeds") == mine[0].n_seeds,
                where,
                f"arm {arm.get('label')!r}: {arm.get('n_seeds')} seeds",
                f"the rows give {mine[0].n_seeds}",
            )
    for line in lines:
        if line.startswith("| ") and "`" in line and "**" not in line.split("|")[1]:
            cells = [cell.strip() for cell in line.strip("|").split("|")]
            found.check(
                all(cells) and not re.search(r"\(\s*\)|``", cells[0]),
                where,
                line,
                "a table row with an empty cell or label",
            )

    # Isolation: claimed only on a pass, and a pass only where the rows can show one.
    isolation = summary.get("isolation") or {}
    compared = [runs[name] for arm in arms for name in arm.get("runs") or [] if name in runs]
    recorded_equal = compared and all(
        len({getattr(r, column) for r in compared}) == 1
        and getattr(compared[0], column) is not None
        for column in (
            "hardware",
            "base_model",
            "backend",
            "benchmark",
            "total_steps",
            "data_order_seed",
        )
    )
    for sentence in said:
        claims = re.search(
            r"passes the isolation check|passed ccpo's isolation check|they differ only in the estimator\b(?!: nothing)",
            sentence,
        )
        denies = re.search(
            r"cannot verify|unverifiable|fails it|no other|no GRPO|not recorded",
            sentence,
            re.IGNORECASE,
        )
        if claims and not denies:
            found.check(
                isolation.get("verdict") == "passes" and bool(recorded_equal),
                where,
                sentence,
                f"the verdict is {isolation.get('verdict')!r}"
                + (
                    ""
                    if recorded_equal
                    else "; the rows do not record equal hardware, model, "
                    "backend, benchmark, steps and data order for every compared run"
                ),
            )
        counted = re.search(r"th(?:e|ese) (\d+) runs", sentence)
        if counted:
            found.check(
                int(counted.group(1)) == len(compared),
                where,
                sentence,
                f"the card compares {len(compared)} training runs ({sorted(r.name for r in compared)})",
            )

    # Differences: stated only between arms with seeds, each with its test, CI and p or the reason.
    for paragraph in paragraphs(lines):
        for sentence in re.split(r"(?<=[.:])\s+(?=[A-Z*])", paragraph):
            if re.search(r"difference of [+\-−]?\d", sentence):
                _check_difference(found, where, sentence, paragraph, run, unit, all_units)

    # Resolved: >= 3 seeds per arm and an interval that excludes 0.
    for arm in arms:
        if arm.get("resolved"):
            found.check(
                (arm.get("n_seeds") or 0) >= MIN_SEEDS_RESOLVED,
                where,
                f"arm {arm.get('label')!r} resolved",
                f"resolved needs {MIN_SEEDS_RESOLVED} seeds, it has {arm.get('n_seeds')}",
            )
    for sentence in said:
        if re.search(r"(?<!un)(?<!not a )\bresolved\b", sentence) and not re.search(
            r"not (a )?resolved|unresolved|Fewer than", sentence
        ):
            found.check(
                unit is not None and unit.n_seeds >= MIN_SEEDS_RESOLVED,
                where,
                sentence,
                f"'resolved' with {unit.n_seeds if unit else 0} seeds in this arm",
            )

    # GRPO runs named in the card are of its setting.
    for sentence in said:
        if "GRPO" in sentence and re.search(
            r"this run's setting|in its setting|shown above", sentence
        ):
            for name in re.findall(r"`([^`]+)`", sentence):
                other = runs.get(name)
                if other is not None:
                    found.check(
                        _in_setting(other, run),
                        where,
                        sentence,
                        f"run {name} is in another setting: {other.setting}, episodes "
                        f"{other.episodes} against {run.setting}, episodes {run.episodes}",
                    )

    # The left-out paragraph names settings, not fingerprints.
    for line in lines:
        if line.startswith("Left out"):
            found.check(
                not HEX64.search(line),
                where,
                line[:300],
                f"it lists {len(HEX64.findall(line))} 64-hex fingerprints",
            )
    return found


def _check_window(found: Findings, where: str, prefix: str, window: dict, run: Run) -> None:
    """A window's n and mean (compare's runs[] or a card's) against the rows."""
    found.check(
        window.get("n") == len(run.window),
        where,
        f"{prefix}window n {window.get('n')}",
        f"the rows give {len(run.window)} evaluations at step >= {run.window_start}",
    )
    if run.window:
        found.check(
            _close(window.get("mean"), run.mean),
            where,
            f"{prefix}window mean {window.get('mean')}",
            f"the rows give {run.mean}",
        )


def _check_difference(
    found: Findings,
    where: str,
    sentence: str,
    paragraph: str,
    run: Run,
    unit: Unit | None,
    all_units: list[Unit],
) -> None:
    """A stated difference: both arms have a seed, and the sentence carries its test, CI and p,
    or its paragraph says truly why there are none (one seed)."""
    labels = set(re.findall(r"`([^`]+)`", sentence))
    others = [u for u in all_units if u.arm in labels and u.runs and _in_setting(u.runs[0], run)]
    seeds = [u.n_seeds for u in others] + ([unit.n_seeds] if unit is not None else [])
    found.check(
        all(count >= 1 for count in seeds),
        where,
        sentence,
        f"an arm of this difference has no recorded seed (seed counts {seeds})",
    )
    has_test = re.search(r"\bp\s*[=<]", sentence) and re.search(r"interval|CI\b", sentence)
    reason = re.search(r"single seed|one seed|no seed|no recorded seed", paragraph)
    found.check(
        bool(has_test) or (bool(reason) and min(seeds or [0]) <= 1),
        where,
        sentence,
        f"a difference without its test, CI and p, and no true reason for none (seed counts {seeds})",
    )


# ------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("cards", type=Path, nargs="*")
    parser.add_argument("--compare", type=Path, action="append", default=[])
    parser.add_argument("--include-failed", action="store_true", help="compare was run with it")
    args = parser.parse_args(argv)
    runs = read_runs(args.db)
    total = Findings()
    documents = [json.loads(path.read_text()) for path in args.compare]
    for document in documents:
        total.extend(check_compare(document, runs, args.include_failed))
    for card in args.cards:
        total.extend(check_card(card, runs, documents[0] if documents else None))
    for where, sentence, why in total.false:
        print(f"FALSE [{where}] {sentence}\n      why: {why}")
    print(
        f"{len(args.cards)} cards, {len(documents)} compare documents, "
        f"{total.claims} claims checked, {len(total.false)} false"
    )
    return 1 if total.false else 0


if __name__ == "__main__":
    sys.exit(main())
