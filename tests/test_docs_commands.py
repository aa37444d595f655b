"""Every ccpo command the README and docs/ show is one this ccpo takes as
written. The README's tour runs in full (tests/test_readme_tour.py); here every other command,
in a code block or in the prose, is parsed by the real command line (names, options, values,
required options of a command shown with options), and the light ones also run as written
against files and a database this test builds.

A prose mention of a bare command (`ccpo compare`) names a command, so only its name is checked;
`a|b` in a mention stands for each of its alternatives.

Asked for in issue 32, item 5.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

from ccpo_cli.cli.app import app

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
FENCE = re.compile(r"```.*?```", re.S)
SPAN = re.compile(r"`(ccpo(?: [^`]*)?)`")
# A usage synopsis (`ccpo --db PATH COMMAND ...`) shows a shape, not a command to run.
SYNOPSIS = re.compile(r"\.\.\.|<|\b[A-Z][A-Z_]+\b")
# Commands that run in a second or two against what the test builds: run them as written.
LIGHT = (
    "ccpo --help",
    "ccpo runs list",
    "ccpo compare",
    "ccpo compare --json",
    "ccpo estimate --arm gigpo --input examples/worked-example-1.json",
)


def _block_commands(text: str) -> list[str]:
    commands = []
    for block in BLOCK.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [
            shlex.join(shlex.split(line, comments=True))
            for line in joined.splitlines()
            if line.strip().startswith("ccpo ")
        ]
    return commands


def _expand(span: str) -> list[str]:
    """`ccpo sync push|pull` -> both commands; the alternatives are single words."""
    words = span.split()
    for index, word in enumerate(words):
        if "|" in word and not word.startswith("-"):
            return [
                " ".join([*words[:index], choice, *words[index + 1 :]])
                for choice in word.split("|")
            ]
    return [span]


def shown_commands() -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(page, command) of the code blocks, and (page, mention) of the prose; README's tour left out."""
    blocks, mentions = [], []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if page.name == "README.md":
            head, tour = text.split("## A tour", 1)
            tour_block = tour.split("```bash\n", 1)[1].split("```", 1)[0]
            text = head + "## A tour" + tour.replace(tour_block, "", 1)
        blocks += [(page.name, command) for command in _block_commands(text)]
        prose = FENCE.sub("", text).replace("\n", " ")
        mentions += [
            (page.name, command)
            for span in SPAN.findall(prose)
            for command in _expand(" ".join(span.split()))
            if not SYNOPSIS.search(command)
        ]
    return blocks, mentions


@functools.cache
def root_command() -> Any:
    return typer.main.get_command(app)  # building the click app once: it is most of a parse's time


def resolve(args: list[str], *, strict: bool) -> tuple[Any, Any]:
    """The command `args` names and its parsed context; the parser raises on an unknown command or
    option, a bad value and (strict) a missing required option, exactly as a shell would see.
    (A group is recognised by `resolve_command`: typer's groups need not be click.Group.)"""
    command = root_command()
    context = command.make_context("ccpo", list(args), resilient_parsing=not strict)
    while hasattr(command, "resolve_command"):
        rest = [*context._protected_args, *context.args]
        if not rest:
            break
        name, found, rest = command.resolve_command(context, rest)
        assert found is not None, args
        command = found
        context = command.make_context(name, rest, parent=context, resilient_parsing=not strict)
    return command, context


def test_the_pages_show_commands_and_this_test_finds_them():
    blocks, mentions = shown_commands()
    pages = {page for page, _ in blocks}
    assert {"alfworld-games.md", "estimators.md", "local-backend.md", "publishing.md"} <= pages
    assert ("README.md", "ccpo matrix --design early-fork") in mentions and (
        "README.md",
        "ccpo sync pull",
    ) in mentions
    assert len(blocks) >= 10 and len(mentions) >= 20


@pytest.mark.parametrize("page,command", shown_commands()[0], ids=lambda value: value[:60])
def test_every_command_in_a_code_block_parses_as_written(page, command):
    args = shlex.split(command, comments=True)[1:]
    command, _ = resolve(args, strict=True)
    assert command.name == args[0] or command.name in args, (
        page,
        command,
    )  # a command, not the root group


def test_every_command_named_in_the_prose_exists_with_its_options():
    for page, mention in shown_commands()[1]:
        args = shlex.split(mention)[1:]
        command, context = resolve(args, strict=False)
        options = {
            name for param in command.params for name in (*param.opts, *param.secondary_opts)
        }
        options |= {
            name for param in root_command().params for name in param.opts
        }  # global options
        options |= {"--help"}
        for word in args:
            if word.startswith("--"):
                assert word.split("=")[0] in options, (page, mention, word)


@pytest.mark.slow
def test_the_light_commands_run_as_written(tmp_path, monkeypatch):
    from helpers_cards import seed_card_db

    shown = {command for _, command in shown_commands()[0]} | {
        mention for _, mention in shown_commands()[1]
    }
    assert set(LIGHT) <= shown
    seed_card_db(tmp_path / "runs.db")
    monkeypatch.chdir(ROOT)  # the docs' paths (examples/...) are relative to the repository
    runner = CliRunner()
    for command in LIGHT:
        result = runner.invoke(app, ["--db", str(tmp_path / "runs.db"), *shlex.split(command)[1:]])
        assert result.exit_code == 0, (command, result.output)
        assert "Traceback" not in result.output
        if command.endswith("--json"):
            assert json.loads(result.stdout)["arms"]


def _readme_setup_commands() -> list[str]:
    """The README's shell lines that are not ccpo commands: the set-up's two commands."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return [
        line.strip()
        for block in BLOCK.findall(text)
        for line in block.splitlines()
        if line.strip() and not line.strip().startswith(("ccpo ", "#"))
    ]


def test_the_readmes_test_command_is_the_one_ci_runs():
    """CI (.ci/run) runs the README's test command as written, so the two cannot drift."""
    [test_command] = [line for line in _readme_setup_commands() if "[all,test]" in line]
    assert test_command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command.endswith("scripts/test.sh") and (ROOT / "scripts" / "test.sh").exists()


def test_the_readmes_main_job_command_installs_extras_that_exist_and_runs_commands_that_parse():
    """The main job trains for minutes, so it is checked as written rather than run: its install
    names extras pyproject.toml declares, its script exists, and every ccpo command the script
    runs (short and --full) parses with the values the script gives it."""
    import tomllib

    [main_job] = [line for line in _readme_setup_commands() if "main_job.sh" in line]
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    [spec] = re.findall(r"-e '\.\[([a-z,-]+)\]'", main_job)
    assert set(spec.split(",")) <= set(extras), spec
    script = (ROOT / "scripts" / "main_job.sh").read_text(encoding="utf-8")
    values = {"$db": "demo/runs.db", '"$db"': "demo/runs.db", "$runs": "demo-return-hard"}
    values |= {'"$card_run"': "demo-return-hard", '"$out/learning-curve.png"': "c.png"}
    values |= {'"$out/card/README.md"': "demo/card/README.md"}
    lines = [line.strip() for line in script.splitlines() if line.strip().startswith("ccpo ")]
    assert len(lines) >= 4
    for line in lines:
        args = [values.get(word, word) for word in line.split()[1:]]
        assert not any("$" in arg for arg in args), line
        command, _ = resolve(args, strict=True)
        assert command.name in args, line
