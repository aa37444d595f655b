"""Input is normalised or refused before it is used: `--set` numbers are canonical before
fingerprinting (-0 is 0, an underflow is refused), seed lists take only ASCII digits, commas and
ranges, text from runs.db reaches the terminal printable, host labels stay unique, and
`--report-to` is checked in a `--dry-run`.

Asked for in issue 42, cases 9 and 10 (the local half).
"""

from __future__ import annotations

import pytest
from helpers_hostile import assert_refused, invoke

from ccpo_cli.arms import load_arm
from ccpo_cli.errors import InvalidInput
from ccpo_cli.names import HOST_LABEL, host_label
from ccpo_cli.seeds import parse_seeds
from ccpo_cli.store import ensure_run, open_db
from ccpo_cli.terminal_text import escape_control

HOSTILE = "\x1b[2J\x1b]0;owned\x07\u202eexe.txt"  # screen clear, title set, right-to-left override


@pytest.mark.parametrize("value", ["-0", "-0.0", "0e5", "-0e-3", "+0"])
def test_a_negative_zero_has_the_fingerprint_of_zero(value):
    assert load_arm("gigpo", {"edge_w": value}).fingerprint == (
        load_arm("gigpo", {"edge_w": "0"}).fingerprint
    )
    assert load_arm("gigpo", {"edge_w": value}).overrides == (("edge_w", 0.0),)


@pytest.mark.parametrize("value", ["1e-400", "1e-310", "-5e-324"])
def test_a_number_lost_to_underflow_is_refused(value):
    with pytest.raises(InvalidInput, match="too small"):
        load_arm("gigpo", {"rho": value})
    assert load_arm("gigpo", {"rho": "0e-400"}).rho == 0.0  # a zero written small is still 0


def test_set_underflow_is_refused_on_the_command_line_with_exit_3(tmp_path):
    result = invoke("--db", tmp_path / "runs.db", "arms", "show", "gigpo", "--set", "rho=1e-400")
    assert_refused(result, 3, "rho", "too small")


@pytest.mark.parametrize("text", ["0-2,,3", "1_000", "٣", "１", "0,1,", "²", "0x1", " 1 2", "1-"])
def test_seed_lists_take_ascii_digits_commas_and_ranges_only(text):
    with pytest.raises(InvalidInput):
        parse_seeds(text)


def test_seed_lists_still_read_the_documented_syntax():
    assert parse_seeds("0-2,5") == [0, 1, 2, 5]
    assert parse_seeds(" 3 , 4") == [3, 4]


def test_a_seed_of_a_thousand_digits_is_refused_without_a_traceback():
    with pytest.raises(InvalidInput):
        parse_seeds("9" * 5000)


def test_host_labels_outside_ascii_stay_unique():
    labels = {host_label(name) for name in ("ünï", "日本", "中国", "ïnü", "")}
    assert len(labels) == 5, labels
    for label in labels:
        assert HOST_LABEL.fullmatch(label)
    assert host_label("my_host") == "my-host"  # an ASCII host keeps the label it always had
    assert host_label("ünï") == host_label("ünï")


def test_bidirectional_and_terminal_controls_are_shown_escaped():
    shown = escape_control(HOSTILE)
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert "\\u202e" in shown


@pytest.fixture
def hostile_db(tmp_path):
    path = tmp_path / "runs.db"
    db = open_db(path)
    ensure_run(
        db,
        "r0",
        arm=load_arm("grpo"),
        seed=0,
        base_model="tiny" + HOSTILE,
        backend="local",
        total_steps=2,
        config={"train": {"note": HOSTILE}},
    )
    db.execute("UPDATE runs SET host = ? WHERE name = 'r0'", ["evil" + HOSTILE])
    return path


@pytest.mark.parametrize("command", [("runs", "list"), ("runs", "show", "r0")])
def test_runs_list_and_show_print_no_raw_terminal_control(hostile_db, command, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    result = invoke("--db", hostile_db, *command)
    assert result.exit_code == 0, result.output
    for control in ("\x1b", "\x07", "\u202e"):
        assert control not in result.stdout, (control, result.stdout)
        assert control not in result.stderr


def test_report_to_is_checked_in_a_dry_run(tmp_path):
    result = invoke(
        "--db", tmp_path / "runs.db", "train", "--arm", "grpo", "--run", "x", "--dry-run",
        "--report-to", "bogus",
    )  # fmt: skip
    assert_refused(result, 2, "--report-to")
