"""`ccpo eval --model <Hub id>`: the model comes from the Hub under ccpo's timeouts, and a Hub that
fails, refuses or never answers is exit 4 (remote), not exit 3 or a hang.

The Hub is the loopback fake (tests/fakehub.py) or a listener that never answers; the model is
the tiny Qwen2 built from a config in helpers_tiny_lm.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from fakehub import FakeHub
from helpers_hostile import assert_refused, invoke
from helpers_tiny_lm import save_tiny_lm
from test_hostile_hub import SilentListener

MODEL_REPO = "tester/tiny-alfworld-agent"


def point_hub_at(monkeypatch, endpoint: str, cache: Path) -> None:
    """Downloads read the Hub address and the cache from huggingface_hub's constants (HF_ENDPOINT
    and HF_HOME as they were at import). A fresh cache per test: with the model already cached,
    huggingface_hub falls back to the cached copy when the Hub does not answer."""
    import huggingface_hub.file_download
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))

    template = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
    monkeypatch.setattr(
        huggingface_hub.file_download, "HUGGINGFACE_CO_URL_TEMPLATE", template, raising=False
    )


@pytest.fixture(scope="module")
def games(tmp_path_factory) -> Path:
    from ccpo_cli.envs import generate_games

    folder = tmp_path_factory.mktemp("hub-model-games")
    generate_games(folder, "heldout", 1, seed=5)
    return folder


def eval_hub_model(tmp_path: Path, games: Path, repo_id: str = MODEL_REPO):
    return invoke(
        "--db",
        tmp_path / "runs.db",
        "--quiet",
        "eval",
        "--run",
        "from-hub",
        "--agent",
        "hf",
        "--model",
        repo_id,
        "--games",
        games,
        "--max-steps",
        "1",
        "--max-new-tokens",
        "4",
        "--workers",
        "0",
        "--json",
    )


def test_a_hub_model_is_downloaded_and_evaluated(
    hub_env, loopback_only, monkeypatch, tmp_path, games
):
    folder = save_tiny_lm(
        tmp_path / "tiny", ["go to the shelf 1", "take the apple 1 from the shelf 1"]
    )
    files = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    assert any(name.endswith(".safetensors") for name in files)
    with FakeHub() as hub:
        hub.seed_repo(MODEL_REPO, {**files, "model.onnx": b"not wanted"})
        point_hub_at(monkeypatch, hub.endpoint, hub_env / "hub-cache")
        result = eval_hub_model(tmp_path, games)
        fetched = {
            request.path.rsplit("/", 1)[-1] for request in hub.requests_to("/resolve/", "GET")
        }
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["evaluations"][0]["episodes"] == 1
    assert "model.onnx" not in fetched and "config.json" in fetched
    assert loopback_only == []
    assert list(
        (hub_env / "hub-cache").glob("models--tester--tiny-alfworld-agent/snapshots/*/config.json")
    )


def test_a_missing_hub_model_is_exit_4(hub_env, loopback_only, monkeypatch, tmp_path, games):
    with FakeHub() as hub:
        point_hub_at(monkeypatch, hub.endpoint, hub_env / "hub-cache")
        result = eval_hub_model(tmp_path, games, "tester/no-such-model")
    assert_refused(result, 4, "tester/no-such-model", "downloading the model")
    assert (
        not (tmp_path / "runs.db").exists()
        or b"from-hub" not in (tmp_path / "runs.db").read_bytes()
    )


def test_a_hub_that_never_answers_is_exit_4_within_the_timeout(
    hub_env, loopback_only, monkeypatch, tmp_path, games
):
    listener = SilentListener()
    try:
        point_hub_at(monkeypatch, listener.endpoint, hub_env / "hub-cache")
        monkeypatch.setenv("CCPO_HUB_TIMEOUT", "1,1")
        started = time.monotonic()
        result = eval_hub_model(tmp_path, games)
        elapsed = time.monotonic() - started
    finally:
        listener.close()
    assert_refused(result, 4, MODEL_REPO, "downloading the model", "did not answer in time")
    assert listener.accepted, "the download never reached the listener"
    assert elapsed < 60, elapsed


def test_neither_a_folder_nor_a_hub_id_is_exit_3(hub_env, tmp_path, games):
    assert_refused(
        eval_hub_model(tmp_path, games, str(tmp_path / "missing" / "model")),
        3,
        "no such folder, and not a Hub model id",
    )


def test_a_wrong_shaped_hub_answer_is_one_line_and_exit_4(
    hub_env, loopback_only, monkeypatch, tmp_path, games
):
    """Issue 21, item 7: `siblings` as a string in the repository's info gave a traceback."""
    with FakeHub() as hub:
        hub.seed_repo(MODEL_REPO, {"config.json": b"{}"})
        hub.inject(
            "answer",
            method="GET",
            path=f"/api/models/{MODEL_REPO}",
            times=10,
            body={"id": MODEL_REPO, "sha": "0" * 40, "siblings": "config.json"},
        )
        point_hub_at(monkeypatch, hub.endpoint, hub_env / "hub-cache")
        result = eval_hub_model(tmp_path, games)
    assert_refused(result, 4, MODEL_REPO, "not of the shape ccpo expects")
