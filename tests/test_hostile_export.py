"""`ccpo export` replaces only what it wrote: a run folder, a user's folder or file, or a symlink
named like the export is refused with exit 3 and left as it was (never renamed); exporting twice
still replaces ccpo's own output; a file, an unwritable folder or a full disk as the target ends
in one line and an exit code, with no partial file left behind.

Asked for in issue 42, cases 1 and 8 (export).
"""

from __future__ import annotations

import errno
import os
import resource
import stat
import sys

import pytest
from helpers_hostile import assert_refused, invoke, run_ccpo

from ccpo_cli.arms import load_arm
from ccpo_cli.owned_output import MARKER
from ccpo_cli.store import ensure_run, open_db, record_evaluation


def _tree(folder):
    return sorted(
        (str(path.relative_to(folder)), path.read_bytes() if path.is_file() else None)
        for path in folder.rglob("*")
    )


@pytest.fixture
def recorded(tmp_path):
    """runs.db with run r0 (three evaluations) and r0's run folder under ccpo-runs/."""
    db_path = tmp_path / "runs.db"
    db = open_db(db_path)
    ensure_run(db, "r0", arm=load_arm("grpo"), seed=0, base_model="tiny", backend="local",
               total_steps=4, config={"run_dir": str(tmp_path / "ccpo-runs" / "r0")})  # fmt: skip
    for step in (0, 2, 4):
        record_evaluation(db, "r0", step, success_rate=10.0 * step, episodes=8, temperature=0.4)
    run_dir = tmp_path / "ccpo-runs" / "r0"
    (run_dir / "checkpoint-4").mkdir(parents=True)
    (run_dir / "checkpoint-4" / "model.safetensors").write_bytes(b"weights" * 1000)
    (run_dir / "run.json").write_text('{"run": "r0"}')
    (run_dir / "metrics.jsonl").write_text('{"step": 0}\n')
    return db_path, tmp_path


@pytest.mark.parametrize("tracker", ["tensorboard", "csv"])
def test_exporting_into_the_run_folders_parent_leaves_the_run_folder_whole(recorded, tracker):
    db_path, root = recorded
    run_dir = root / "ccpo-runs" / "r0"
    before = _tree(run_dir)
    result = invoke("--db", db_path, "export", "--to", tracker, "r0", "--out", root / "ccpo-runs")
    if tracker == "tensorboard":  # the export would be ccpo-runs/r0: the run folder itself
        assert_refused(result, 3, "run folder")
    else:  # ccpo-runs/r0.csv beside the run folder
        assert result.exit_code == 0, result.output
    assert _tree(run_dir) == before
    assert not [p for p in (root / "ccpo-runs").iterdir() if p.name.endswith((".old", ".partial"))]


def test_a_run_folder_or_a_folder_inside_one_is_never_the_export_folder(recorded):
    db_path, root = recorded
    before = _tree(root / "ccpo-runs")
    for out in (root / "ccpo-runs" / "r0", root / "ccpo-runs" / "r0" / "exports"):
        result = invoke("--db", db_path, "export", "--to", "csv", "r0", "--out", out)
        assert_refused(result, 3, "run folder")
    assert _tree(root / "ccpo-runs") == before


@pytest.mark.parametrize("tracker,name", [("tensorboard", "r0"), ("csv", "r0.csv")])
def test_a_users_file_or_folder_named_like_the_export_is_refused_not_renamed(
    recorded, tracker, name
):
    db_path, root = recorded
    out = root / "tb"
    out.mkdir()
    (out / name).mkdir() if tracker == "tensorboard" else (out / name).write_text("mine")
    if tracker == "tensorboard":
        (out / name / "notes.txt").write_text("mine")
    before = _tree(out)
    result = invoke("--db", db_path, "export", "--to", tracker, "r0", "--out", out)
    assert_refused(result, 3, "did not write", MARKER)
    assert _tree(out) == before  # nothing renamed to a hidden .old, nothing partial left


def test_a_symlink_named_like_the_export_is_refused(recorded):
    db_path, root = recorded
    out = root / "tb"
    out.mkdir()
    (out / "r0").symlink_to(root / "ccpo-runs" / "r0")
    result = invoke("--db", db_path, "export", "--to", "tensorboard", "r0", "--out", out)
    assert_refused(result, 3, "symbolic link")
    assert (root / "ccpo-runs" / "r0" / "run.json").is_file()


@pytest.mark.parametrize("tracker", ["tensorboard", "csv"])
def test_exporting_twice_replaces_ccpos_own_output(recorded, tracker):
    db_path, root = recorded
    for _ in range(2):
        result = invoke("--db", db_path, "export", "--to", tracker, "r0", "--out", root / "tb")
        assert result.exit_code == 0, result.output
    names = sorted(path.name for path in (root / "tb").iterdir())
    if tracker == "tensorboard":
        assert names == ["r0"]
        assert len([p for p in (root / "tb" / "r0").iterdir() if p.name != MARKER]) == 1
    else:
        assert names == [f".r0.csv{MARKER}", "r0.csv"]


def test_a_file_as_the_export_folder_is_one_line_and_exit_3(recorded):
    db_path, root = recorded
    (root / "afile").write_text("x")
    result = invoke("--db", db_path, "export", "--to", "csv", "r0", "--out", root / "afile")
    assert_refused(result, 3, "is a file")
    assert (root / "afile").read_text() == "x"


def _refuse_writes_under(folder, monkeypatch):
    """What the kernel answers a non-root user in a folder without write permission (the tests
    may run as root, who is never refused): EACCES for every file or folder made in it."""
    real_open, real_mkdir = os.open, os.mkdir

    def refused(path):
        if os.path.dirname(os.path.abspath(path)) == str(folder):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def guarded_open(path, *args, **kwargs):
        refused(path)
        return real_open(path, *args, **kwargs)

    def guarded_mkdir(path, *args, **kwargs):
        refused(path)
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)


@pytest.mark.parametrize("tracker", ["tensorboard", "csv"])
def test_an_unwritable_folder_is_one_line_and_exit_3(recorded, tracker, monkeypatch):
    db_path, root = recorded
    out = root / "locked"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
    _refuse_writes_under(out, monkeypatch)
    try:
        result = invoke("--db", db_path, "export", "--to", tracker, "r0", "--out", out)
        assert_refused(result, 3, "cannot write", "Permission denied")
    finally:
        out.chmod(stat.S_IRWXU)
    assert list(out.iterdir()) == []


def _file_size_limit():
    # A disk that fills after 40 KB: above the 32 KB of SQLite's shared-memory file (reading
    # runs.db still works), below what 1,500 points take as a CSV or as event files.
    resource.setrlimit(resource.RLIMIT_FSIZE, (40_960, 40_960))


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    db = open_db(root / "runs.db")
    ensure_run(db, "r0", arm=load_arm("grpo"), seed=0, base_model="tiny", backend="local",
               total_steps=3000)  # fmt: skip
    for step in range(0, 3000, 2):
        record_evaluation(db, "r0", step, success_rate=50.0, episodes=8, temperature=0.4)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return root


@pytest.mark.parametrize("tracker", ["tensorboard", "csv"])
def test_a_full_disk_is_one_line_exit_1_and_no_partial_file(long_run, tracker):
    out = long_run / f"out-{tracker}"
    done = run_ccpo("--db", long_run / "runs.db", "export", "--to", tracker, "r0", "--out", out,
                    cwd=long_run, preexec=_file_size_limit, timeout=120)  # fmt: skip
    assert done.returncode == 1, (done.returncode, done.stderr)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "File too large" in lines[0] and "partial files were removed" in lines[0], lines[0]
    leftovers = [path.name for path in out.iterdir() if not path.name.endswith(MARKER)]
    assert leftovers == [], leftovers


assert sys.platform != "win32"  # the file-size limit above is POSIX
