"""Databases as users build them, for the card oracle (issue 39, Deliver 4).

A `DatabaseRecipe` is a plain description of a runs.db (arms x seeds x protocols, references,
failed, retracted and unseeded runs, external estimators, other base models and backends); the
hypothesis strategy `databases()` draws them, `build` writes one through ccpo's own public
writers (the store API, and `ccpo ingest` of a generated metrics file for some runs), and
`render` runs `ccpo compare --json` and `ccpo card` on it. The oracle that judges the result is
scripts/card_oracle_recompute.py, which imports nothing of ccpo.
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from unittest import mock

import jinja2
import numpy as np
from hypothesis import strategies as st
from typer import testing as typer_testing
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.arms import load_arm
from ccpo_cli.cli.app import app
from ccpo_cli.store.facts import record_run_facts
from ccpo_cli.store.identity import ExternalArm
from ccpo_cli.store.retractions import retract

ORACLE_PATH = Path(__file__).resolve().parents[1] / "scripts" / "card_oracle_recompute.py"


def _load_oracle():
    """scripts/card_oracle_recompute.py as a module (registered first: its dataclasses need it)."""
    spec = importlib.util.spec_from_file_location("card_oracle_recompute", ORACLE_PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("card_oracle_recompute", module)
    spec.loader.exec_module(module)
    return sys.modules["card_oracle_recompute"]


oracle = _load_oracle()


class CommandOnceRunner(CliRunner):
    """typer's CliRunner, building the click command of the app once rather than per call
    (two thirds of a small card's time); every invocation still runs the whole CLI."""

    command = None

    def invoke(self, app, args=None, **kwargs):
        if CommandOnceRunner.command is None:
            CommandOnceRunner.command = typer_testing._get_command(app)
        with mock.patch.object(typer_testing, "_get_command", lambda _: CommandOnceRunner.command):
            return super().invoke(app, args, **kwargs)


runner = CommandOnceRunner()

MODEL_7B = "Qwen/Qwen2.5-7B-Instruct"
MODEL_15B = "Qwen/Qwen2.5-1.5B-Instruct"
CCPO_ARMS = ("return-hard", "global-successor", "grpo", "gigpo")  # typed arms ccpo resolves
EXTERNAL_ARMS = ("ppo", "hgae", "turn-ppo")  # estimators trained elsewhere, named by ingest
CONFIG = {
    "data": {"train_batch_size": 16, "max_prompt_length": 2048, "max_response_length": 512},
    "env": {"max_steps": 50, "history_length": 2, "rollout": {"n": 8}},
    "algorithm": {"gamma": 0.95},
}


@dataclass(frozen=True)
class RunRecipe:
    name: str
    arm: str | None
    seed: int | None
    kind: str = "training"
    base_model: str = MODEL_7B
    backend: str | None = "verl"
    total_steps: int | None = 150
    last_step: int = 119
    status: str = "running"
    episodes: str = "recorded"  # recorded | inferred | missing | submultiple
    panel: int = 128
    temperature: float = 0.4
    split: str | None = None
    turn_limit: int | None = None  # env.max_steps, as a log's config states it
    level: float = 70.0
    slope: float = 0.0  # points per 100 steps
    constant: bool = False
    eval_every: int = 10
    retract: str | None = None  # None | "run" | "step"
    evidence: bool = True  # hardware, data order and the step-1 rollout hash recorded
    via_ingest: bool = False


@dataclass(frozen=True)
class DatabaseRecipe:
    runs: tuple[RunRecipe, ...]

    def card_runs(self) -> list[str]:
        """The runs whose card is rendered: the first run of each arm (and of each setting of
        it), a failed run and a retracted run when there is one (that card must be refused)."""
        chosen: dict[tuple, str] = {}
        for run in self.runs:
            if run.kind != "training":
                continue
            key = (run.arm, run.status == "failed", run.retract == "run")
            chosen.setdefault(key, run.name)
        return list(chosen.values())[:3]


# ------------------------------------------------------------------------------ the values


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(name.encode()))


def successes(run: RunRecipe) -> dict[int, int]:
    """The success count of each evaluation step, shaped by the run's episode mode."""
    rng = _rng(run.name)
    steps = list(range(run.eval_every, run.last_step + 1, run.eval_every))
    start = math.ceil(Fraction(7, 15) * (run.total_steps or run.last_step))
    panel = run.panel
    counts = {}
    for index, step in enumerate(steps):
        rate = run.level + run.slope * (step - start) / 100 + rng.normal(0, 5)
        if step < start:
            rate -= 15
        if run.constant and step >= start:
            rate = run.level
        count = int(np.clip(round(panel * rate / 100), 1, panel - 1))
        if run.episodes == "submultiple":
            count = 2 * max(1, min(panel // 2 - 1, count // 2))  # every count even
        elif run.episodes == "missing":
            count = [panel // 4, panel // 2, 3 * panel // 4, panel // 2 + 2][index % 4]
        counts[step] = count
    window = [step for step in steps if step >= start]
    if run.episodes in ("inferred", "recorded") and not run.constant and window:
        first = window[0]
        counts[first] = counts[first] | 1  # an odd count: the panel is exactly `panel`
    if run.episodes == "submultiple" and window:
        first = window[0]
        counts[first] = 2 * (counts[first] // 2 | 1)  # even, not a multiple of 4
    return counts


# ------------------------------------------------------------------------------- building


def _arm(name: str | None):
    if name is None:
        return None
    return load_arm(name) if name in CCPO_ARMS else ExternalArm(name)


def build(recipe: DatabaseRecipe, path: Path) -> Path:
    """runs.db for `recipe`, written through ccpo's public writers (into an existing one too)."""
    db = store.open_db(path)
    for run in recipe.runs:
        if run.via_ingest:
            _ingest(run, path)
        else:
            _write(db, run)
        stated = {"split": run.split, "max_steps": run.turn_limit}
        if any(value is not None for value in stated.values()):
            record_run_facts(db, run.name, stated, "the test's recipe")
        if run.retract == "run":
            retract(db, run.name, reason="a bad node", by="tester")
        elif run.retract == "step":
            step = max(successes(run))
            retract(db, run.name, step=step, reason="evaluated twice", by="tester")
    db.close()
    return path


def _write(db, run: RunRecipe) -> None:
    store.ensure_run(
        db,
        run.name,
        arm=_arm(run.arm),
        kind=run.kind,
        seed=run.seed,
        base_model=run.base_model,
        total_steps=run.total_steps,
        benchmark="alfworld",
        backend=run.backend,
        hardware="8xH100" if run.evidence else None,
        data_order_seed=0 if run.evidence else None,
        config=CONFIG,
    )
    store.update_run_state(
        db,
        run.name,
        status=run.status,
        last_step=run.last_step,
        step1_rollout_hash=f"rollouts-seed-{run.seed}" if run.evidence else None,
    )
    for step, count in successes(run).items():
        store.record_evaluation(
            db,
            run.name,
            step,
            success_rate=100.0 * count / run.panel,
            episodes=run.panel if run.episodes == "recorded" else None,
            temperature=run.temperature,
        )


def _ingest(run: RunRecipe, db_path: Path) -> None:
    log = db_path.parent / f"{run.name}.jsonl"
    with log.open("w") as handle:
        for step in range(run.last_step + 1):
            row = {"step": step, "episode/success_rate": 0.5}
            count = successes(run).get(step)
            if count is not None:
                row["val/success_rate"] = count / run.panel
            handle.write(json.dumps(row) + "\n")
    args = ["--db", str(db_path), "ingest", str(log), "--run", run.name, "--benchmark", "alfworld"]
    args += ["--base-model", run.base_model, "--temperature", str(run.temperature)]
    if run.arm is not None:
        args += ["--arm", run.arm]
    if run.seed is not None:
        args += ["--seed", str(run.seed)]
    if run.total_steps is not None:
        args += ["--total-steps", str(run.total_steps)]
    if run.backend is not None:
        args += ["--backend", run.backend]
    if run.episodes == "recorded":
        args += ["--episodes", str(run.panel)]
    if run.evidence:
        args += ["--hardware", "8xH100"]
    if run.status in ("finished", "stopped"):
        args += ["--ended"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output


# -------------------------------------------------------------------------------- rendering


@dataclass
class Rendered:
    compare: dict
    cards: list[Path]
    refused: dict[str, str]  # run -> the one-line message of a refused card


def _no_plot(comparison, path: Path) -> None:
    """The learning-curve PNG, left blank: it states no claim, and drawing it is most of a
    card's time (tests/test_report_plot_formats.py tests the plot itself)."""
    Path(path).write_bytes(b"\x89PNG\r\n\x1a\n")


_JINJA_TEMPLATE = jinja2.Template
_COMPILED: dict[str, jinja2.Template] = {}


def _compiled_once(source, *args, **kwargs):
    """jinja2.Template, compiled once per template text: huggingface_hub's
    `ModelCard.from_template` compiles the card template on every call (half a second); the
    compiled template renders the same card."""
    if args or kwargs:
        return _JINJA_TEMPLATE(source, *args, **kwargs)
    if source not in _COMPILED:
        _COMPILED[source] = _JINJA_TEMPLATE(source)
    return _COMPILED[source]


@contextmanager
def fast_cards():
    """`ccpo card` with the PNG left blank and the Jinja template compiled once."""
    with (
        mock.patch("ccpo_cli.cards.staging.plot_learning_curves", _no_plot),
        mock.patch.object(jinja2, "Template", _compiled_once),
    ):
        yield


def card(db_path: Path, run: str, out: Path):
    """`ccpo card --run RUN --status auto --output OUT`: the status a finished run publishes."""
    return runner.invoke(
        app, ["--db", str(db_path), "card", "--run", run, "--status", "auto", "--output", str(out)]
    )


def render(recipe: DatabaseRecipe, db_path: Path) -> Rendered:
    """`ccpo compare --json` and `ccpo card` for each of the recipe's card runs."""
    with fast_cards():
        return _render(recipe, db_path)


def _render(recipe: DatabaseRecipe, db_path: Path) -> Rendered:
    result = runner.invoke(app, ["--db", str(db_path), "compare", "--json"])
    assert result.exit_code == 0, result.output
    compare = json.loads(result.stdout)
    cards, refused = [], {}
    for name in recipe.card_runs():
        out = db_path.parent / f"card-{name}" / "README.md"
        result = card(db_path, name, out)
        if result.exit_code == 0:
            cards.append(out.parent)
        else:
            refused[name] = result.output
            assert result.exit_code == 3 and "Traceback" not in result.output, (
                f"card of {name}: exit {result.exit_code}\n{result.output}"
            )
    return Rendered(compare, cards, refused)


def judge(db_path: Path, rendered: Rendered):
    """The oracle's findings on the rendered compare document and cards."""
    runs = oracle.read_runs(db_path)
    found = oracle.check_compare(rendered.compare, runs)
    for card in rendered.cards:
        found.extend(oracle.check_card(card, runs, rendered.compare))
    return found


# ------------------------------------------------------------------------------ strategies


SETTINGS = st.fixed_dictionaries(
    {
        "base_model": st.sampled_from([MODEL_7B, MODEL_15B]),
        "backend": st.sampled_from(["verl", "verl", None]),
        "temperature": st.sampled_from([0.4, 0.4, 0.0]),
        "total_steps": st.sampled_from([150, 150, 60, None]),
        "panel": st.sampled_from([128, 128, 64]),
        "evidence": st.booleans(),
    }
)


@st.composite
def databases(draw) -> DatabaseRecipe:
    setting = draw(SETTINGS)
    total = setting["total_steps"]
    last = draw(st.sampled_from([total or 150, (total or 150) * 4 // 5]))
    arms = draw(
        st.lists(st.sampled_from(CCPO_ARMS + EXTERNAL_ARMS), min_size=1, max_size=3, unique=True)
    )
    runs: list[RunRecipe] = []
    for arm in arms:
        level = draw(st.sampled_from([40.0, 60.0, 75.0, 85.0]))
        n_seeds = draw(st.integers(0, 3))
        seeds: list[int | None] = list(range(n_seeds))
        seeds += [None] * (draw(st.integers(0, 3)) == 0 or not n_seeds)  # an unseeded run
        if n_seeds and draw(st.integers(0, 3)) == 0:
            seeds.append(0)  # a repeated seed: a relaunch of seed 0
        for index, seed in enumerate(seeds):
            name = f"{arm}-{'s' + str(seed) if seed is not None else 'noseed'}-{index}"
            run = RunRecipe(
                name=name,
                arm=arm,
                seed=seed,
                base_model=setting["base_model"],
                backend=setting["backend"],
                total_steps=total,
                last_step=last,
                status="finished" if last == (total or 150) else "running",
                eval_every=max(2, (total or 150) // 15),
                panel=setting["panel"],
                temperature=setting["temperature"],
                level=level + draw(st.sampled_from([-3.0, 0.0, 4.0])),
                slope=draw(st.sampled_from([0.0, 0.0, 30.0])),
                evidence=setting["evidence"],
                episodes=draw(
                    st.sampled_from(["recorded", "recorded", "inferred", "missing", "submultiple"])
                ),
                constant=draw(st.integers(0, 9)) == 0,
                # ingest names only ccpo's arms; an external estimator's run is written directly
                via_ingest=arm in CCPO_ARMS and draw(st.integers(0, 7)) == 0,
            )
            odd = draw(st.integers(0, 11))
            if odd == 0:
                run = replace(run, status="failed")
            elif odd == 1:
                run = replace(run, retract="run")
            elif odd == 2:
                run = replace(run, retract="step")
            elif odd == 3:
                other = MODEL_15B if run.base_model == MODEL_7B else MODEL_7B
                run = replace(run, base_model=other)  # a run of another setting
            elif odd == 4:
                run = replace(run, temperature=0.0 if run.temperature else 0.4)
            if run.episodes == "submultiple":
                run = replace(run, panel=64)
            if run.via_ingest and run.evidence:
                run = replace(run, evidence=False)  # ingest cannot record data order or rollouts
            runs.append(run)
    for index in range(draw(st.integers(0, 1))):
        runs.append(
            RunRecipe(
                name=f"reference-{index}",
                arm=None,
                seed=None,
                kind="evaluation",
                base_model=setting["base_model"],
                backend=setting["backend"],
                total_steps=None,
                last_step=10,
                status="finished",
                temperature=setting["temperature"],
                panel=setting["panel"],
                eval_every=10,
            )
        )
    return DatabaseRecipe(tuple(runs))


# ------------------------------------------------------------------------- real logs, by hand


REAL_LOGS = Path(__file__).resolve().parents[1].parent / "shared" / "real-logs"
# Each round of real logs (their SOURCES.md) as a user would ingest it: (file, run, arguments),
# the arm, seed, model and benchmark given where SOURCES.md states them and left out elsewhere.
REAL_LOG_ROUNDS = {
    "round1": [
        (
            "jonp07_grpo_run_alfworld.txt",
            "jonp-grpo-15b",
            ["--arm", "grpo", "--base-model", "Qwen/Qwen2.5-1.5B-Instruct", "--total-steps", "150"],
        ),
        (
            "boerz_run_a_telemetry.csv",
            "boerz-grpo-7b-a",
            [
                "--arm",
                "grpo",
                "--seed",
                "0",
                "--base-model",
                "Qwen/Qwen2.5-7B-Instruct",
                "--total-steps",
                "150",
                "--benchmark",
                "alfworld",
            ],
        ),
    ],
    "round2": [
        ("round2/jonp07_ppo_run_alfworld.txt", "jonp-ppo", ["--total-steps", "150"]),
        ("round2/jonp07_ppo_dev_h100_norm_seed4.txt", "jonp-ppo-norm-seed4", ["--seed", "4"]),
        ("round2/jonp07_ppo_dev_h100_truncated.txt", "jonp-ppo-trunc", []),
        (
            "round2/boerz_run_b_telemetry.csv",
            "boerz-grpo-7b-b",
            [
                "--arm",
                "grpo",
                "--base-model",
                "Qwen/Qwen2.5-7B-Instruct",
                "--total-steps",
                "150",
                "--benchmark",
                "alfworld",
            ],
        ),
        (
            "round2/boerz_run_c_telemetry.csv",
            "boerz-grpo-7b-c",
            [
                "--arm",
                "grpo",
                "--base-model",
                "Qwen/Qwen2.5-7B-Instruct",
                "--total-steps",
                "150",
                "--benchmark",
                "alfworld",
            ],
        ),
        ("round2/aopd_wandb_output_i80f2v90.log", "aopd", []),
        (
            "round2/webshop/warmgigpo_webshop_gigpo_medium.log",
            "warm-gigpo-webshop",
            ["--arm", "gigpo"],
        ),
        (
            "round2/webshop/warmgigpo_webshop_sft_verl_gigpo_medium.log",
            "warm-sft-gigpo-webshop",
            ["--arm", "gigpo"],
        ),
    ],
    "round3": [
        (
            "round3/jonp07hiper_ppo_alfworld_seed5_1_5b.txt",
            "hiper-ppo-s5",
            ["--seed", "5", "--base-model", "Qwen/Qwen2.5-1.5B-Instruct"],
        ),
        (
            "round3/jonp07hiper_ppo_alfworld_seed6_1_5b.txt",
            "hiper-ppo-s6",
            ["--seed", "6", "--base-model", "Qwen/Qwen2.5-1.5B-Instruct"],
        ),
        ("round3/jonp07hiper_ppo_webshop_dev_h100.txt", "hiper-ppo-webshop", []),
        ("round3/jonp07hiper_webshop_hgae.txt", "hiper-hgae-webshop", []),
        ("round3/my1ab_test_alf_grpo.log", "my1ab-grpo", ["--arm", "grpo"]),
        (
            "round3/sfff_alfworld_gigpo_qwen3vl4b_20260524_112732_output.log",
            "sfff-alf-gigpo",
            ["--arm", "gigpo", "--benchmark", "alfworld"],
        ),
        (
            "round3/sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log",
            "sfff-alf-grpo",
            [
                "--arm",
                "grpo",
                "--benchmark",
                "alfworld",
                "--base-model",
                "Qwen/Qwen2.5-1.5B-Instruct",
            ],
        ),
        (
            "round3/sfff_sokoban_gigpo_qwen3vl4b_20260523_020711_output.log",
            "sfff-sok-gigpo",
            ["--arm", "gigpo", "--benchmark", "sokoban", "--seed", "0"],
        ),
        (
            "round3/sfff_sokoban_ppo_qwen3vl4b_20260524_004557_output.log",
            "sfff-sok-ppo",
            ["--benchmark", "sokoban"],
        ),
        (
            "round3/sfff_sokoban_turnppo_qwen3vl4b_20260524_113001_output.log",
            "sfff-sok-turnppo",
            ["--benchmark", "sokoban"],
        ),
        ("round3/warmgigpo_webshop_sft2k_gigpo.log", "warm-sft2k-gigpo", ["--arm", "gigpo"]),
        ("round3/warmgigpo_webshop_sft500_gigpo.log", "warm-sft500-gigpo", ["--arm", "gigpo"]),
        ("round3/warmgigpo_webshop_sft2k_eval64.log", "warm-sft2k-eval64", []),
    ],
    "round4": [
        (
            "round4/ymguan_alfworld_grpo_observe_qwen25_15b_seed0_20260420_162642.log",
            "ym-grpo-15b",
            ["--arm", "grpo", "--seed", "0"],
        ),
        (
            "round4/ymguan_alfworld_gigpo_observe_qwen25_15b_seed0_20260420_162642.log",
            "ym-gigpo-15b",
            ["--arm", "gigpo", "--seed", "0"],
        ),
        (
            "round4/ymguan_alfworld_grpo_observe_qwen25_7b_seed0_20260415_104809.log",
            "ym-grpo-7b",
            ["--arm", "grpo", "--seed", "0"],
        ),
        ("round4/ymguan_alfworld_evalonly_grpo7b_step100_envseed123.log", "ym-eval-123", []),
        ("round4/ymguan_alfworld_evalonly_grpo7b_step100_envseed456.log", "ym-eval-456", []),
        (
            "round4/ymguan_alfworld_dualtoken_l49ikuco_wandb_full.csv",
            "ym-dualtoken",
            ["--benchmark", "alfworld"],
        ),
        (
            "round4/wallace_search_grpo_seg1_pre_resume_step100.log",
            "wallace-grpo",
            ["--arm", "grpo"],
        ),
        ("round4/wallace_search_grpo_seg2_resume_from100.log", "wallace-grpo", ["--arm", "grpo"]),
        (
            "round4/wallace_search_gigpo_seg1_pre_resume_step100.log",
            "wallace-gigpo",
            ["--arm", "gigpo"],
        ),
        (
            "round4/wallace_search_gigpo_seg2_resume_from100.log",
            "wallace-gigpo",
            ["--arm", "gigpo"],
        ),
        ("round4/tzy_search_grpo_qwen25_15b_console.log", "tzy-grpo", ["--arm", "grpo"]),
    ],
}


# Synthetic runs beside the real ones, in the setting of the 1.5B ALFWorld logs (valid_seen, T 0.4,
# 50 turns): a return-hard arm with its count recorded on one seed and inferred on the other, a
# run without a seed, a failed run and a reference.
REAL_LOG_SYNTHETIC = tuple(
    RunRecipe(
        name=name,
        arm=arm,
        seed=seed,
        kind=kind,
        base_model="Qwen/Qwen2.5-1.5B-Instruct",
        backend=None,
        split="valid_seen",
        turn_limit=50,
        episodes=episodes,
        status=status,
        evidence=False,
        **({"total_steps": None, "last_step": 10} if kind == "evaluation" else {}),
    )
    for name, arm, seed, kind, episodes, status in (
        ("synthetic-rh-0", "return-hard", 0, "training", "recorded", "running"),
        ("synthetic-rh-1", "return-hard", 1, "training", "inferred", "running"),
        ("synthetic-rh-noseed", "return-hard", None, "training", "recorded", "running"),
        ("synthetic-rh-failed", "return-hard", 2, "training", "recorded", "failed"),
        ("synthetic-reference", None, None, "evaluation", "recorded", "finished"),
    )
)


def build_real_round(
    name: str, folder: Path, *, synthetic: bool = True
) -> tuple[Path, list[Path], Path]:
    """runs.db of one round through `ccpo ingest` (plus the synthetic runs), its cards
    (`--status auto`; the refused ones are refused with exit 3) and compare --json:
    (db, card folders, compare file)."""
    db_path = folder / "runs.db"
    cards_of = sorted({run for _, run, _ in REAL_LOG_ROUNDS[name]})
    if synthetic:
        build(DatabaseRecipe(REAL_LOG_SYNTHETIC), db_path)
        cards_of += ["synthetic-rh-0", "synthetic-rh-1"]
    for file, run, args in REAL_LOG_ROUNDS[name]:
        assert (REAL_LOGS / file).is_file(), f"{REAL_LOGS / file} is missing"
        result = runner.invoke(
            app, ["--db", str(db_path), "ingest", str(REAL_LOGS / file), "--run", run, *args]
        )
        assert result.exit_code in (0, 3) and "Traceback" not in result.output, result.output
    result = runner.invoke(app, ["--db", str(db_path), "compare", "--json"])
    assert result.exit_code == 0, result.output
    compare = folder / "compare.json"
    compare.write_text(result.stdout)
    cards = []
    for run in cards_of:
        out = folder / f"card-{run}" / "README.md"
        with fast_cards():
            result = card(db_path, run, out)
        assert result.exit_code in (0, 3) and "Traceback" not in result.output, result.output
        if result.exit_code == 0:
            cards.append(out.parent)
    return db_path, cards, compare
