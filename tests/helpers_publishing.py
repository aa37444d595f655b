"""Local runs with their own folders, checkpoints and identity records, for the publishing tests
of issue 42 (a follower, the fake Hub, a kill at any moment), and the checks every one of them
makes of what the Hub holds against what runs.db says."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers_cards import seed_card_db
from helpers_hostile import REPO_ROOT
from helpers_hub import TOKEN

from ccpo_cli import store
from ccpo_cli.backends.local.ownership import write_identity
from ccpo_cli.hub_repo import KEY_PREFIX
from ccpo_cli.store import outbox

RUN = "return-hard"
OTHER = "return-hard-fbjw"
REPO = "tester/ccpo-issue42"


def best_step(db, run: str) -> int:
    return max(store.run_evaluations(db, run), key=lambda row: (row["success_rate"], -row["step"]))[
        "step"
    ]


def checkpoint_file(folder: Path, step: int) -> Path:
    return folder / "checkpoints" / f"step-{step:06d}.pt"


def local_runs(tmp_path: Path, *, finished: bool = True, final_weights: bool = True) -> Path:
    """runs.db with the seed card's return-hard and its sister arm as local runs, each in its own
    folder (run.json with its uid) holding its best checkpoint (and its last step's), recorded
    with their sha256 as the local trainer records them. Finished at step 150 of 150 unless
    `finished` is false (then still running)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "runs.db"
    db = seed_card_db(path, arms=2)
    for name in (RUN, OTHER):
        row = store.get_run(db, name)
        folder = tmp_path / "ccpo-runs" / name
        (folder / "checkpoints").mkdir(parents=True)
        write_identity(folder, name, row["uid"], path)
        last = 150 if finished else 119
        steps = [best_step(db, name)] + ([last] if final_weights else [])
        for step in steps:
            weights = checkpoint_file(folder, step)
            weights.write_bytes(f"weights of {name} at step {step}\n".encode() * 64)
            store.record_checkpoint(
                db,
                name,
                step,
                str(weights),
                sha256=hashlib.sha256(weights.read_bytes()).hexdigest(),
                size_bytes=weights.stat().st_size,
            )
        config = dict(row["config"], run_dir=str(folder))
        db["runs"].update(row["id"], {"backend": "local", "config": json.dumps(config)})
        store.update_run_state(
            db, name, status="finished" if finished else "running", last_step=last
        )
    return path


def run_folder(tmp_path: Path, run: str = RUN) -> Path:
    return tmp_path / "ccpo-runs" / run


def follow_args(db_path: Path, endpoint: str, *extra: str, run: str = RUN) -> list[str]:
    return [
        "--db",
        str(db_path),
        "publish",
        "--follow",
        run,
        "--repo",
        REPO,
        "--endpoint",
        endpoint,
        "--token",
        TOKEN,
        "--window-start",
        "0",
        "--license",
        "apache-2.0",
        "--once",
        "--timeout",
        "5",
        "--deadline",
        "60",
        *extra,
    ]


def follower(db_path: Path, endpoint: str, *extra: str, cwd: Path) -> subprocess.Popen:
    """`ccpo publish --follow RUN --once` in its own process (to be killed, or run beside another)."""
    environment = dict(
        os.environ,
        PYTHONPATH=str(REPO_ROOT),
        PYTHONDONTWRITEBYTECODE="1",
        HF_ENDPOINT=endpoint,
        HF_HOME=str(cwd / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    environment.pop("HF_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "ccpo_cli", *follow_args(db_path, endpoint, *extra)],
        cwd=cwd,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def ccpo_commits(hub, repo: str = REPO) -> list:
    if repo not in hub.repos:
        return []
    return [c for c in hub.history(repo) if KEY_PREFIX in c.description]


def publication_keys(hub, repo: str = REPO) -> list[str]:
    return [c.description.split(KEY_PREFIX, 1)[1].split()[0] for c in ccpo_commits(hub, repo)]


def assert_once_and_tags_agree(hub, db_paths: list[Path], run: str = RUN) -> None:
    """Every publication is on the Hub once, and every tag runs.db records names the Hub's commit."""
    keys = publication_keys(hub)
    assert len(keys) == len(set(keys)), [c.message for c in ccpo_commits(hub)]
    tags = hub.repos[REPO].tags
    for db_path in db_paths:
        db = store.open_db(db_path)
        for entry in outbox.entries(db, run, REPO, state="done"):
            assert entry.commit_id in {c.oid for c in hub.history(REPO)}, entry
            if entry.tag is not None:
                assert tags.get(entry.tag) == entry.commit_id, (entry, tags)
        for row in store.run_publications(db, run):
            assert row["commit_id"] in {c.oid for c in hub.history(REPO)}, row
