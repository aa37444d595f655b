"""The comparison is one typed object: `compare_runs` returns a `Comparison`, readers use its
attributes, and `Comparison.as_json()` alone writes the `ccpo compare --json` document.

Before, the document was an untyped dict holding each identity twice (flat keys and nested), the
cards rebuilt an arm from its flat keys, and pairing was decided again beside
`ComparisonUnit.setting()`.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import jsonschema
import pytest

from ccpo_cli.report.compare import compare_runs
from ccpo_cli.report.comparison import ArmSummary, Comparison, PairComparison, RunEntry
from ccpo_cli.store import ensure_run, open_db, record_evaluation, update_run_state
from ccpo_cli.store.identity import ExternalArm, RunIdentity

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = json.loads((ROOT / "docs" / "compare.schema.json").read_text())


def _add(db, name, arm, seed, level, *, step1="h", successes_of=None, episodes=200):
    ensure_run(
        db,
        name,
        arm=ExternalArm(arm, f"fp-{arm}"),
        seed=seed,
        base_model="m",
        backend="local",
        benchmark="alfworld",
        total_steps=20,
        hardware="cpu",
        data_order_seed=seed,
    )
    update_run_state(db, name, step1_rollout_hash=f"{step1}{seed}", status="finished", last_step=20)
    for offset, step in enumerate((10, 15, 20)):
        record_evaluation(
            db,
            name,
            step,
            episodes=episodes,
            successes=round((level + offset) * episodes / 100),
            temperature=0.4,
        )


@pytest.fixture
def db(tmp_path):
    database = open_db(tmp_path / "runs.db")
    for seed in range(3):
        _add(database, f"grpo-{seed}", "grpo", seed, 50 + seed)
        _add(database, f"gigpo-{seed}", "gigpo", seed, 60 + seed)
    return database


def test_compare_runs_returns_typed_entries_with_their_identities(db):
    comparison = compare_runs(db, window_start=10)
    assert isinstance(comparison, Comparison)
    assert all(isinstance(entry, RunEntry) for entry in comparison.runs)
    assert all(isinstance(entry.identity, RunIdentity) for entry in comparison.runs)
    assert all(isinstance(arm, ArmSummary) for arm in comparison.arms)
    (pair,) = comparison.pairs
    assert isinstance(pair, PairComparison)
    # The pair holds its two units, and each unit its ComparisonUnit: nothing is looked up by name.
    assert {pair.first.name, pair.second.name} == {"gigpo", "grpo"}
    assert pair.first.unit.setting() == pair.second.unit.setting()
    assert comparison.arm_of("grpo-1") is comparison.arm("grpo")
    assert comparison.run("gigpo-2").arm_label == "gigpo"
    gigpo = comparison.arm("gigpo")
    assert gigpo.seed_means == dict(zip(gigpo.seed_runs, gigpo.seed_window_means))
    assert gigpo.arm is not None and gigpo.arm.fingerprint == "fp-gigpo"


def test_as_json_is_the_schema_document_and_json_round_trips(db):
    comparison = compare_runs(db, window_start=10)
    document = comparison.as_json()
    jsonschema.validate(dict(document, schema_version=1), SCHEMA)
    # The flat keys are the typed identity's, written once.
    (arm,) = [row for row in document["arms"] if row["arm"] == "grpo"]
    assert arm["arm_fingerprint"] == comparison.arm("grpo").identity.arm.fingerprint
    (row,) = document["comparisons"]
    assert (row["label_a"], row["label_b"]) == (
        comparison.pairs[0].first.label,
        comparison.pairs[0].second.label,
    )


def test_units_whose_setting_agrees_are_compared_even_when_inferred_episodes_differ(tmp_path):
    """Pairing is `ComparisonUnit.setting()`'s to decide. Episodes inferred from rates are not
    part of a unit's protocol key, so two arms evaluated with unrecorded panels that infer to
    different sizes are in one setting and are compared (before, a second rule compared the
    shown protocol, inferred episodes included, and refused the pair)."""
    database = open_db(tmp_path / "runs.db")
    for seed in range(3):
        for name, arm, level in ((f"a-{seed}", "grpo", 50), (f"b-{seed}", "gigpo", 60)):
            ensure_run(
                database,
                name,
                arm=ExternalArm(arm, f"fp-{arm}"),
                seed=seed,
                base_model="m",
                backend="local",
                benchmark="alfworld",
                total_steps=20,
            )
            update_run_state(database, name, status="finished", last_step=20)
            # Rates only (no episode count): a-* fit a 50-game panel, b-* a 40-game one.
            panel = 50 if arm == "grpo" else 40
            for index, step in enumerate((5, 10, 15, 20, 25, 30)):
                wins = (level * panel // 100 + index + seed) % panel
                record_evaluation(
                    database,
                    name,
                    step,
                    episodes=None,
                    successes=None,
                    success_rate=100 * wins / panel,
                    temperature=0.4,
                )
    comparison = compare_runs(database, window_start=5)
    shown = {arm.name: arm.protocol["episodes"] for arm in comparison.arms}
    keys = {arm.unit.setting() for arm in comparison.arms}
    assert len(keys) == 1, shown
    assert [pair.first.name for pair in comparison.pairs] and not comparison.not_compared, shown


# Keys only the compare document has (its top level, its runs[], arms[] and comparisons[]), which
# only report/comparison.py, the writer, may spell as strings. (`arm_a`, `window_task_types` and
# the like are also keys of the power section, of window.py's statistics and of the store's
# rows, which stay mappings.)
DOCUMENT_KEYS = {
    "arms",
    "comparisons",
    "not_compared",
    "references",
    "reference_levels",
    "arm_name",
    "arm_recorded",
    "arm_flags",
    "arm_overrides",
    "arm_flags_source",
    "arm_description",
    "arm_label",
    "unit_label",
    "unit_key",
    "arm_stable",
    "seed_runs",
    "seed_window_means",
    "seed_task_types",
    "label_a",
    "label_b",
    "total_steps_recorded",
}
READERS = [
    *sorted((ROOT / "ccpo_cli" / "report").glob("*.py")),
    *sorted((ROOT / "ccpo_cli" / "cards").glob("*.py")),
    ROOT / "ccpo_cli" / "cli" / "compare.py",
    ROOT / "ccpo_cli" / "cli" / "matrix.py",
    ROOT / "ccpo_cli" / "experiments" / "matrix.py",
]
WRITERS = {"comparison.py"}


def _string_reads(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            key = node.slice.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            key = node.args[0].value
        if isinstance(key, str) and key in DOCUMENT_KEYS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} reads [{key!r}]")
    return found


def test_no_reader_of_the_comparison_subscripts_its_document_keys():
    reads = [line for path in READERS if path.name not in WRITERS for line in _string_reads(path)]
    assert reads == []
