"""docs/cli.md is generated from the Typer app; this fails when someone changes a command
without regenerating it (`python scripts/gen_cli_docs.py`)."""

from __future__ import annotations

from helpers_scripts import ROOT, load_script


def _generator():
    return load_script("gen_cli_docs")


def test_docs_cli_md_is_current():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert text == _generator().render(), "docs/cli.md is stale: run python scripts/gen_cli_docs.py"


def test_the_page_lists_every_command_and_option_of_the_app():
    import typer

    from ccpo_cli.cli.app import app

    text = _generator().render()
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for path, leaf in (getattr(command, "commands", None) or {name: command}).items():
            title = f"`ccpo {name}`" if path == name else f"`ccpo {name} {path}`"
            assert title in text
            for param in leaf.params:
                for opt in param.opts if param.param_type_name == "option" else ():
                    assert f"`{opt}`" in text


def _parse(words: list[str]) -> None:
    """Parse a command line with the app's own click tree, as `ccpo` would (unknown options,
    missing required ones and bad values raise); nothing is run."""
    import typer

    from ccpo_cli.cli.app import app

    command = typer.main.get_command(app)
    context = command.make_context("ccpo", list(words))
    while hasattr(command, "commands"):
        name, command, rest = command.resolve_command(
            context, [*getattr(context, "_protected_args", []), *context.args]
        )
        context = command.make_context(name, rest, parent=context)


def test_every_command_has_an_example_in_its_help_and_each_parses():
    import shlex

    examples = _generator().examples()
    assert "runs retract" in examples and "compare" in examples
    for path, lines in examples.items():
        assert lines, f"`ccpo {path} --help` has no example"
        for line in lines:
            words = shlex.split(line)
            assert words[: 1 + len(path.split())] == ["ccpo", *path.split()], line
            _parse(words[1:])


def test_the_light_examples_run_as_written(tmp_path, monkeypatch):
    # The examples that need no engine, network or GPU, run for real against a database that
    # holds what they name (docs by example: sqlite-utils' model).
    import json
    import shlex

    from typer.testing import CliRunner

    from ccpo_cli import store
    from ccpo_cli.cli.app import app
    from ccpo_cli.store.identity import ExternalArm

    db = store.open_db(tmp_path / "runs.db")
    store.ensure_run(db, "grpo-seed0", arm=ExternalArm("grpo"), seed=0, total_steps=80)
    for step in range(0, 81, 10):
        store.record_evaluation(db, "grpo-seed0", step, successes=40 + step // 2, episodes=128)
    store.record_evaluation(
        db, "grpo-seed0", 40, successes=107, episodes=128
    )  # a conflict at step 40: 83.59375 %
    examples = _generator().examples()
    monkeypatch.chdir(ROOT)  # `--input examples/worked-example-1.json` is a path in the checkout
    ran = []
    for path in (
        "arms list",
        "arms show",
        "estimate",
        "runs list",
        "runs show",
        "runs resolve",
        "runs retract",
        "compare",
    ):
        for line in examples[path]:
            result = CliRunner().invoke(
                app, ["--db", str(tmp_path / "runs.db"), *shlex.split(line)[1:]]
            )
            assert result.exit_code == 0, (line, result.output)
            ran.append(path)
    assert len(ran) == 8
    shown = json.loads(
        CliRunner()
        .invoke(app, ["--db", str(tmp_path / "runs.db"), "runs", "show", "grpo-seed0", "--json"])
        .stdout
    )
    assert shown["resolutions"] and any(row["retracted"] for row in shown["evaluations"])
