"""A matrix's records under results/ (ccpo_cli/experiments/records.py): a block stopped
part-way resumes where it stopped, the finished blocks are read back from their records and
never retrained, even with the runs database gone; on the real engine with the tiny design."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from test_experiments_matrix import design, game_dirs  # noqa: F401  (the module's fixture)

from ccpo_cli.errors import InvalidInput
from ccpo_cli.experiments import blocks
from ccpo_cli.experiments.matrix import run_matrix
from ccpo_cli.experiments.records import load_records, read_records
from ccpo_cli.experiments.testbed import differences


def _script(name: str):
    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def machine(tmp_path, name: str):
    """A runs database in a folder of its own: another machine, its run folders beside it."""
    folder = tmp_path / name
    folder.mkdir()
    return folder / "runs.db"


def machine_db(tmp_path, name: str):
    return tmp_path / name / "runs.db"


@pytest.fixture
def trained(monkeypatch):
    """The names of the runs the trainer was called for, in order."""
    calls: list[str] = []
    real = blocks._train

    def counting(run, db_path, run_dir, log):
        calls.append(run.name)
        return real(run, db_path, run_dir, log)

    monkeypatch.setattr(blocks, "_train", counting)
    return calls


def test_a_killed_block_resumes_from_the_records_without_redoing_finished_pairs(
    game_dirs,  # noqa: F811
    tmp_path,
    trained,
):
    results = tmp_path / "results" / "prereg-x"
    arms = ["grpo", "gigpo"]
    seen = [0]

    def kill_during_seed_1(message: str) -> None:
        # Seed 0's two runs log "step 1/" first; the third such line is seed 1's grpo run.
        if message.startswith("step    1/"):
            seen[0] += 1
            if seen[0] == 3:
                raise KeyboardInterrupt

    first = run_matrix(
        machine(tmp_path, "one"),
        design(arms, [0, 1, 2], 30.0, game_dirs, prefix="r"),
        log=kill_during_seed_1,
        results_dir=results,
    )
    assert first.seeds_compared == [0] and first.incomplete_block["seed"] == 1
    recorded = read_records(results)
    assert [(record["seed"], sorted(record["runs"])) for record in recorded] == [(0, sorted(arms))]
    record = recorded[0]
    assert record["preregistration"] == "prereg-x" and record["cpu_s"] > 0
    assert all(entry["evaluations"] and entry["cpu_s"] > 0 for entry in record["runs"].values())

    # Another machine: the runs database is gone, only the committed records are left.
    trained.clear()
    second = run_matrix(
        machine(tmp_path, "two"),
        design(arms, [0, 1, 2], 30.0, game_dirs, prefix="r"),
        results_dir=results,
    )
    assert second.seeds_from_records == [0]
    assert second.seeds_compared == [1, 2]
    assert not any(name.endswith("seed0") for name in trained), trained
    assert sorted(name for name in trained) == sorted(
        f"r-{arm}-seed{seed}" for arm in arms for seed in (1, 2)
    )
    assert [record["seed"] for record in read_records(results)] == [0, 1, 2]

    # A third start has nothing left to train, and the analysis reads every block back.
    trained.clear()
    third = run_matrix(
        machine(tmp_path, "three"),
        design(arms, [0, 1, 2], 30.0, game_dirs, prefix="r"),
        results_dir=results,
    )
    assert trained == [] and third.seeds_from_records == [0, 1, 2]
    data = load_records(results, "r")
    offsets = (2,)  # the compared window: the last of the tiny design's 2 steps
    found = differences(data, "gigpo", "grpo", offsets)
    assert sorted(found) == [0, 1, 2]
    for seed, value in found.items():
        entries = next(r for r in read_records(results) if r["seed"] == seed)["runs"]
        assert value == pytest.approx(
            entries["gigpo"]["evaluations"]["2"]["success"]
            - entries["grpo"]["evaluations"]["2"]["success"]
        )

    # The analysis script reads the records alone: the same differences, the pairs against the
    # budget, and the CPU the blocks took.
    results_script = _script("testbed_results")
    report = results_script.analyse(
        results_script.parse_args(
            [str(results), "--prefix", "r", "--pair", "gigpo,grpo", "--budget-pairs", "5"]
        )
    )
    (row,) = report["rows"]
    assert row["pairs_done"] == 3 and row["budget_pairs"] == 5
    assert row["per_seed"] == {str(seed): round(value, 2) for seed, value in found.items()}
    assert row["cpu_minutes"] == pytest.approx(
        sum(record["cpu_s"] for record in read_records(results)) / 60
    )
    # Exporting the first machine's database again writes seed 0's record byte for byte.
    before = (results / "r-seed0.json").read_bytes()
    results_script.main(
        [str(results), "--export", str(machine_db(tmp_path, "one")), "--prefix", "r"]
        + ["--arms", "grpo,gigpo", "--seeds", "0-2"]
    )
    assert (results / "r-seed0.json").read_bytes() == before


def test_records_of_another_protocol_are_refused(game_dirs, tmp_path):  # noqa: F811
    results = tmp_path / "results" / "p"
    run_matrix(
        tmp_path / "a.db",
        design(["grpo", "gigpo"], [0], 30.0, game_dirs, prefix="q"),
        results_dir=results,
    )
    path = results / "q-seed0.json"
    before = path.read_bytes()
    with pytest.raises(InvalidInput, match="other settings"):
        run_matrix(
            tmp_path / "b.db",
            design(["grpo", "gigpo"], [0], 30.0, game_dirs, prefix="q", group=3),
            results_dir=results,
        )
    assert path.read_bytes() == before
    assert json.loads(before)["runs"]["gigpo"]["protocol"] != ""
