"""Names are data, writes never clobber, the lint is precise.

Asked for in issue 12, cases 2, 3, 10, 12, 13.
"""

from __future__ import annotations

import pytest
from helpers_cards import seed_card_db
from helpers_hostile import assert_refused, db_state, invoke

from ccpo_cli.cards.fences import regions
from ccpo_cli.cards.lint import lint_card
from ccpo_cli.names import check_repo_id, check_run_name

BAD_RUN_NAMES = [
    "../../../escape-target/x",
    "/tmp/abs",
    "a\nb",
    "a/b",
    "x" * 300,
    "..",
    "a..b",
    "-x",
    ".hidden",
    "",
]
BAD_REPO_IDS = [
    "me/name\n",
    "me/a--b",
    "me/a..b",
    "me/x.git",
    "name-only",
    "a/b/c",
    "me/x)](http://evil",
]


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "runs.db"
    seed_card_db(path)
    return path


@pytest.mark.parametrize("name", BAD_RUN_NAMES)
def test_run_names_that_are_paths_or_junk_are_refused(name):
    with pytest.raises(Exception) as error:
        check_run_name(name)
    assert getattr(error.value, "exit_code", None) == 3


def test_good_names_pass():
    for name in ("return-hard", "rh-7b.seed0", "A_b-9", "x" * 100):
        assert check_run_name(name) == name
    assert check_repo_id("tester/ccpo-alfworld-qwen2.5-7b") == "tester/ccpo-alfworld-qwen2.5-7b"


def _files(root):
    return sorted(p for p in root.rglob("*") if not p.name.startswith("runs.db"))


@pytest.mark.parametrize("name", ["../../../escape-target/x", "x" * 300, "a\nb", "/abs/x"])
def test_card_with_a_path_like_run_name_writes_nothing(db_path, tmp_path, monkeypatch, name):
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    before = _files(tmp_path)
    assert_refused(invoke("--db", db_path, "card", "--run", name), 3, "--run")
    assert _files(tmp_path) == before


@pytest.mark.parametrize("name", ["../../x", "x" * 300])
def test_publish_dry_run_with_a_path_like_run_name_is_refused(db_path, tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    result = invoke("--db", db_path, "publish", "--run", name, "--repo", "me/ok", "--dry-run")
    assert_refused(result, 3, "--run")
    assert not list(tmp_path.glob("ccpo-publish-*"))


@pytest.mark.parametrize("name", ["../escape", "x" * 300])
def test_eval_with_a_path_like_run_name_records_nothing(db_path, name):
    before = db_state(db_path)
    assert_refused(invoke("--db", db_path, "eval", "--run", name, "--agent", "oracle"), 3, "--run")
    assert db_state(db_path) == before


@pytest.mark.parametrize("name", ["../escape", "a\nb"])
def test_ingest_and_train_with_a_path_like_run_name_touch_nothing(db_path, tmp_path, name):
    metrics = tmp_path / "m.jsonl"
    metrics.write_text('{"step": 1, "val/success_rate": 0.5}\n')
    before = db_state(db_path)
    assert_refused(invoke("--db", db_path, "ingest", metrics, "--run", name), 3, "--run")
    assert db_state(db_path) == before
    assert_refused(
        invoke("--db", tmp_path / "new.db", "ingest", metrics, "--run", name), 3, "--run"
    )
    assert not (tmp_path / "new.db").exists()
    assert_refused(
        invoke("--db", db_path, "train", "--arm", "return-hard", "--run", name, "--dry-run"),
        3,
        "--run",
    )
    assert db_state(db_path) == before


def test_default_folder_that_resolves_elsewhere_is_refused(db_path, tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    work.mkdir()
    elsewhere.mkdir()
    (work / "ccpo-card-return-hard").symlink_to(elsewhere)
    monkeypatch.chdir(work)
    assert_refused(invoke("--db", db_path, "card", "--run", "return-hard"), 3, "outside")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("repo", BAD_REPO_IDS)
def test_bad_repo_ids_fail_the_dry_run_with_exit_3(db_path, tmp_path, repo):
    result = invoke(
        "--db",
        db_path,
        "publish",
        "--run",
        "return-hard",
        "--repo",
        repo,
        "--dry-run",
        "--staging",
        tmp_path / "s",
    )
    assert_refused(result, 3, "--repo")
    assert not (tmp_path / "s").exists()


def test_card_repo_id_cannot_inject_markdown(db_path, tmp_path):
    result = invoke(
        "--db",
        db_path,
        "card",
        "--run",
        "return-hard",
        "--repo-id",
        "me/x)](http://evil",
        "--output",
        tmp_path / "card" / "README.md",
    )
    assert_refused(result, 3, "--repo-id")
    assert not (tmp_path / "card").exists()


# --- case 3: writes never clobber ------------------------------------------------------


def test_card_output_onto_a_hand_written_file_is_refused_unless_forced(db_path, tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# my own notes\n")
    result = invoke("--db", db_path, "card", "--run", "return-hard", "--output", readme)
    assert_refused(result, 3, str(readme), "--force")
    assert readme.read_text() == "# my own notes\n" and not (tmp_path / "results").exists()
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me\n")
    assert_refused(
        invoke("--db", db_path, "card", "--run", "return-hard", "--output", notes), 3, "--force"
    )
    assert notes.read_text() == "keep me\n"
    forced = invoke("--db", db_path, "card", "--run", "return-hard", "--output", readme, "--force")
    assert forced.exit_code == 0, forced.output
    assert "ccpo:begin" in readme.read_text()


def test_card_does_not_clobber_results_beside_a_new_readme(db_path, tmp_path):
    (tmp_path / "results").mkdir()
    mine = tmp_path / "results" / "ccpo_summary.json"
    mine.write_text('{"mine": true}\n')
    result = invoke(
        "--db", db_path, "card", "--run", "return-hard", "--output", tmp_path / "README.md"
    )
    assert_refused(result, 3, "ccpo_summary.json")
    assert mine.read_text() == '{"mine": true}\n' and not (tmp_path / "README.md").exists()


def test_a_readme_ccpo_wrote_is_re_rendered_inside_its_fences(db_path, tmp_path):
    readme = tmp_path / "README.md"
    assert (
        invoke("--db", db_path, "card", "--run", "return-hard", "--output", readme).exit_code == 0
    )
    original = readme.read_text()
    name, block = next(iter(regions(original).items()))
    stale = block.replace(block[block.index("-->") + 3 : block.rindex("<!--")], "\nSTALE NUMBERS\n")
    readme.write_text(
        original.replace(block, stale) + "\n## Notes by hand\n\nKept across renders.\n"
    )
    again = invoke("--db", db_path, "card", "--run", "return-hard", "--output", readme)
    assert again.exit_code == 0, again.output
    text = readme.read_text()
    assert "Kept across renders." in text and "STALE NUMBERS" not in text
    assert regions(text)[name] == block


# --- case 12: the lint's placeholder check ------------------------------------------------


def test_names_containing_none_or_todo_pass_the_card_lint(db_path, tmp_path):
    result = invoke(
        "--db",
        db_path,
        "card",
        "--run",
        "return-hard",
        "--repo-id",
        "tester/None-TODO-agent",
        "--output",
        tmp_path / "c" / "README.md",
    )
    assert result.exit_code == 0, result.output
    assert "None-TODO-agent" in (tmp_path / "c" / "README.md").read_text()


def test_real_placeholders_are_still_caught(db_path, tmp_path):
    assert (
        invoke(
            "--db", db_path, "card", "--run", "return-hard", "--output", tmp_path / "R.md"
        ).exit_code
        == 0
    )
    good = (tmp_path / "R.md").read_text()
    assert lint_card(good) == []
    for filler in ("| step | None |", "checkpoint: None", "TODO: write this", "(None)"):
        assert any("placeholder" in p for p in lint_card(good + f"\n{filler}\n")), filler


def test_publish_staging_onto_a_hand_written_readme_is_refused(db_path, tmp_path):
    staging = tmp_path / "mine"
    staging.mkdir()
    (staging / "README.md").write_text("# my project\n")
    result = invoke(
        "--db",
        db_path,
        "publish",
        "--run",
        "return-hard",
        "--repo",
        "me/ok",
        "--dry-run",
        "--staging",
        staging,
    )
    assert_refused(result, 3, "not written by ccpo", "--staging")
    assert (staging / "README.md").read_text() == "# my project\n"
    assert sorted(p.name for p in staging.iterdir()) == ["README.md"]
