"""What `ccpo publish` takes from its user is checked before anything is sent (issue 42, cases
5 and 9): `--revision` is a valid git branch name, a published baseline is a percentage, and
`--checkpoint` is walked without following links that leave the folder (a dry run lists none of
them). Real SQLite, the loopback fake Hub, the CLI as a user runs it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_hostile import assert_refused
from test_publish_hub import REPO, make_checkpoint, publish

from ccpo_cli.benchmarks import _read_benchmark, benchmarks_dir
from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_plan import check_revision


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "runs.db"
    seed_card_db(path)
    return path


@pytest.mark.parametrize(
    "revision",
    [
        "",
        "a..b",
        "main.lock",
        "-x",
        "refs/heads/",
        "a b",
        "x\x1b[2J",
        "@",
        "a@{1}",
        ".hidden",
        "~1",
        "r" * 300,
    ],
)
def test_an_invalid_revision_is_exit_3_before_any_call(db_path, hub, tmp_path, revision):
    result = publish(db_path, hub, tmp_path / "staging", "--revision", revision)
    assert_refused(result, 3, "--revision", "not a valid git branch name")
    assert hub.requests == []


def test_an_invalid_revision_is_refused_by_follow_too(db_path, hub, tmp_path):
    from helpers_hostile import invoke
    from helpers_hub import TOKEN

    result = invoke(
        "--db",
        db_path,
        "publish",
        "--follow",
        "return-hard",
        "--repo",
        REPO,
        "--endpoint",
        hub.endpoint,
        "--token",
        TOKEN,
        "--once",
        "--revision",
        "a..b",
    )
    assert_refused(result, 3, "--revision")
    assert hub.requests == []


def test_valid_revisions_pass():
    for revision in ("main", "exp/ccpo-v2", "release-1.0", "refs/pr/1"):
        assert check_revision(revision) == revision


@pytest.mark.parametrize("value", ["140.0", "-3", ".nan", "true", "1e400"])
def test_an_absurd_published_baseline_is_refused(tmp_path, value):
    text = (benchmarks_dir() / "alfworld.yaml").read_text(encoding="utf-8")
    assert "success: 72.8," in text
    copy = tmp_path / "alfworld.yaml"
    copy.write_text(text.replace("success: 72.8,", f"success: {value},", 1), encoding="utf-8")
    with pytest.raises(InvalidInput, match="success"):
        _read_benchmark(copy)


def _leaky_checkpoint(tmp_path: Path) -> Path:
    folder = make_checkpoint(tmp_path / "ckpt")
    secret = tmp_path / "outside" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text("-----BEGIN PRIVATE KEY-----\n")
    (folder / "extra.bin").symlink_to(secret)
    (folder / "more").symlink_to(secret.parent, target_is_directory=True)
    return folder


def test_a_checkpoint_link_leaving_the_folder_is_refused_and_never_uploaded(db_path, hub, tmp_path):
    folder = _leaky_checkpoint(tmp_path)
    result = publish(db_path, hub, tmp_path / "staging", "--checkpoint", str(folder))
    assert_refused(result, 3, "symbolic link", "extra.bin")
    assert REPO not in hub.repos or all(
        b"PRIVATE KEY" not in content
        for commit in hub.history(REPO)
        for content in commit.files.values()
    )


def test_a_dry_run_does_not_list_a_link_leaving_the_folder(db_path, hub_env, tmp_path):
    folder = _leaky_checkpoint(tmp_path)
    result = publish(db_path, None, tmp_path / "staging", "--checkpoint", str(folder), "--dry-run")
    assert_refused(result, 3, "symbolic link")
    assert "id_rsa" not in result.stdout and "extra.bin" not in result.stdout


def test_a_link_inside_the_folder_is_its_file(db_path, hub_env, tmp_path):
    folder = make_checkpoint(tmp_path / "ckpt")
    (folder / "alias.json").symlink_to(folder / "config.json")
    (folder / "sub-again").symlink_to(folder / "sub", target_is_directory=True)
    from ccpo_cli.hub_plan import checkpoint_files

    assert sorted(checkpoint_files(folder)) == [
        "alias.json",
        "config.json",
        "model.safetensors",
        "sub/tokenizer.json",
    ]
