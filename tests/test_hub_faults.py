"""Every Hub path against every fault (issue 30, item 1): publish's commit and metadata, sync
push and pull, the model download and the outbox all go through the one client and the one
retry rule of hub_access.py, so the same fault gets the same answer on each.

A fault the Hub gives once and then not (408, 429, 5xx, and 409 on a commit) is tried again and
the work succeeds, with exactly one commit; a Hub that keeps failing ends the work within the
command's deadline, with one line that names the fault (exit 4), and the outbox keeps the
entry pending with that line, to be tried again later. Real huggingface_hub, real HTTP, the
loopback fake Hub of tests/fakehub.py.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from helpers_cards import seed_card_db
from helpers_hub import TOKEN
from helpers_sync import full_run, machine

from ccpo_cli.errors import RemoteError
from ccpo_cli.hub import publish_run
from ccpo_cli.hub_access import HubCallError, RetryRule, hub_timeouts, resolve_timeouts
from ccpo_cli.hub_repo import KEY_PREFIX
from ccpo_cli.hub_sync import SyncLimits, pull, push
from ccpo_cli.store import open_db

REPO = "tester/ccpo-faults"
DATASET = "tester/ccpo-faults-results"
MODEL = "tester/tiny-faults-model"
# The command's deadline and the read timeout these tests give every path.
DEADLINE_S = 4.0
READ_TIMEOUT = "1"
FAST = RetryRule(attempts=3, first_wait_s=0.05, max_wait_s=0.2)

# Per fault: what is injected, whether it is given once (then the Hub recovers) or for good,
# and the words of the one line a path that gives up must say.
FAULTS = {
    "408": ({"kind": "status", "status": 408}, "once", None),
    "429": ({"kind": "status", "status": 429, "retry_after": "0"}, "once", None),
    "500": ({"kind": "status", "status": 500}, "once", None),
    "503": ({"kind": "status", "status": 503}, "once", None),
    "409": ({"kind": "status", "status": 409, "message": "A commit is in progress"}, "once", None),
    "timeout": ({"kind": "silent", "seconds": 30}, "always", "did not answer in time"),
    "trickle": (
        {"kind": "trickle", "seconds": 30, "interval": 0.2, "length": False},
        "always",
        "deadline",
    ),
    "flood": ({"kind": "endless", "seconds": 30}, "always", "exceeded"),
}
# Per path: the request its fault is put on, and whether it commits (409 is a commit's word).
PATHS = {
    "publish-commit": ("POST", "/api/models/" + REPO + "/commit/", True),
    "publish-metadata": ("GET", "/api/models/" + REPO, False),
    "sync-push": ("POST", "/api/datasets/" + DATASET + "/commit/", True),
    "sync-pull": ("GET", "/api/datasets/" + DATASET, False),
    "model-download": ("GET", "/api/models/" + MODEL, False),
    "outbox": ("POST", "/api/models/" + REPO + "/commit/", True),
}
CASES = [(path, fault) for path in PATHS for fault in FAULTS if fault != "409" or PATHS[path][2]]


def _timeouts():
    return resolve_timeouts(READ_TIMEOUT, DEADLINE_S)


def _publish(hub, tmp_path: Path) -> None:
    db_path = tmp_path / "runs.db"
    seed_card_db(db_path)
    publish_run(
        open_db(db_path),
        "return-hard",
        REPO,
        staging=tmp_path / "staging",
        token=TOKEN,
        endpoint=hub.endpoint,
        timeout=READ_TIMEOUT,
        deadline=DEADLINE_S,
    )


def _outbox(hub, tmp_path: Path) -> None:
    """One interim card entry worked by the uploader: done, or pending again with the reason."""
    from ccpo_cli.publishing.target import push_target
    from ccpo_cli.publishing.uploader import Uploader
    from ccpo_cli.store import outbox, run_evaluations

    db_path = tmp_path / "runs.db"
    db = seed_card_db(db_path)
    step = run_evaluations(db, "return-hard")[-1]["step"]
    target = push_target(
        REPO,
        endpoint=hub.endpoint,
        timeout=READ_TIMEOUT,
        deadline=DEADLINE_S,
        window_start=0,
        staging=tmp_path / "staging",
    )
    entry, _ = outbox.enqueue(
        db,
        "return-hard",
        repo_id=REPO,
        revision="main",
        kind="card",
        role="interim",
        step=step,
        content_hash="faults",
        private=True,
        endpoint=hub.endpoint,
    )
    uploader = Uploader(db, db_path, "return-hard", target, TOKEN, rule=FAST)
    with hub_timeouts(target.timeouts):
        now = uploader.process(entry)
    if now.state != "done":
        assert now.state == "pending", (
            now.state,
            now.reason,
        )  # tried again later, never given up on one fault
        raise RemoteError(now.reason)


def _sync_push(hub, tmp_path: Path, monkeypatch) -> None:
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    push(
        open_db(a),
        DATASET,
        token=TOKEN,
        endpoint=hub.endpoint,
        host="node-a",
        timeouts=_timeouts(),
        limits=SyncLimits(deadline_s=DEADLINE_S),
        rule=FAST,
    )


def _sync_pull(hub, tmp_path: Path, monkeypatch, faults) -> None:
    a = machine(tmp_path, "node-a", monkeypatch)
    full_run(a, "r1", steps=(2, 4))
    push(open_db(a), DATASET, token=TOKEN, endpoint=hub.endpoint, host="node-a", rule=FAST)
    faults()  # after the dataset holds the parts
    c = machine(tmp_path, "node-c", monkeypatch)
    done = pull(
        open_db(c),
        DATASET,
        token=TOKEN,
        endpoint=hub.endpoint,
        timeouts=_timeouts(),
        limits=SyncLimits(deadline_s=DEADLINE_S),
        rule=FAST,
    )
    assert done["rows_new"] > 0


def _download(hub, tmp_path: Path, monkeypatch) -> None:
    from test_eval_hub_model import point_hub_at

    from ccpo_cli.agents.hf import download_model

    point_hub_at(monkeypatch, hub.endpoint, tmp_path / "hub-cache")
    monkeypatch.setenv("CCPO_HUB_TIMEOUT", READ_TIMEOUT)
    monkeypatch.setenv("CCPO_HUB_DEADLINE", str(DEADLINE_S))
    folder = download_model(MODEL)
    assert (folder / "model.safetensors").read_bytes() == b"weights"


@pytest.mark.parametrize("path, fault", CASES, ids=[f"{p}-{f}" for p, f in CASES])
def test_every_path_gives_the_same_answer_to_the_same_fault(
    hub, tmp_path, monkeypatch, path, fault
):
    method, target, _ = PATHS[path]
    options, how, words = FAULTS[fault]
    hub.seed_repo(MODEL, {"config.json": b"{}", "model.safetensors": b"weights"}, private=False)

    def inject() -> None:
        hub.inject(
            options["kind"],
            method=method,
            path=target,
            times=1 if how == "once" else 50,
            **{key: value for key, value in options.items() if key != "kind"},
        )

    started = time.monotonic()
    try:
        if path == "sync-pull":
            _sync_pull(hub, tmp_path, monkeypatch, inject)
        else:
            inject()
            if path in ("publish-commit", "publish-metadata"):
                _publish(hub, tmp_path)
            elif path == "outbox":
                _outbox(hub, tmp_path)
            elif path == "sync-push":
                _sync_push(hub, tmp_path, monkeypatch)
            else:
                _download(hub, tmp_path, monkeypatch)
        failure = None
    except RemoteError as error:  # HubCallError is one: exit 4
        failure = error
    elapsed = time.monotonic() - started
    if how == "once":
        assert failure is None, f"{path} did not recover from one {fault}: {failure}"
        assert [f.hits for f in hub.faults] == [1]
        if path in ("publish-commit", "outbox"):
            ours = [c for c in hub.history(REPO) if KEY_PREFIX in c.description]
            assert len(ours) == 1, "a commit was made twice"
        if path == "sync-push":
            assert (
                sum(
                    c.message.startswith("ccpo sync")
                    for c in hub.datasets[DATASET].branches["main"]
                )
                == 1
            )
    else:
        assert failure is not None, f"{path} succeeded against a Hub that always gives {fault}"
        line = str(failure)
        assert "\n" not in line and words in line and TOKEN not in line, line
        assert isinstance(failure, RemoteError) and failure.exit_code == 4
        # Within the command's deadline (and its slack for closing connections), on a loaded machine too.
        assert elapsed < 6 * DEADLINE_S, (path, fault, elapsed)


def test_an_endless_answer_to_a_commit_is_cut_at_the_answer_cap(hub, tmp_path):
    """A commit's answer is small JSON: an endless one ends as too large, not as a follower that
    reads until memory runs out (21.7 GB before the kernel killed it)."""
    hub.inject("endless", method="POST", path="/commit/", seconds=60, times=50)
    with pytest.raises(HubCallError) as caught:
        _publish(hub, tmp_path)
    assert caught.value.kind == "too_large", str(caught.value)


def test_a_long_retry_after_ends_the_call_at_once_on_every_path(hub, tmp_path, monkeypatch):
    """A Retry-After past the rule's cap is not slept through (sync used to wait it out)."""
    hub.inject("status", method="POST", path="/commit/", status=429, retry_after="100000", times=50)
    started = time.monotonic()
    with pytest.raises(HubCallError, match="asked to wait 100000 s"):
        _sync_push(hub, tmp_path, monkeypatch)
    assert time.monotonic() - started < 6 * DEADLINE_S
