"""A run's arm is written in one typed form: an `Arm` or an `ExternalArm`, never a loose name.

`ensure_run` records a typed `Arm` (name, fingerprint, resolved flags, overrides) or an
`ExternalArm` from store/identity.py (name and fingerprint only), exactly as the columns were
recorded before the arm was typed; a bare string is a programming error (TypeError naming both
accepted types), and no module of ccpo passes one or a loose `arm_fingerprint`.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from helpers_store import acceptance_rows, write_ccpo

from ccpo_cli.arms import load_arm
from ccpo_cli.store import ensure_run, open_db
from ccpo_cli.store.identity import ExternalArm

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "ccpo_cli"
ARM_COLUMNS = ("arm", "arm_fingerprint", "arm_flags", "arm_overrides")


def _columns(db, run: str) -> dict:
    row = db.execute(f"SELECT {', '.join(ARM_COLUMNS)} FROM runs WHERE name = ?", [run]).fetchone()
    return dict(zip(ARM_COLUMNS, row))


def test_a_typed_arm_records_its_name_fingerprint_flags_and_overrides(tmp_path):
    db = open_db(tmp_path / "runs.db")
    arm = load_arm("return-hard", {"rho": "0.59"})
    ensure_run(db, "typed", arm=arm)
    # The columns as they were computed before the arm was typed.
    assert _columns(db, "typed") == {
        "arm": arm.name,
        "arm_fingerprint": arm.fingerprint,
        "arm_flags": json.dumps(arm.flags(), sort_keys=True),
        "arm_overrides": json.dumps(dict(arm.overrides), sort_keys=True),
    }


def test_an_external_arm_records_its_name_and_fingerprint_only(tmp_path):
    db = open_db(tmp_path / "runs.db")
    ensure_run(db, "named", arm=ExternalArm("my-own-arm", "1" * 64))
    ensure_run(db, "unfingerprinted", arm=ExternalArm("grpo"))
    assert _columns(db, "named") == {
        "arm": "my-own-arm",
        "arm_fingerprint": "1" * 64,
        "arm_flags": None,
        "arm_overrides": None,
    }
    assert _columns(db, "unfingerprinted") == dict.fromkeys(ARM_COLUMNS) | {"arm": "grpo"}


def test_ingest_with_arm_records_the_arm_files_name_and_fingerprint_and_no_flags(tmp_path):
    from typer.testing import CliRunner

    from ccpo_cli.cli.app import app

    metrics = write_ccpo(acceptance_rows(), tmp_path / "m.jsonl")
    db_path = tmp_path / "runs.db"
    result = CliRunner().invoke(
        app,
        ["--db", str(db_path), "ingest", str(metrics), "--run", "rh", "--arm", "return-hard"],
    )
    assert result.exit_code == 0, result.output
    assert _columns(open_db(db_path), "rh") == {
        "arm": "return-hard",
        "arm_fingerprint": load_arm("return-hard").fingerprint,
        "arm_flags": None,
        "arm_overrides": None,
    }


def test_a_bare_name_is_refused_naming_both_accepted_types(tmp_path):
    db = open_db(tmp_path / "runs.db")
    with pytest.raises(TypeError, match=r"an Arm .* or an ExternalArm"):
        ensure_run(db, "loose", arm="grpo")  # type: ignore[arg-type]
    assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


@pytest.mark.parametrize("fields", [("",), (None,), ("grpo", "")])
def test_an_external_arm_needs_a_name_and_a_real_fingerprint(fields):
    with pytest.raises(TypeError):
        ExternalArm(*fields)


def _is_loose(keyword: ast.keyword) -> bool:
    """`arm_fingerprint=` anything, or `arm=` a string literal (plain or f-string)."""
    if keyword.arg == "arm_fingerprint":
        return True
    value = keyword.value
    return keyword.arg == "arm" and (
        isinstance(value, ast.JoinedStr)
        or (isinstance(value, ast.Constant) and isinstance(value.value, str))
    )


def _loose_arm_calls(source: str) -> list[int]:
    """The lines of the `ensure_run(` / `ingest_file(` calls in `source` that pass a loose arm."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name in ("ensure_run", "ingest_file") and any(map(_is_loose, node.keywords)):
            lines.append(node.lineno)
    return lines


def test_no_module_passes_a_loose_arm_name_or_fingerprint():
    loose = [
        f"{path.relative_to(PACKAGE_DIR)}:{line}"
        for path in sorted(PACKAGE_DIR.rglob("*.py"))
        for line in _loose_arm_calls(path.read_text(encoding="utf-8"))
    ]
    assert loose == [], loose


def test_the_static_check_sees_a_loose_call():
    source = (
        'ensure_run(db, "r", arm="grpo")\n'
        'store.ingest_file(db, p, "r", arm_fingerprint="f")\n'
        'ensure_run(db, "r", arm=f"{name}")\n'
        'ensure_run(db, "r", arm=ExternalArm("grpo"), seed=0)\n'
        "ensure_run(db, 'r', arm=None)\n"
    )
    assert _loose_arm_calls(source) == [1, 2, 3]
