"""Matrix designs as named objects (configs/designs/, ccpo_cli/experiments/designs.py): every
knob shown, options override one knob each, every run records its design and window, and a
design run through the CLI records exactly what the library records."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.errors import InvalidInput, UsageError
from ccpo_cli.experiments.designs import Design, list_designs, load_design
from ccpo_cli.experiments.matrix import (
    DEFAULT_STEPS,
    DEFAULT_WARM_START,
    DEFAULT_WINDOW_EVALUATIONS,
    matrix_of_design,
    run_matrix,
)
from ccpo_cli.store import get_run, open_db, run_evaluations

runner = CliRunner()
TINY_OPTIONS = dict(
    steps=3, warm_start=1, tasks=2, group=2, turn_limit=6, eval_turn_limit=6, eval_games=4
)


def test_the_shipped_designs_and_the_matrix_defaults_are_the_control_design():
    assert {"control", "early-fork", "search-rooms"} <= set(list_designs())
    control = load_design("control")
    assert (control.warm_start, control.steps, control.evaluations) == (
        DEFAULT_WARM_START,
        DEFAULT_STEPS,
        (16,),
    )
    assert len(control.compared_evaluations) == DEFAULT_WINDOW_EVALUATIONS
    early = load_design("early-fork")
    assert (early.warm_start, early.steps, early.compared_evaluations) == (2, 12, (12,))
    assert load_design("search-rooms").room == "large"


def test_options_override_one_knob_each_and_rename_the_design():
    control = load_design("control")
    assert control.with_options() is control
    wider = control.with_options(eval_from=12)
    assert wider.evaluations == (12, 14, 16) and wider.compared_evaluations == (16,)
    assert wider.name == "control+eval_from=12"
    longer = control.with_options(steps=18)
    assert longer.compared_evaluations == (18,) and longer.warm_start == 10
    assert control.with_options(turn_limit=30, room="large").knobs()["turn_limit"] == 30
    with pytest.raises(UsageError):
        control.with_options(window_start=4)  # before the warm start ends
    with pytest.raises(UsageError):
        control.with_options(room="huge")


def test_a_design_file_is_checked_before_anything_trains():
    with pytest.raises(InvalidInput):
        Design("x", "", warm_start=5, steps=4, window_start=4, eval_from=4)
    with pytest.raises(InvalidInput):
        Design("x", "", warm_start=0, steps=4, window_start=2, eval_from=3)
    with pytest.raises(UsageError):
        load_design("no-such-design")


def test_matrix_help_names_every_knob_and_dry_run_prints_them_without_writing(tmp_path):
    shown = runner.invoke(app, ["matrix", "--help"], terminal_width=200)
    assert shown.exit_code == 0
    for option in (
        "--design",
        "--warm-start",
        "--steps",
        "--eval-from",
        "--eval-every",
        "--window-start",
        "--tasks",
        "--group",
        "--turn-limit",
        "--eval-turn-limit",
        "--eval-games",
        "--room",
    ):
        assert option in shown.stdout
    db = tmp_path / "runs.db"
    dry = runner.invoke(
        app,
        [
            "--db",
            str(db),
            "matrix",
            "--design",
            "early-fork",
            "--arms",
            "gigpo,grpo",
            "--seeds",
            "0-1",
            "--dry-run",
        ],
    )
    assert dry.exit_code == 0, dry.output
    document = json.loads(dry.stdout)
    assert document["design"]["name"] == "early-fork"
    assert set(load_design("early-fork").knobs()) <= set(document["design"])
    assert [block["warm_up_trained_by"] for block in document["blocks"]] == ["gigpo", "grpo"]
    assert not db.exists()


@pytest.mark.slow
def test_a_design_through_the_cli_records_what_the_library_records(tmp_path):
    arguments = [
        "--design",
        "early-fork",
        "--arms",
        "gigpo,gigpo-perm",
        "--variant",
        "gigpo-perm=gigpo:step_permute=1",
        "--seeds",
        "0",
        "--steps",
        "3",
        "--warm-start",
        "1",
        "--tasks",
        "2",
        "--group",
        "2",
        "--turn-limit",
        "6",
        "--eval-turn-limit",
        "6",
        "--eval-games",
        "4",
        "--workers",
        "0",
        "--prefix",
        "d",
        "--json",
    ]
    cli_db = tmp_path / "cli" / "runs.db"
    cli_db.parent.mkdir()
    result = runner.invoke(app, ["--db", str(cli_db), "matrix", *arguments])
    assert result.exit_code == 0, result.output

    from ccpo_cli.experiments.matrix import parse_variant

    lib_db = tmp_path / "lib" / "runs.db"
    lib_db.parent.mkdir()
    testbed = load_design("early-fork").with_options(**TINY_OPTIONS)
    run_matrix(
        lib_db,
        matrix_of_design(
            testbed,
            ("gigpo", "gigpo-perm"),
            (0,),
            30.0,
            prefix="d",
            variants=(parse_variant("gigpo-perm=gigpo:step_permute=1"),),
            workers=0,
        ),
    )
    for name in ("d-gigpo-seed0", "d-gigpo-perm-seed0"):
        via_cli, via_library = get_run(open_db(cli_db), name), get_run(open_db(lib_db), name)
        assert (
            via_cli["config"]["train"]["design"]
            == testbed.name
            == via_library["config"]["train"]["design"]
        )
        assert via_cli["config"]["train"]["window_start"] == 3
        assert via_cli["arm_fingerprint"] == via_library["arm_fingerprint"]
        rates = [
            (e["step"], e["success_rate"], e["episodes"])
            for e in run_evaluations(open_db(cli_db), name)
        ]
        assert rates == [
            (e["step"], e["success_rate"], e["episodes"])
            for e in run_evaluations(open_db(lib_db), name)
        ]
        assert [step for step, _, _ in rates] == [3]


HIDE_TORCH = """
import sys
class HideTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError("torch is hidden in this test")
sys.meta_path.insert(0, HideTorch())
from ccpo_cli.cli.app import main
sys.argv = ["ccpo"] + sys.argv[1:]
main()
"""


def test_a_matrix_plan_and_a_run_recipe_need_no_torch(tmp_path):
    # The training recipe (TrainConfig, UpdateConfig) is torch-free and the backend package loads
    # its torch parts on first use, so a dry run works where the 'local' extra is missing.
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-c",
            HIDE_TORCH,
            "--db",
            str(tmp_path / "runs.db"),
            "matrix",
            "--design",
            "early-fork",
            "--arms",
            "gigpo,grpo",
            "--seeds",
            "0",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["design"]["name"] == "early-fork"
    assert "Traceback" not in done.stderr


def test_the_search_sized_rooms_ship_their_own_pool_and_panel():
    from ccpo_cli.envs.games import (
        HELDOUT_MANIFEST,
        POOL_MANIFEST,
        load_manifest,
        manifest_name,
        manifest_path,
    )

    pool = load_manifest(manifest_path(manifest_name(POOL_MANIFEST, "large")))
    panel = load_manifest(manifest_path(manifest_name(HELDOUT_MANIFEST, "large")))
    assert (pool["room"], pool["n"], len(pool["games"])) == ("large", 600, 600)
    assert (panel["room"], panel["n"], len(panel["games"])) == ("large", 128, 128)
    assert not {game["game_id"] for game in pool["games"]} & {
        game["game_id"] for game in panel["games"]
    }
    small = load_manifest(manifest_path(HELDOUT_MANIFEST))
    # Larger rooms: longer planner walkthroughs on average than the small-room panel's.
    mean = lambda games: sum(len(game["walkthrough"]) for game in games) / len(games)  # noqa: E731
    assert mean(panel["games"]) > mean(small["games"])


def test_a_shorter_run_with_its_own_warm_start_moves_the_window_to_its_last_step():
    control = load_design("control")
    short = control.with_options(steps=3, warm_start=0, eval_every=1)
    assert (short.window_start, short.eval_from, short.evaluations) == (3, 3, (3,))
