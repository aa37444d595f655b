"""`ccpo publish` against a fake Hub on loopback (real huggingface_hub client, real HTTP)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from fakehub import CONFLICT_MESSAGE, FakeHub
from helpers_cards import seed_card_db
from helpers_hub import HUB_0X, TOKEN, started_with
from huggingface_hub import ModelCard, constants
from typer.testing import CliRunner

from ccpo_cli import store
from ccpo_cli.cli.app import app
from ccpo_cli.hub_access import resolve_token
from ccpo_cli.hub_plan import resolve_endpoint

REPO = "tester/ccpo-alfworld-qwen2.5-7b-return-hard"


@pytest.fixture
def db_path(tmp_path):
    path = tmp_path / "runs.db"
    seed_card_db(path)
    return path


def publish(db_path: Path, hub: FakeHub | None, staging: Path, *args: str, token: str = TOKEN):
    endpoint = hub.endpoint if hub else "http://127.0.0.1:9"
    command = [
        "--db",
        str(db_path),
        "publish",
        "--run",
        "return-hard",
        "--repo",
        REPO,
        "--endpoint",
        endpoint,
        "--staging",
        str(staging),
        *args,
    ]
    if token:
        command += ["--token", token]
    return CliRunner().invoke(app, command)


def head_files(hub: FakeHub, branch: str = "main") -> dict[str, bytes]:
    return hub.repos[REPO].branches[branch][-1].files


def test_publish_creates_a_private_repo_and_one_commit(db_path, hub, tmp_path):
    result = publish(db_path, hub, tmp_path / "staging")
    assert result.exit_code == 0, result.output
    create = hub.requests_to("/api/repos/create", "POST")
    assert len(create) == 1 and hub.repos[REPO].private
    body = json.loads(create[0].body)  # 1.x sends "visibility", 0.3x "private"
    assert body.get("visibility", "private" if body.get("private") else "public") == "private"
    assert hub.repos[REPO].private
    commits = hub.commits_by_ccpo(REPO)
    assert len(commits) == 1
    assert set(commits[0]["files"]) == {
        "README.md",
        "results/ccpo_summary.json",
        "results/learning_curve.png",
    }
    assert commits[0]["header"]["parentCommit"] == hub.repos[REPO].branches["main"][0].oid
    assert all(
        r.authorization == f"Bearer {TOKEN}" for r in hub.requests_to(f"/api/models/{REPO}/commit/")
    )
    card = ModelCard(head_files(hub)["README.md"].decode())
    assert card.data.eval_results[0].metric_value == 83.5
    summary = json.loads(head_files(hub)["results/ccpo_summary.json"])
    assert summary["window"]["n"] == 10 and len(summary["window"]["evaluation_ids"]) == 10
    [publication] = store.run_publications(store.open_db(db_path), "return-hard")
    assert publication["repo_id"] == REPO and publication["status"] == "interim"
    assert publication["commit_id"] == hub.repos[REPO].branches["main"][-1].oid
    import hashlib

    assert publication["card_hash"] == hashlib.sha256(head_files(hub)["README.md"]).hexdigest()


def test_publish_into_an_existing_repo_replaces_its_ccpo_card(db_path, hub, tmp_path):
    assert publish(db_path, hub, tmp_path / "first").exit_code == 0
    db = store.open_db(db_path)
    store.record_evaluation(
        db, "return-hard", 120, success_rate=87.5, episodes=128, temperature=0.4
    )
    store.update_run_state(db, "return-hard", last_step=124)
    result = publish(db_path, hub, tmp_path / "second", "--json")
    assert result.exit_code == 0, result.output
    assert (
        len(hub.requests_to("/api/repos/create", "POST")) == 2
    )  # the second answered 409 and was accepted
    assert len(hub.commits_by_ccpo(REPO)) == 2
    readme = head_files(hub)["README.md"].decode()
    assert "step 124 of 150" in readme and "step 119 of 150" not in readme
    assert len(store.run_publications(db, "return-hard")) == 2


def test_hand_edited_readme_keeps_the_edits(db_path, hub, tmp_path):
    assert publish(db_path, hub, tmp_path / "first").exit_code == 0
    readme = head_files(hub)["README.md"].decode()
    edited = readme.replace(
        "<!-- ccpo:begin usage -->", "Thanks to the lab for the GPUs.\n\n<!-- ccpo:begin usage -->"
    )
    # A key ccpo does not write (ccpo writes `language` itself since issue 32).
    edited = edited.replace(
        "library_name: transformers", "library_name: transformers\nthumbnail: t.png"
    )
    edited = edited.replace("| held-out success | 83.5% |", "| held-out success | 12.0% |")
    hub.push_external_commit(REPO, {"README.md": edited.encode()})
    result = publish(db_path, hub, tmp_path / "second", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["readme_merged"] is True
    merged = head_files(hub)["README.md"].decode()
    assert "Thanks to the lab for the GPUs." in merged
    assert "| held-out success | 83.5% |" in merged and "12.0%" not in merged
    assert ModelCard(merged).data.thumbnail == "t.png"


@pytest.mark.slow
def test_hand_written_readme_without_ccpo_regions_is_not_overwritten(db_path, hub, tmp_path):
    original = b"---\nlicense: apache-2.0\n---\n# My model\n\nWritten by hand.\n"
    hub.seed_repo(REPO, {"README.md": original}, private=True)
    result = publish(db_path, hub, tmp_path / "staging")
    assert result.exit_code == 3
    assert "refusing to overwrite" in result.output
    assert hub.commits_by_ccpo(REPO) == []
    assert head_files(hub)["README.md"] == original


@pytest.mark.slow
def test_a_concurrent_edit_is_merged_after_reading_the_head_again(db_path, hub, tmp_path):
    """412 (issue 20): ccpo re-reads the head and re-renders the card only; the edit survives."""
    assert publish(db_path, hub, tmp_path / "first").exit_code == 0
    hub.before_next_commit = lambda repo: hub.push_external_commit(
        REPO, {"NOTES.md": b"edited meanwhile\n"}
    )
    result = publish(db_path, hub, tmp_path / "second", "--json")
    assert result.exit_code == 0, result.output
    assert head_files(hub)["NOTES.md"] == b"edited meanwhile\n"
    history = hub.history(REPO)
    assert history[-2].message == "edit on the website" and history[-1].message.startswith(
        "ccpo: interim card"
    )
    card_commits = hub.commits_by_ccpo(REPO)
    assert (
        len(card_commits) == 3
    )  # first publish, the refused one, the one after reading the head again
    assert card_commits[-1]["header"]["parentCommit"] == history[-2].oid
    assert len(store.run_publications(store.open_db(db_path), "return-hard")) == 2


@pytest.mark.slow
def test_a_repository_that_keeps_changing_ends_in_exit_4_and_is_not_overwritten(
    db_path, hub, tmp_path
):
    assert publish(db_path, hub, tmp_path / "first").exit_code == 0
    before = hub.history(REPO)
    hub.inject(
        "status", method="POST", path="/commit/", status=412, times=5, message=CONFLICT_MESSAGE
    )
    result = publish(db_path, hub, tmp_path / "second")
    assert result.exit_code == 4
    assert "412" in result.output and "nothing was overwritten" in result.output
    assert "Traceback" not in result.output
    assert hub.history(REPO) == before
    assert len(store.run_publications(store.open_db(db_path), "return-hard")) == 1


def test_publish_to_a_branch_leaves_main_alone(db_path, hub, tmp_path):
    result = publish(db_path, hub, tmp_path / "staging", "--revision", "interim")
    assert result.exit_code == 0, result.output
    assert hub.requests_to(f"/api/models/{REPO}/branch/interim", "POST")
    assert "README.md" in head_files(hub, "interim")
    assert "README.md" not in head_files(hub, "main")
    [publication] = store.run_publications(store.open_db(db_path), "return-hard")
    assert publication["revision"] == "interim"


def make_checkpoint(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "qwen2"}\n')
    (folder / "model.safetensors").write_bytes(bytes(range(256)) * 40)
    (folder / "sub" / "tokenizer.json").write_text("{}\n")
    (folder / ".cache").mkdir()
    (folder / ".cache" / "skip.lock").write_text("x")
    return folder


def test_checkpoint_is_uploaded_then_verified(db_path, hub, tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    result = publish(db_path, hub, tmp_path / "staging", "--checkpoint", str(checkpoint), "--json")
    assert result.exit_code == 0, result.output
    commits = hub.commits_by_ccpo(REPO)
    assert [set(c["files"]) for c in commits] == [
        {"config.json", "model.safetensors", "sub/tokenizer.json"},
        {"README.md", "results/ccpo_summary.json", "results/learning_curve.png"},
    ]
    document = json.loads(result.stdout)
    assert (
        document["checkpoint"]["verified_files"] == 3
        and document["checkpoint"]["verified_by"] == "sha256"
    )
    assert document["checkpoint"]["bytes"] == 10240 + len('{"model_type": "qwen2"}\n') + 3
    listed = [
        r for r in hub.requests_to(f"/api/models/{REPO}/revision/", "GET") if "blobs" in r.query
    ]
    assert [value.lower() for value in listed[0].query["blobs"]] == ["true"]  # 0.3x sends "True"
    weights_commit = hub.history(REPO)[-2].oid
    assert document["checkpoint"]["commit_id"] == weights_commit and hub.repos[REPO].tags == {
        "step-115": weights_commit
    }
    summary = json.loads(head_files(hub)["results/ccpo_summary.json"])
    assert summary["weights"] == {
        "repo_id": REPO,
        "commit": weights_commit,
        "revision": "step-115",
        "step": 115,
    }
    # The card itself cites the weights it describes, and its snippet loads exactly them.
    readme = (
        head_files(hub)["README.md"].decode()
        if isinstance(head_files(hub)["README.md"], bytes)
        else head_files(hub)["README.md"]
    )
    assert f"(step 115, revision `step-115`, commit `{weights_commit[:12]}`)" in readme
    assert 'revision = "step-115"' in readme
    [publication] = store.run_publications(store.open_db(db_path), "return-hard")
    assert publication["checkpoint_step"] == 115


def test_checkpoint_verification_is_by_sha256_not_only_size(db_path, hub, tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    hub.corrupt_paths = {"model.safetensors"}
    result = publish(db_path, hub, tmp_path / "staging", "--checkpoint", str(checkpoint))
    assert result.exit_code == 4
    assert "sha256 differs: model.safetensors" in result.output
    assert len(hub.commits_by_ccpo(REPO)) == 1 and hub.repos[REPO].tags == {}


def test_checkpoint_verification_catches_a_broken_upload(db_path, hub, tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    hub.truncate_paths = {"model.safetensors"}
    result = publish(db_path, hub, tmp_path / "staging", "--checkpoint", str(checkpoint))
    assert result.exit_code == 4
    assert "verification failed" in result.output and "model.safetensors" in result.output
    assert len(hub.commits_by_ccpo(REPO)) == 1  # the card describing it was not committed
    assert store.run_publications(store.open_db(db_path), "return-hard") == []


def test_token_is_never_printed_logged_or_stored(db_path, hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    staging = tmp_path / "staging"
    ok = publish(db_path, hub, staging, "--json")
    refused = publish(db_path, hub, tmp_path / "other", token="hf_wrong_token_4242")
    assert ok.exit_code == 0 and refused.exit_code == 4
    assert "refused the token" in refused.output
    for secret, result in ((TOKEN, ok), ("hf_wrong_token_4242", refused)):
        assert secret not in result.output
        assert secret not in caplog.text
    written = [p.read_bytes() for p in staging.rglob("*") if p.is_file()]
    assert written and not any(TOKEN.encode() in content for content in written)
    db = store.open_db(db_path)
    for table in db.table_names():
        assert TOKEN not in json.dumps(list(db[table].rows), default=str)
    assert all(TOKEN.encode() not in content for content in head_files(hub).values())


def test_token_resolution_order(monkeypatch, hub_env):
    monkeypatch.setenv("HF_TOKEN", "from-env")
    assert resolve_token("from-option") == "from-option"
    assert resolve_token(None) == "from-env"
    monkeypatch.delenv("HF_TOKEN")
    token_file = Path(hub_env) / "hf-home" / "token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text("from-saved-login")
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(token_file))
    assert resolve_token(None) == "from-saved-login"
    monkeypatch.setenv("HF_ENDPOINT", "http://mirror.example/")
    assert resolve_endpoint(None) == "http://mirror.example"
    assert resolve_endpoint("http://127.0.0.1:1") == "http://127.0.0.1:1"


def test_dry_run_writes_the_plan_and_opens_no_socket(db_path, hub_env, tmp_path, no_sockets):
    staging = tmp_path / "staging"
    result = publish(db_path, None, staging, "--dry-run", "--json", token="")
    assert result.exit_code == 0, result.output
    assert no_sockets == []
    plan = json.loads(result.stdout)
    assert plan["dry_run"] is True and plan["private"] is True
    [card_commit] = plan["commits"]
    assert [f["path_in_repo"] for f in card_commit["files"]] == [
        "README.md",
        "results/ccpo_summary.json",
        "results/learning_curve.png",
    ]
    assert all(
        f["size"] == (staging / f["path_in_repo"]).stat().st_size for f in card_commit["files"]
    )
    assert json.loads((staging / "commit_plan.json").read_text())["card_hash"] == plan["card_hash"]
    assert store.run_publications(store.open_db(db_path), "return-hard") == []


@pytest.mark.slow
def test_unreachable_hub_is_exit_4(db_path, hub_env, loopback_only, tmp_path, monkeypatch):
    started_with(monkeypatch, "http://127.0.0.1:9")
    result = publish(db_path, None, tmp_path / "staging")
    assert result.exit_code == 4
    assert "unreachable" in result.output and "Traceback" not in result.output


def test_missing_token_is_exit_4_with_a_hint(db_path, hub, tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(tmp_path / "no-token-here"))
    result = publish(db_path, hub, tmp_path / "staging", token="")
    assert result.exit_code == 4 and "HF_TOKEN" in result.output
    assert hub.requests == []


def test_bad_repo_id_is_exit_3(db_path, hub_env, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(db_path),
            "publish",
            "--run",
            "return-hard",
            "--repo",
            "not a repo",
            "--dry-run",
            "--staging",
            str(tmp_path / "s"),
        ],
    )
    assert result.exit_code == 3 and "owner/name" in result.output


@pytest.mark.parametrize("flag", [None, "--public"])
def test_a_final_card_is_private_too_unless_public_is_asked(hub, tmp_path, flag):
    """Issue 20, item 5: private by default, final cards included; the final commit is tagged."""
    from helpers_cards import add_run

    path = tmp_path / "done.db"
    add_run(
        store.open_db(path),
        "return-hard",
        "return-hard",
        mean=85.0,
        sd=4.0,
        n=10,
        best=92.0,
        last_step=150,
    )
    result = publish(
        path, hub, tmp_path / "staging", "--status", "final", *([flag] if flag else [])
    )
    assert result.exit_code == 0, result.output
    [create] = hub.requests_to("/api/repos/create", "POST")
    body = json.loads(create.body)  # 1.x sends "visibility", 0.3x "private"
    wanted = "public" if flag else "private"
    assert body.get("visibility", "private" if body.get("private") else "public") == wanted
    assert hub.repos[REPO].private is (flag is None)
    card = ModelCard(head_files(hub)["README.md"].decode())
    assert "interim" not in card.data.tags and "Final." in card.text
    assert hub.repos[REPO].tags == {"final": hub.history(REPO)[-1].oid}
    [publication] = store.run_publications(store.open_db(path), "return-hard")
    assert publication["status"] == "final"


@pytest.mark.slow
def test_an_existing_public_repository_is_refused_unless_public_is_asked(db_path, hub, tmp_path):
    hub.seed_repo(REPO, private=False)
    refused = publish(db_path, hub, tmp_path / "staging")
    assert (
        refused.exit_code == 3
        and "is public on the Hub" in refused.stderr
        and "--public" in refused.stderr
    )
    assert hub.commits_by_ccpo(REPO) == [] and hub.repos[REPO].private is False
    result = publish(db_path, hub, tmp_path / "staging2", "--public", "--json")
    assert result.exit_code == 0, result.output
    visibility = json.loads(result.stdout)["visibility"]
    assert visibility["private"] is False and visibility["requested_private"] is False


@pytest.mark.slow
def test_an_existing_private_repository_asked_public_keeps_its_visibility_and_ccpo_says_so(
    db_path, hub, tmp_path
):
    hub.seed_repo(REPO, private=True)
    result = publish(db_path, hub, tmp_path / "staging", "--public", "--json")
    assert result.exit_code == 0, result.output
    assert hub.repos[REPO].private is True
    assert (
        "private on the Hub, not public as asked"
        in json.loads(result.stdout)["visibility"]["visibility_note"]
    )


def test_an_endpoint_huggingface_hub_0x_cannot_use_is_refused_before_sending(
    db_path, hub_env, tmp_path
):
    from ccpo_cli.hub_repo import check_endpoint_supported

    check_endpoint_supported(
        constants.ENDPOINT
    )  # the address huggingface_hub was started with: fine on every line
    if HUB_0X:
        result = publish(db_path, None, tmp_path / "staging")
        assert result.exit_code == 3 and "HF_ENDPOINT=http://127.0.0.1:9" in result.stderr
    else:
        check_endpoint_supported(
            "http://127.0.0.1:9"
        )  # 1.x parses URLs against the client's endpoint
