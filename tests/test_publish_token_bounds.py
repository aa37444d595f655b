"""Token sources are bounded (issue 42, case 6): `--token-file`, `--token -`, HF_TOKEN and the
saved login are read only as a regular file (or stdin) of at most 4 KiB holding one printable
line. A named pipe, /dev/zero or a 100 MB file gets one line and exit 3, never a hang, a
MemoryError or a huge header. Each case runs the CLI in a child process under a 500 MB address
space limit (`ulimit -v`) and a timeout, as a user would meet it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest
from helpers_hostile import REPO_ROOT, assert_child_refused, run_ccpo

from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import MAX_TOKEN_BYTES, resolve_token

MEMORY_LIMIT = 500 * 1024 * 1024
# Each command must end well inside this; a hang is the failure this guards against.
COMMAND_TIMEOUT_S = 60


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def follow(tmp_path, *token_args, stdin=None, env=None):
    return run_ccpo(
        "--db",
        tmp_path / "runs.db",
        "publish",
        "--follow",
        "some-run",
        "--repo",
        "tester/bounded",
        "--endpoint",
        "http://127.0.0.1:9",
        "--once",
        *token_args,
        cwd=tmp_path,
        preexec=_limited,
        env={"HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": "", **(env or {})},
        stdin=stdin,
        timeout=COMMAND_TIMEOUT_S,
    )


def test_a_named_pipe_as_token_file_is_refused_not_waited_on(tmp_path):
    pipe = tmp_path / "token.fifo"
    os.mkfifo(pipe)
    assert_child_refused(follow(tmp_path, "--token-file", pipe), 3, "not a regular file")


def test_dev_zero_as_token_file_is_refused(tmp_path):
    assert_child_refused(follow(tmp_path, "--token-file", "/dev/zero"), 3, "not a regular file")


def test_a_100_mb_token_file_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "token"
    with big.open("wb") as handle:
        handle.truncate(100 * 1024 * 1024)  # sparse: 100 MB that costs no disk
    assert_child_refused(follow(tmp_path, "--token-file", big), 3, "more than 4096 bytes")


def test_an_endless_stdin_is_refused(tmp_path):
    """`--token -` reading /dev/zero: at most 4 KiB is read, then one line."""
    with open("/dev/zero", "rb") as zero:
        completed = subprocess.run(
            [
                sys.executable,
                "-m",
                "ccpo_cli",
                "--db",
                str(tmp_path / "runs.db"),
                "publish",
                "--follow",
                "r",
                "--repo",
                "tester/bounded",
                "--endpoint",
                "http://127.0.0.1:9",
                "--once",
                "--token",
                "-",
            ],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HOME=str(tmp_path / "hf")),
            stdin=zero,
            capture_output=True,
            text=True,
            preexec_fn=_limited,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    assert_child_refused(completed, 3, "--token -")


def test_a_huge_stdin_line_is_refused(tmp_path):
    assert_child_refused(
        follow(tmp_path, "--token", "-", stdin="h" * (5 * 1024 * 1024) + "\n"),
        3,
        "more than 4096 bytes",
    )


def test_a_huge_hf_token_is_refused(tmp_path):
    assert_child_refused(
        follow(tmp_path, env={"HF_TOKEN": "h" * (MAX_TOKEN_BYTES + 1)}), 3, "HF_TOKEN"
    )


@pytest.mark.parametrize(
    "text",
    ["hf_abc\nhf_def\n", "hf_a\x1b[2Jb\n", "hf a b\n", "\n"],
    ids=["two lines", "escape", "spaces", "empty"],
)
def test_a_token_file_holds_one_printable_line(tmp_path, text):
    token_file = tmp_path / "token"
    token_file.write_text(text)
    with pytest.raises(InvalidInput, match="--token-file"):
        resolve_token(None, token_file)


def test_a_good_token_file_still_reads(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("hf_good_token_123\n")
    assert resolve_token(None, token_file) == "hf_good_token_123"


def test_push_to_hub_refuses_a_named_pipe_before_training(tmp_path):
    """`ccpo train --push-to-hub --token-file FIFO`: the publisher is built (and the token read)
    before training starts, under the same bounds: exit 3, never a hang."""
    from ccpo_cli.publishing.background import publisher_for

    pipe = tmp_path / "token.fifo"
    os.mkfifo(pipe)
    with pytest.raises(InvalidInput, match="not a regular file"):
        publisher_for(
            tmp_path / "runs.db",
            "tester/bounded",
            backend="local",
            endpoint="http://127.0.0.1:9",
            token_file=pipe,
        )
