"""The per-file table of the real logs beside this repository (shared/real-logs, every round):
for each file (and each pair of files of one run), the validation values it holds, the values
`ccpo ingest` recorded in runs.db, and the conflicts it left.

Usage: python scripts/ingest_real_logs_table.py [REAL_LOGS_FOLDER] [--json]

Held values are counted here, from the files, without ccpo's readers: every step's
`val/success_rate`, per-type rate (a benchmark's `val/<type>_success_rate`, Search-R1's
`val/test_score/<source>`, verl's `val-aux/<source>/answer_em/mean@1`) and, at a step that
validated, the training rate `episode/success_rate` (runs.db keeps it with the evaluation).
Recorded values are read back from runs.db: one per evaluation, per task-type row and per
training rate recorded. A file whose warning names a `--metric` option is ingested again with
it (the table says so). Each file or pair is ingested into a fresh runs.db in a temporary folder.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from ccpo_cli.store.readers.metric_names import OVERALL_KEY as OVERALL  # the names logs use
from ccpo_cli.store.readers.metric_names import TRAIN_SUCCESS_KEY as TRAIN

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LOGS = ROOT.parent / "shared" / "real-logs"
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
RAY = re.compile(r"\((?:[^\s()]+ )?pid=\d+(?:, ip=[^)]*)?\) ?")
STEP = re.compile(r"step:(\d+) - ")
VALUE = re.compile(r"(?:^|\s)([\w@./-]+(?: \([^)]*\))?):(-?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan))")
SEARCH = r"(?:nq|triviaqa|popqa|hotpotqa|2wikimultihopqa|musique|bamboogle)"
PER_TYPE = re.compile(
    rf"^(?:val/\w+_success_rate|val/test_score/{SEARCH}|val-aux/{SEARCH}/answer_em/mean@1)$"
)
INITIAL = re.compile(r"Initial validation metrics: (\{.*?\})", re.S)
SUFFIXES = (".log", ".txt", ".csv", ".jsonl", ".json")
# Files of one run, ingested into one run in this order: the result is one record per step.
PAIRS = (
    (
        "round4/ymguan_alfworld_grpo_observe_qwen25_7b_seed0_20260415_104809.log",
        "round4/ymguan_webshopdir_alfworld_observe_history_lmlyvpa6.csv",
    ),
    (
        "round4/ymguan_webshopdir_alfworld_observe_history_lmlyvpa6.csv",
        "round4/ymguan_alfworld_grpo_observe_qwen25_7b_seed0_20260415_104809.log",
    ),
    (
        "round4/ymguan_alfworld_grpo_observe_qwen25_7b_seed0_20260415_104809.log",
        "round4/ymguan_alfworld_grpo7b_lmlyvpa6_a1a2_observe.csv",
    ),
    (
        "round4/ymguan_alfworld_evalonly_grpo7b_step100_envseed123.log",
        "round4/ymguan_alfworld_evalonly_grpo7b_step100_envseed456.log",
        "round4/ymguan_alfworld_evalonly_grpo7b_step100_envseed789.log",
    ),
    (
        "round4/wallace_search_grpo_seg1_pre_resume_step100.log",
        "round4/wallace_search_grpo_seg2_resume_from100.log",
    ),
    (
        "round4/wallace_search_gigpo_seg1_pre_resume_step100.log",
        "round4/wallace_search_gigpo_seg2_resume_from100.log",
    ),
    (
        "round3/sfff_alfworld_grpo_qwen25_15b_20260524_112823_output.log",
        "round3/sfff_alfworld_grpo_qwen25_15b_20260524_112823_wandb-summary.json",
    ),
)


def _counted(values: dict[int, dict[str, float]]) -> int:
    """Validation values held: overall and per-type rates, the overall a step's per-source rates
    determine when it logs none (all sources equal: the pooled rate is theirs), and the training
    rate at a step that validated."""
    held = 0
    for metrics in values.values():
        rates = [key for key in metrics if key == OVERALL or PER_TYPE.match(key)]
        held += len(rates)
        if rates and OVERALL not in rates and len({metrics[key] for key in rates}) == 1:
            held += 1
        if rates and TRAIN in metrics:
            held += 1
    return held


def _text_values(path: Path) -> dict[int, dict[str, float]]:
    text = RAY.sub("", ANSI.sub("", path.read_text(errors="replace")))
    found: dict[int, dict[str, float]] = {}
    starts = list(STEP.finditer(text))
    for index, start in enumerate(starts):
        end = starts[index + 1].start() if index + 1 < len(starts) else len(text)
        segment = text[start.end() : end].split("\n\n")[0]
        metrics = found.setdefault(int(start.group(1)), {})
        for key, value in VALUE.findall(" " + segment.replace("\n", " ")):
            metrics.setdefault(key, float(value))
    initial = INITIAL.search(text.replace('"\n "', "").replace("\n", " "))
    validated = any(
        key == OVERALL or PER_TYPE.match(key) for metrics in found.values() for key in metrics
    )
    if initial is not None and not validated:  # a launch that printed its only validation
        for key, value in re.findall(r"'([^']+)': (?:np\.float64\()?(-?[\d.]+)", initial.group(1)):
            found.setdefault(0, {})[key] = float(value)
    return found


def _csv_values(path: Path) -> dict[int, dict[str, float]]:
    found: dict[int, dict[str, float]] = {}
    with path.open(newline="", errors="replace") as handle:
        for row in csv.DictReader(handle):
            step_key = next((k for k in ("step", "_step", "Step", "global_step") if k in row), None)
            if step_key is None or not row[step_key]:
                continue
            metrics = found.setdefault(int(float(row[step_key])), {})
            for key, value in row.items():
                name = (key or "").rsplit(" - ", 1)[-1]
                if value not in (None, "") and (name in (OVERALL, TRAIN) or PER_TYPE.match(name)):
                    try:
                        metrics[name] = float(value)
                    except ValueError:
                        continue
    return found


def held_values(path: Path) -> dict[int, dict[str, float]]:
    """{step: {metric: value}} of the file, as it logs them."""
    if path.is_dir():
        output = next(path.rglob("output.log"), None)
        return {} if output is None else _text_values(output)
    if path.suffix == ".csv":
        return _csv_values(path)
    if path.name.endswith("wandb-summary.json"):
        return {}  # a summary's values are the last ones logged, held by its run's output.log
    if path.suffix in (".json", ".jsonl"):
        found: dict[int, dict[str, float]] = {}
        for line in path.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "step" in record:
                found[int(record["step"])] = record
        return found
    return _text_values(path)


def _ingest(db: Path, path: Path, run: str, extra: list[str]) -> dict:
    command = [sys.executable, "-m", "ccpo_cli", "--db", str(db), "ingest", str(path)]
    result = subprocess.run(
        [*command, "--run", run, "--json", *extra], capture_output=True, text=True, cwd=ROOT
    )
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or ["?"])[-1][:160]}
    return json.loads(result.stdout)


def _named_option(document: dict) -> str | None:
    """The first `--metric FROM=TO` a warning names (a success or accuracy before a score or a
    reward), to ingest the file again with it."""
    for warning in document.get("warnings", []):
        if "ingest again with" in warning:
            found = re.search(r"--metric ([^\s=]+=[^\s;,]+)", warning)
            if found is not None:
                return found.group(1)
    return None


def recorded(db: Path) -> tuple[int, int]:
    import sqlite3

    with sqlite3.connect(db) as connection:
        evaluations, rates = connection.execute(
            "SELECT COUNT(*), COUNT(train_success_rate) FROM evaluations"
        ).fetchone()
        types = connection.execute("SELECT COUNT(*) FROM task_type_results").fetchone()[0]
        conflicts = connection.execute("SELECT COUNT(*) FROM conflicts").fetchone()[0]
    return evaluations + rates + types, conflicts


def table_row(logs: Path, names: tuple[str, ...], folder: Path) -> dict:
    db = folder / "runs.db"
    paths = [logs / name for name in names]
    notes: list[str] = []
    aliases: dict[str, str] = {}  # a metric read under the name a warning's --metric gives it
    for path in paths:
        document = _ingest(db, path, "run", [])
        if "error" in document:
            return {"files": names, "held": None, "recorded": None, "note": document["error"]}
        option = _named_option(document)
        if option is not None:
            db.unlink()
            for earlier in paths[: paths.index(path)]:
                _ingest(db, earlier, "run", [])
            document = _ingest(db, path, "run", ["--metric", option])
            if "error" in document:
                return {"files": names, "held": None, "recorded": None, "note": document["error"]}
            notes.append(f"--metric {option}")
            source, target = option.split("=", 1)
            aliases[source] = target
    values, conflicts = recorded(db)
    if all("evalonly" in name for name in names):
        # Evaluation seeds of one checkpoint: each file's validation is an evaluation of its own.
        held = sum(_counted(held_values(path)) for path in paths)
    else:  # files of one run: a step's value logged by two files is one value
        union: dict[int, dict[str, float]] = {}
        for path in paths:
            for step, metrics in held_values(path).items():
                union.setdefault(step, {}).update(
                    {aliases.get(key, key): value for key, value in metrics.items()}
                )
        held = _counted(union)
    return {
        "files": names,
        "held": held,
        "recorded": values,
        "conflicts": conflicts,
        "note": "; ".join(notes),
    }


def all_files(logs: Path) -> list[str]:
    files = []
    for path in sorted(logs.rglob("*")):
        if path.name == "SOURCES.md" or any(
            part.startswith("tzy_wandb_run") for part in path.parts[:-1]
        ):
            continue
        if path.is_dir() and path.name.startswith("tzy_wandb_run"):
            files.append(str(path.relative_to(logs)))
        elif path.is_file() and path.suffix in SUFFIXES:
            files.append(str(path.relative_to(logs)))
    return files


def main(argv: list[str]) -> int:
    as_json = "--json" in argv
    folders = [arg for arg in argv if not arg.startswith("--")]
    logs = Path(folders[0]) if folders else DEFAULT_LOGS
    rows = []
    for names in [(name,) for name in all_files(logs)] + list(PAIRS):
        with tempfile.TemporaryDirectory() as folder:
            rows.append(table_row(logs, names, Path(folder)))
        print(" + ".join(names), rows[-1]["recorded"], rows[-1]["held"], file=sys.stderr)
    if as_json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| file | values recorded / held | conflicts | note |")
    print("|---|---|---|---|")
    for row in rows:
        shown = " + ".join(row["files"])
        counts = "-" if row["held"] is None else f"{row['recorded']} / {row['held']}"
        print(f"| {shown} | {counts} | {row.get('conflicts', '-')} | {row['note']} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
