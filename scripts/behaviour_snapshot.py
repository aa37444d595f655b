"""What the test suite's scenarios produce, written to a folder so that two checkouts can be
compared byte for byte (issue 43: "no behaviour changes" across a refactor).

    python scripts/behaviour_snapshot.py OUT [--repo CHECKOUT] [--examples 200]
    python scripts/behaviour_snapshot.py --diff OUT_BEFORE OUT_AFTER

The scenarios are the ones the tests build, through the tests' own helpers of the checkout named
by --repo (default: this one), so the same recipes run through the old code and the new:
- `oracle-NNN`: the card oracle's generated databases (tests/helpers_card_oracle.py, hypothesis
  derandomized, the first --examples of them), written through the store API and `ccpo ingest`;
- `real-ROUND`: each round of the real training logs, ingested as tests/test_card_oracle_real_logs
  does (from the real-log folder that test reads);
- `train`: two short local runs on the shipped ALFWorld games (return-hard and grpo, seed 0), as
  tests/test_local_train_run.py's acceptance run trains them.
For each: every row of every table of runs.db, `ccpo compare --json`, `ccpo runs list --json`,
`ccpo runs show --json` of each run, and each card's README.md and JSON files (the refused ones'
messages instead). Values that differ between two runs of the same code (wall-clock times, the
scenario's own temporary path, process ids) are replaced by a placeholder; NORMALISED says which,
and --diff also reads a run's random uid as "<uid>". --diff prints the files that differ and exits
1 when any does.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import re
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

# Columns whose values are the moment or place of a run of the script, not its behaviour.
NORMALISED = re.compile(
    r"(_at|_time|time_s|seconds|_ts|heartbeat|^pid$|_pid$|^host|hostname|duration|elapsed|"
    r"started|ended|created|updated|wall)",
    re.IGNORECASE,
)
ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
RANDOM_UID = re.compile(r"\b[0-9a-f]{32}\b")  # uuid4().hex: a run's uid, new on every run
CODE_COMMIT = re.compile(r"\b[0-9a-f]{40}\b")  # the checkout's commit, which training records


def _clean(text: str, folder: Path) -> str:
    text = text.replace(str(folder.resolve()), "<dir>").replace(str(folder), "<dir>")
    return ISO_TIME.sub("<time>", text)


def _rows(db_path: Path, folder: Path) -> str:
    connection = sqlite3.connect(db_path)
    lines = []
    tables = [
        name
        for (name,) in connection.execute(
            "select name from sqlite_master where type in ('table', 'view') order by name"
        )
    ]
    for table in tables:
        cursor = connection.execute(f'select * from "{table}"')
        columns = [d[0] for d in cursor.description]
        rows = []
        for row in cursor:
            values = [
                "<normalised>" if NORMALISED.search(column) and value is not None else value
                for column, value in zip(columns, row, strict=True)
            ]
            rows.append(json.dumps(values, default=repr))
        lines.append(f"## {table} {json.dumps(columns)}")
        lines.extend(sorted(rows))
    connection.close()
    return _clean("\n".join(lines) + "\n", folder)


def _cli(runner, app, db_path: Path, *args: str) -> str:
    result = runner.invoke(app, ["--db", str(db_path), *args])
    return f"exit {result.exit_code}\n{result.output}"


def _capture(name: str, db_path: Path, out: Path, card_runs, helpers) -> None:
    from ccpo_cli.cli.app import app

    runner, folder = helpers.runner, db_path.parent
    target = out / name
    target.mkdir(parents=True)
    (target / "rows.txt").write_text(_rows(db_path, folder))
    (target / "compare.json").write_text(
        _clean(_cli(runner, app, db_path, "compare", "--json"), folder)
    )
    listing = _cli(runner, app, db_path, "runs", "list", "--json")
    (target / "runs-list.json").write_text(_clean(listing, folder))
    names = [row[0] for row in sqlite3.connect(db_path).execute("select name from runs")]
    for run in sorted(names):
        shown = _cli(runner, app, db_path, "runs", "show", run, "--json")
        (target / f"runs-show-{run}.json").write_text(_clean(shown, folder))
    for run in card_runs:
        card_dir = folder / f"snapshot-card-{run}"
        with helpers.fast_cards():
            result = helpers.card(db_path, run, card_dir / "README.md")
        if result.exit_code != 0:
            (target / f"card-{run}.refused").write_text(
                _clean(f"exit {result.exit_code}\n{result.output}", folder)
            )
            continue
        for path in sorted(card_dir.rglob("*")):
            if path.suffix in (".md", ".json") and path.is_file():
                relative = str(path.relative_to(card_dir)).replace("/", "__")
                (target / f"card-{run}--{relative}").write_text(_clean(path.read_text(), folder))


def _oracle_scenarios(out: Path, examples: int, helpers) -> None:
    from hypothesis import HealthCheck, Phase, given, settings

    recipes = []

    @settings(
        derandomize=True,
        max_examples=examples,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(helpers.databases())
    def draw(recipe):
        recipes.append(recipe)

    draw()
    for index, recipe in enumerate(recipes):
        with tempfile.TemporaryDirectory() as scratch:
            db_path = helpers.build(recipe, Path(scratch) / "runs.db")
            _capture(f"oracle-{index:03d}", db_path, out, recipe.card_runs(), helpers)
            (out / f"oracle-{index:03d}" / "recipe.txt").write_text(repr(recipe) + "\n")


def _real_scenarios(out: Path, helpers) -> None:
    for round_name, entries in helpers.REAL_LOG_ROUNDS.items():
        with tempfile.TemporaryDirectory() as scratch:
            db_path, _, _ = helpers.build_real_round(round_name, Path(scratch))
            card_runs = sorted({run for _, run, _ in entries}) + [
                "synthetic-rh-0",
                "synthetic-rh-1",
            ]
            _capture(f"real-{round_name}", db_path, out, card_runs, helpers)


def _train_scenario(out: Path, helpers) -> None:
    from ccpo_cli.cli.app import app

    short = ["--steps", "2", "--tasks", "2", "--group", "2", "--eval-every", "1"]
    short += ["--eval-games", "4", "--max-steps", "6"]
    with tempfile.TemporaryDirectory() as scratch:
        db_path = Path(scratch) / "runs.db"
        for arm in ("return-hard", "grpo"):
            args = ["train", "--arm", arm, "--backend", "local", "--run", arm, *short]
            result = helpers.runner.invoke(app, ["--db", str(db_path), *args])
            assert result.exit_code == 0, result.output
        names = [row[0] for row in sqlite3.connect(db_path).execute("select name from runs")]
        _capture("train", db_path, out, sorted(names), helpers)


def snapshot(out: Path, repo: Path, examples: int) -> None:
    sys.path[:0] = [str(repo), str(repo / "tests")]
    import helpers_card_oracle as helpers

    assert Path(helpers.__file__).resolve().is_relative_to(repo.resolve()), helpers.__file__
    out.mkdir(parents=True)
    _oracle_scenarios(out, examples, helpers)
    _real_scenarios(out, helpers)
    _train_scenario(out, helpers)


# What --diff reads as the moment of a run rather than its behaviour, on top of NORMALISED:
# the code's commit, the run's random uid and session, its process, the timings it measured
# (metrics named ..._s, wall, cpu, timing) and the checkpoint files' bytes, which hold the
# run's uid and times.
TIMING_NAME = re.compile(r"(wall|cpu|timing|_s$)")
MOMENT_KEY = re.compile(
    r'(\\?"(?:pid|session|start_ticks|boot_id|sha256|size_bytes|[^"\\]*(?:wall|cpu|timing)[^"\\]*'
    r'|[^"\\]*_s)\\?"\s*:\s*)(\\?"[^"\\]*\\?"|-?[0-9.eE+-]+)'
)
MOMENT_COLUMNS = {"checkpoints": ("sha256", "size_bytes"), "run_liveness": ("start_ticks",)}


def _stable_row(table: str, columns: list[str], row: list, names: dict) -> list:
    for column in MOMENT_COLUMNS.get(table, ()):
        row[columns.index(column)] = "<moment>"
    if "value" in columns and ("name" in columns or "name_id" in columns):
        name = row[columns.index("name")] if "name" in columns else names.get(row[2])
        if name is not None and TIMING_NAME.search(name):
            row[columns.index("value")] = "<moment>"
    return row


def _stable(path: Path) -> list[str]:
    """A captured file as --diff compares it: the moments above replaced, and rows.txt's rows
    sorted again within each table once they are gone."""
    text = CODE_COMMIT.sub("<commit>", RANDOM_UID.sub("<uid>", path.read_text()))
    text = MOMENT_KEY.sub(r"\1<moment>", text)
    if path.name != "rows.txt":
        return text.splitlines()
    sections: list[tuple[str, list[str], list[list]]] = []
    for line in text.splitlines():
        if line.startswith("## "):
            table, columns = line[3:].split(" ", 1)
            sections.append((table, json.loads(columns), []))
        else:
            sections[-1][2].append(json.loads(line))
    names = {
        row[0]: row[1] for table, _, rows in sections if table == "metric_names" for row in rows
    }
    lines = []
    for table, columns, rows in sections:
        lines.append(f"## {table} {json.dumps(columns)}")
        lines.extend(sorted(json.dumps(_stable_row(table, columns, row, names)) for row in rows))
    return lines


def diff(before: Path, after: Path) -> int:
    differing = []

    def walk(comparison: filecmp.dircmp, prefix: str = "") -> None:
        differing.extend(prefix + name for name in comparison.left_only + comparison.right_only)
        for name in comparison.common_files:
            if _stable(Path(comparison.left, name)) != _stable(Path(comparison.right, name)):
                differing.append(prefix + name)
        for name, sub in comparison.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(before, after))
    files = sum(1 for path in before.rglob("*") if path.is_file())
    print(f"{files} files in {before}; {len(differing)} differ in {after}")
    for name in sorted(differing):
        print(f"  {name}")
    return 1 if differing else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--diff", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.diff:
        return diff(*args.diff)
    if args.out is None:
        parser.error("OUT is required without --diff")
    if args.out.exists():
        shutil.rmtree(args.out)
    snapshot(args.out, args.repo.resolve(), args.examples)
    print(f"wrote {sum(1 for p in args.out.rglob('*') if p.is_file())} files to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
