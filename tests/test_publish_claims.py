"""What a publication claims is what landed, and weights never go up without a card.

- A card names a checkpoint as "published here" only when its upload is recorded as landed in
  that repository; a checkpoint saved on disk is not one published.
- Weights that are up while their card was refused or failed are said, on the follower's output.
- A run too short for a full card still gets a README beside its weights (a weights card).
- Paths recorded by a trainer started with relative paths (a relative `--resume`) are read by a
  follower started in another folder.

Real SQLite, the real local trainer, the loopback fake Hub, the CLI as a user runs it.

Asked for in issue 30.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_hub import TOKEN
from typer.testing import CliRunner

from ccpo_cli.cli.app import app
from ccpo_cli.hub_access import hub_timeouts
from ccpo_cli.hub_repo import KEY_PREFIX
from ccpo_cli.publishing.target import push_target
from ccpo_cli.publishing.uploader import Uploader
from ccpo_cli.store import open_db, outbox, record_checkpoint, run_evaluations

RUN = "return-hard"
REPO = "tester/ccpo-claims"


def _ours(hub) -> list:
    return (
        [c for c in hub.history(REPO) if KEY_PREFIX in c.description] if REPO in hub.repos else []
    )


def _text(data) -> str:
    return data.decode() if isinstance(data, bytes) else data


@pytest.fixture
def running_db(tmp_path) -> Path:
    path = tmp_path / "runs.db"
    db = seed_card_db(path)
    db["runs"].update(
        next(db["runs"].rows_where("name = ?", [RUN]))["id"],
        {"backend": "local", "status": "running"},
    )
    return path


def test_a_card_claims_no_checkpoint_that_was_saved_but_never_uploaded(running_db, hub, tmp_path):
    """The seed run records a checkpoint on disk at its best step; nothing was uploaded, so the
    interim card the uploader commits says it publishes the numbers only."""
    db = open_db(running_db)
    step = run_evaluations(db, RUN)[-1]["step"]
    entry, _ = outbox.enqueue(
        db,
        RUN,
        repo_id=REPO,
        revision="main",
        kind="card",
        role="interim",
        step=step,
        content_hash="claims",
        private=True,
        endpoint=hub.endpoint,
    )
    target = push_target(REPO, endpoint=hub.endpoint, window_start=0, staging=tmp_path / "staging")
    with hub_timeouts(target.timeouts):
        done = Uploader(db, running_db, RUN, target, TOKEN).process(entry)
    assert done.state == "done", done.reason
    (commit,) = _ours(hub)
    readme = _text(commit.files["README.md"])
    assert (
        "The checkpoint published here" not in readme
        and "No checkpoint is recorded with this card" in readme
    )
    assert json.loads(commit.files["results/ccpo_summary.json"])["checkpoint_step"] is None


def test_publish_without_a_checkpoint_may_not_name_one_that_is_not_up(running_db, hub, tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(running_db),
            "publish",
            "--run",
            RUN,
            "--repo",
            REPO,
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--checkpoint-step",
            "115",
            "--staging",
            str(tmp_path / "stage"),
            "--window-start",
            "0",
        ],
    )
    assert result.exit_code == 3, result.output
    (line,) = result.output.strip().splitlines()
    assert "--checkpoint-step 115" in line and "give --checkpoint" in line
    assert _ours(hub) == []


def test_weights_up_while_their_card_is_refused_by_the_hub_are_said(running_db, hub, tmp_path):
    db = open_db(running_db)
    best = max(run_evaluations(db, RUN), key=lambda row: row["success_rate"])["step"]
    weights = tmp_path / "step-best.pt"
    weights.write_bytes(b"weights of the best step")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    record_checkpoint(db, RUN, best, str(weights), sha256=digest)  # only recorded weights go up
    outbox.enqueue(
        db,
        RUN,
        repo_id=REPO,
        revision="main",
        kind="checkpoint",
        role="best",
        step=best,
        content_hash=digest,
        source=str(weights),
        private=True,
        endpoint=hub.endpoint,
    )
    target = push_target(REPO, endpoint=hub.endpoint, window_start=0, staging=tmp_path / "staging")
    uploader = Uploader(db, running_db, RUN, target, TOKEN)
    with hub_timeouts(target.timeouts):
        (entry,) = outbox.entries(db, RUN, REPO, state="pending")
        assert uploader.process(entry).state == "done"
    hub.inject(
        "status", method="POST", path="/commit/", status=403, times=50, message="no write access"
    )
    result = CliRunner().invoke(
        app,
        [
            "--db",
            str(running_db),
            "publish",
            "--follow",
            RUN,
            "--repo",
            REPO,
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--window-start",
            "0",
            "--once",
            "--timeout",
            "2",
            "--deadline",
            "10",
        ],
    )
    # Nothing was published by this command (exit 4, one line), and the line names the weights.
    assert result.exit_code == 4 and "Traceback" not in result.output
    last = result.stderr.strip().splitlines()[-1]
    assert (
        last.startswith("error: ") and f"the best weights of step {best} are on the Hub" in last
    ), result.output
    assert "no card names them" in last and "403" in last
    # Once the card cannot be refused any more, the same follower publishes it and says nothing.
    hub.faults.clear()
    again = CliRunner().invoke(
        app,
        [
            "--db",
            str(running_db),
            "publish",
            "--follow",
            RUN,
            "--repo",
            REPO,
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--window-start",
            "0",
            "--once",
            "--retry-failed",
            "--timeout",
            "2",
            "--deadline",
            "10",
        ],
    )
    assert again.exit_code == 0 and "warning:" not in again.output, again.output
    # And a card that fails while another part is published: a warning line on stdout.
    target_db = open_db(running_db)
    assert outbox.weights_without_card(target_db, RUN, REPO) == []


# -- a short run trained with relative paths, followed from another folder ------------------------


def _train(db: Path, run: str, steps: int, *, resume_dir: str | None = None):
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local import train_arm
    from ccpo_cli.backends.local.config import TrainConfig

    config = TrainConfig(
        seed=0,
        steps=steps,
        tasks=2,
        group=2,
        eval_every=2,
        eval_games=4,
        max_steps=6,
        eval_max_steps=6,
        workers=1,
    )
    return train_arm(
        load_arm("grpo"), run, db, config, resume=resume_dir is not None, run_dir=resume_dir
    )


def _as_an_older_ccpo_recorded_it(db_path: Path, run: str, folder: str) -> None:
    """Relative paths, as ccpo wrote them before they were made absolute: the checkpoints under
    `folder` (relative to the trainer's working folder) and the run folder itself."""
    with sqlite3.connect(db_path) as connection:
        (identifier, config) = connection.execute(
            "SELECT id, config FROM runs WHERE name = ?", [run]
        ).fetchone()
        document = json.loads(config)
        document["run_dir"] = folder
        connection.execute(
            "UPDATE runs SET config = ? WHERE id = ?", [json.dumps(document), identifier]
        )
        for row_id, path in connection.execute(
            "SELECT id, path FROM checkpoints WHERE run_id = ?", [identifier]
        ).fetchall():
            connection.execute(
                "UPDATE checkpoints SET path = ? WHERE id = ?",
                [f"{folder}/checkpoints/{Path(path).name}", row_id],
            )


@pytest.mark.slow
def test_a_short_run_resumed_by_a_relative_path_is_published_from_elsewhere_with_a_card(
    tmp_path, hub, monkeypatch
):
    trainer_folder, elsewhere = tmp_path / "trainer", tmp_path / "elsewhere"
    trainer_folder.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(trainer_folder)
    _train(Path("runs.db"), "short", 2)
    _train(Path("runs.db"), "short", 4, resume_dir="ccpo-runs/short")
    db = open_db(trainer_folder / "runs.db")
    recorded = [row["path"] for row in db["checkpoints"].rows]
    assert recorded and all(
        Path(path).is_absolute() and Path(path).is_file() for path in recorded
    ), recorded
    assert Path(json.loads(db["runs"].get(1)["config"])["run_dir"]).is_absolute()

    # Records as an older ccpo left them (relative to the trainer's folder) must be read as well.
    _as_an_older_ccpo_recorded_it(trainer_folder / "runs.db", "short", "ccpo-runs/short")
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(
        app,
        [
            "--db",
            "../trainer/runs.db",
            "publish",
            "--follow",
            "short",
            "--repo",
            REPO,
            "--endpoint",
            hub.endpoint,
            "--token",
            TOKEN,
            "--once",
            "--timeout",
            "60",
            "--deadline",
            "600",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    commits = _ours(hub)
    weights = [c for c in commits if any(name.startswith("checkpoints/") for name in c.files)]
    assert weights, [c.message for c in commits]
    # Two evaluations are too few for a window mean: the card says so, lists them and names the
    # weights (the weights card of publishing/weights_card.py stays for a card refused outright).
    cards = [c for c in commits if "README.md" in c.files]
    assert cards, [c.message for c in commits]
    readme = _text(cards[-1].files["README.md"])
    assert "Too few evaluations for a window mean" in readme
    final_weights = next(c for c in weights if "final weights" in c.message)
    assert f"commit `{final_weights.oid[:12]}`" in readme and "| 4 |" in readme, (
        readme,
        [(c.oid[:12], c.message) for c in commits],
    )
    final = hub.repos[REPO].tags.get("final")
    assert final == cards[-1].oid
    assert json.loads(result.stdout)["weights_without_card"] == []


def test_a_card_refused_once_merged_with_the_hubs_readme_becomes_a_weights_card(
    running_db, hub, tmp_path, monkeypatch
):
    """A card that passes the lint alone but not once merged with the README on the Hub (a
    metadata problem only the merge shows: the lint is made to find one here, since today's
    merge replaces every key ccpo writes) is refused. The weights that are up still get a README
    (the weights card), never a skipped card beside weights nobody can place."""
    import ccpo_cli.hub

    hub.seed_repo(
        REPO,
        {
            "README.md": b"---\nlicense: mit\n---\n# Notes\n\nWritten on the website.\n\n"
            b"<!-- ccpo:begin results -->\nold\n<!-- ccpo:end results -->\n"
        },
        private=True,
    )
    monkeypatch.setattr(
        ccpo_cli.hub, "lint_card", lambda text, **_: ["metadata: a problem only the merge shows"]
    )
    db = open_db(running_db)
    best = max(run_evaluations(db, RUN), key=lambda row: row["success_rate"])["step"]
    weights = tmp_path / "step-best.pt"
    weights.write_bytes(b"weights of the best step")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    record_checkpoint(db, RUN, best, str(weights), sha256=digest)
    for kind, role in (("checkpoint", "best"), ("card", "interim")):
        outbox.enqueue(
            db,
            RUN,
            repo_id=REPO,
            revision="main",
            kind=kind,
            role=role,
            step=best,
            content_hash=digest if kind == "checkpoint" else f"{kind}-{role}",
            source=str(weights) if kind == "checkpoint" else None,
            private=True,
            endpoint=hub.endpoint,
        )
    target = push_target(REPO, endpoint=hub.endpoint, window_start=0, staging=tmp_path / "staging")
    Uploader(db, running_db, RUN, target, TOKEN).drain()
    card = [e for e in outbox.entries(db, RUN, REPO) if e.kind == "card"][0]
    assert card.state == "done" and "weights card" in (card.reason or ""), card
    readme = _text(hub.history(REPO)[-1].files["README.md"])
    assert "Written on the website." in readme  # the owner's line is kept
    assert f"step {best}" in readme and "a problem only the merge shows" in readme
    assert outbox.weights_without_card(db, RUN, REPO) == []
