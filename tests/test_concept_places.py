"""One concept, one place: each concept of docs/architecture.md §3 is decided in the file(s) its
bullet names and nowhere else.

The bullets are read from the page. Every bold title has checks registered here (a title without
one fails, so a new concept gets a check when it gets its bullet), each check is a static scan
of `ccpo_cli/**/*.py` (ast, docstrings skipped) for what *decides* the concept (a definition, a
rule's numbers, a literal compared against or offered as a choice, a write), not for its uses.
A check must find its concept in the place the bullet names (a check that finds nothing there
holds nothing), the place must be named by the bullet (the page and the test cannot drift apart),
and outside the place it must find nothing but the entries of `NOT_THE_CONCEPT` (the same word
meaning something else, each with what it means there).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import ccpo_cli
from ccpo_cli.store.readers import metric_names
from ccpo_cli.store.records import IDENTITY_FIELDS

PACKAGE_DIR = Path(ccpo_cli.__file__).parent
ROOT = PACKAGE_DIR.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"

Finding = tuple[int, str]
Finder = Callable[[str, ast.Module], list[Finding]]


# ---- the page ---------------------------------------------------------------------------------


def concept_bullets() -> dict[str, str]:
    """Bold title -> the bullet's whole text, from §3 of the page."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    section = text[text.index("## 3. ") : text.index("## 4. ")]
    bullets: dict[str, str] = {}
    title = None
    for line in section.splitlines():
        match = re.match(r"- \*\*(.+?)\*\*:?", line)
        if match:
            title = match.group(1)
            bullets[title] = line
        elif title and line.startswith("  "):
            bullets[title] += " " + line.strip()
        else:
            title = None
    return bullets


def named_files(text: str) -> list[str]:
    """The files and folders a bullet names in code spans, as paths from the repository root:
    `ccpo_cli/x.py` as written, `store/records.py` under ccpo_cli/, and a bare `blocks.py`
    beside the file named before it. Names that are no file here are left out."""
    found: list[str] = []
    folder = "ccpo_cli/"
    for span in re.findall(r"`([^`]+)`", text):
        token = span.split()[0]
        if not re.search(r"(\.py|/)$", token):
            continue
        for candidate in (token, "ccpo_cli/" + token, folder + token):
            if (ROOT / candidate).exists():
                found.append(candidate)
                if candidate.endswith(".py"):
                    folder = candidate.rsplit("/", 1)[0] + "/"
                break
    return found


# ---- the code ---------------------------------------------------------------------------------


@cache
def modules() -> dict[str, ast.Module]:
    """Every module of the package and every script of scripts/ (they import the package and
    must not restate it), parsed, by its path from the repository root."""
    return {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"), str(path))
        for path in sorted([*PACKAGE_DIR.rglob("*.py"), *(ROOT / "scripts").glob("*.py")])
    }


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _strings(tree: ast.AST) -> Iterable[ast.Constant]:
    """String constants that are code, not docstrings (comments are not in the tree)."""
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    elif isinstance(node, ast.Subscript):
        parts.append(_dotted(node.value) + "[]")
    return ".".join(reversed(parts))


def defines(*names: str) -> Finder:
    """A function, class or module/class-level name of that name is defined (a second definition
    is a second decision)."""

    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        scopes: list[ast.AST] = [tree] + [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if node.name in names:
                    found.append((node.lineno, f"defines {node.name}"))
        for scope in scopes:
            for statement in getattr(scope, "body", []):
                targets = (
                    statement.targets
                    if isinstance(statement, ast.Assign)
                    else [statement.target]
                    if isinstance(statement, ast.AnnAssign)
                    else []
                )
                if isinstance(getattr(statement, "value", None), (ast.Name, ast.Attribute)):
                    continue  # an alias of a name decided elsewhere (`BACKENDS = vocabulary.BACKENDS`)
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in names:
                        found.append((statement.lineno, f"assigns {target.id}"))
        return found

    return find


def calls(*names: str) -> Finder:
    """A call of a function whose dotted name is, or ends with, one of `names`."""

    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = _dotted(node.func)
                if any(name == n or name.endswith("." + n) for n in names):
                    found.append((node.lineno, f"calls {name}"))
        return found

    return find


def imports(*modules_: str) -> Finder:
    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                if any(name == m or name.startswith(m + ".") for m in modules_):
                    found.append((node.lineno, f"imports {name}"))
                    break
        return found

    return find


def strings(pattern: str, flags: int = 0) -> Finder:
    """A string in the code (not a docstring) matching `pattern`."""
    regex = re.compile(pattern, flags)

    def find(path: str, tree: ast.Module) -> list[Finding]:
        return [
            (node.lineno, f"string {node.value[:60]!r}")
            for node in _strings(tree)
            if regex.search(node.value)
        ]

    return find


def _subjects(tree: ast.AST) -> Iterable[tuple[ast.AST, str | list[ast.expr]]]:
    """(literal, what it decides): each constant in a deciding position, with the text of the
    thing it is compared with, the parameter or keyword it is the default or choice of, or the
    name it is assigned to."""

    def items(node: ast.AST | None) -> list[ast.AST]:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return list(node.elts)
        if isinstance(node, ast.Call) and _dotted(node.func) in ("frozenset", "set", "tuple"):
            return [e for arg in node.args for e in items(arg)]
        if isinstance(node, ast.Subscript) and _dotted(node.value).endswith("Literal"):
            return items(node.slice) or [node.slice]
        return [node] if node is not None else []

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for index, operand in enumerate(operands):
                others = [o for i, o in enumerate(operands) if i != index]
                for item in items(operand):
                    yield item, others
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            pairs = list(
                zip(positional[len(positional) - len(arguments.defaults) :], arguments.defaults)
            )
            pairs += [(a, d) for a, d in zip(arguments.kwonlyargs, arguments.kw_defaults) if d]
            for argument, default in pairs:
                for item in items(default):
                    yield item, argument.arg
            for argument in positional + arguments.kwonlyargs:
                if argument.annotation is not None:
                    for sub in ast.walk(argument.annotation):
                        if isinstance(sub, ast.Subscript) and _dotted(sub.value).endswith(
                            "Literal"
                        ):
                            for item in items(sub):
                                yield item, argument.arg
        elif isinstance(node, ast.keyword) and node.arg:
            for item in items(node.value):
                yield item, node.arg
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            name = " ".join(ast.unparse(t) for t in targets)
            for item in items(node.value):
                yield item, name
            if isinstance(node, ast.AnnAssign):
                for sub in ast.walk(node.annotation):
                    if isinstance(sub, ast.Subscript) and _dotted(sub.value).endswith("Literal"):
                        for item in items(sub):
                            yield item, name
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    yield key, "a dict key"
        elif isinstance(node, ast.MatchValue):
            yield node.value, "a match case"


def literals(values: Iterable[object], about: str = "") -> Finder:
    """One of `values` used to decide: compared with, offered as a default or a choice of, or
    assigned to something whose text matches `about` (any thing when `about` is empty)."""
    wanted = set(values)
    subject = re.compile(about, re.IGNORECASE) if about else None

    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        for item, about_what in _subjects(tree):
            if not (
                isinstance(item, ast.Constant)
                and type(item.value) in (str, float, int)
                and item.value in wanted
            ):
                continue
            what = (
                about_what
                if isinstance(about_what, str)
                else " ".join(ast.unparse(node) for node in about_what)
            )
            if subject is None or subject.search(what):
                found.append((item.lineno, f"{item.value!r} deciding {what[:50]}"))
        return sorted(set(found))

    return find


def constants(*values: float) -> Finder:
    """A number constant anywhere in the code."""

    def find(path: str, tree: ast.Module) -> list[Finding]:
        return [
            (node.lineno, f"the number {node.value!r}")
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and type(node.value) in (int, float)
            and node.value in values
        ]

    return find


def ratio(*pairs: tuple[int, int]) -> Finder:
    """An expression (arithmetic, or a call such as Fraction(7, 15)) holding both numbers of a pair."""

    def numbers(node: ast.AST) -> list[object]:
        if isinstance(node, ast.Constant):
            return [node.value]
        if isinstance(node, ast.BinOp):
            return numbers(node.left) + numbers(node.right)
        if isinstance(node, ast.Call):
            return [n for arg in node.args for n in numbers(arg)]
        return []

    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.BinOp, ast.Call)):
                held = numbers(node)
                for a, b in pairs:
                    if a in held and b in held:
                        found.append((node.lineno, f"the rule {a}/{b}: {ast.unparse(node)[:50]}"))
        return sorted(set(found))

    return find


def hashes_over(*words: str) -> Finder:
    """hashlib.sha256 in a function that hashes something named with one of `words`."""

    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = {
                n.id if isinstance(n, ast.Name) else n.attr
                for n in ast.walk(function)
                if isinstance(n, (ast.Name, ast.Attribute))
            }
            if not any(word in name for name in names for word in words):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and _dotted(node.func).endswith("sha256"):
                    found.append((node.lineno, f"sha256 over {'/'.join(words)} in {function.name}"))
        return sorted(set(found))

    return find


WRITES = ("insert", "insert_all", "upsert", "upsert_all", "update", "delete", "delete_where")


def table_writes(table: str = r"\w+", columns: Iterable[str] | None = None) -> Finder:
    """A write to runs.db: a sqlite-utils write on `db[...]` / `db.table(...)`, or SQL that
    inserts, updates or deletes; `table` limits it to tables whose name matches, `columns` the
    updates to those that set one of these columns (an insert always writes them all)."""
    only = None if columns is None else set(columns)

    def sets_one(call: ast.Call, text: str | None = None) -> bool:
        if (
            only is None
            or call.func.attr.startswith("insert")
            or call.func.attr.startswith("upsert")
        ):  # type: ignore[attr-defined]
            return True
        if text is not None:
            assignments = re.search(r"\bSET\b(.*?)(\bWHERE\b|$)", text, re.IGNORECASE | re.DOTALL)
            set_names = re.findall(r"(\w+)\s*=", assignments.group(1)) if assignments else []
            return bool(only & set(set_names)) or text.lstrip().upper().startswith("INSERT")
        keys = {
            key.value
            for arg in call.args
            if isinstance(arg, ast.Dict)
            for key in arg.keys
            if isinstance(key, ast.Constant)
        }
        return bool(only & keys)

    name = re.compile(rf"^(?:{table})$")
    sql = re.compile(
        rf"^\s*(?:INSERT(?:\s+OR\s+\w+)?\s+INTO|REPLACE\s+INTO|UPDATE|DELETE\s+FROM)\s+({table})\b",
        re.IGNORECASE,
    )

    def find(path: str, tree: ast.Module) -> list[Finding]:
        found = []
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            receiver = node.func.value
            written = None
            if node.func.attr in WRITES:
                if isinstance(receiver, ast.Subscript) and isinstance(receiver.slice, ast.Constant):
                    written = receiver.slice.value
                elif (
                    isinstance(receiver, ast.Call)
                    and isinstance(receiver.func, ast.Attribute)
                    and receiver.func.attr == "table"
                    and receiver.args
                    and isinstance(receiver.args[0], ast.Constant)
                ):
                    written = receiver.args[0].value
            if isinstance(written, str) and name.match(written) and sets_one(node):
                found.append((node.lineno, f"{node.func.attr} into {written}"))
            if node.func.attr in ("execute", "executemany") and node.args:
                first = node.args[0]
                text = first.value if isinstance(first, ast.Constant) else ast.unparse(first)
                if (
                    isinstance(text, str)
                    and sql.search(text.strip("'\"f"))
                    and sets_one(node, text)
                ):
                    found.append((node.lineno, f"SQL {text[:50]!r}"))
        return sorted(set(found))

    return find


def inside(prefix: str, finder: Finder) -> Finder:
    """`finder`, only in the files under `prefix`."""

    def find(path: str, tree: ast.Module) -> list[Finding]:
        return finder(path, tree) if path.startswith(prefix) else []

    return find


def any_of(*finders: Finder) -> Finder:
    def find(path: str, tree: ast.Module) -> list[Finding]:
        return sorted({f for finder in finders for f in finder(path, tree)})

    return find


# ---- the checks -------------------------------------------------------------------------------

BULLET = None  # a check's place is every file its bullet names


@dataclass(frozen=True)
class Check:
    what: str
    find: Finder
    # Files (or folders, ending in "/") that decide the concept, each named by the bullet (or a
    # bullet of `see`); BULLET when the place is whatever the bullet names.
    place: tuple[str, ...] | None
    see: tuple[str, ...] = ()


ESTIMATOR_NAMES = ("grpo", "gigpo", "ccpo")
ALFWORLD_LONG_NAMES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)

CHECKS: dict[str, list[Check]] = {
    "Arms and fingerprints": [
        Check(
            "each flag declared once",
            defines("FLAG_SPECS", "FlagSpec", "coerce_flag"),
            ("ccpo_cli/arms.py",),
        ),
        Check(
            "the fingerprint: sha256 over an arm's flags",
            hashes_over("flags", "fingerprint"),
            # the reader's inferred external arm hashes the flags a log printed
            ("ccpo_cli/arms.py", "ccpo_cli/store/identity.py"),
            see=("A run's recorded identity",),
        ),
    ],
    "Benchmarks": [
        Check(
            "reading configs/benchmarks and naming a benchmark",
            any_of(
                literals(["benchmarks"]),
                strings(r"^benchmarks$"),
                defines("load_benchmark", "detect_benchmark", "benchmark_for_env_name"),
            ),
            ("ccpo_cli/benchmarks.py",),
        ),
    ],
    "The estimator table": [
        Check(
            "an estimator named to decide something",
            literals(ESTIMATOR_NAMES, about=r"estimator|method|family"),
            ("ccpo_cli/estimator_registry.py",),
        ),
        Check(
            "the table",
            defines("ESTIMATORS", "ESTIMATOR_NAMES", "FAMILIES", "lookup"),
            ("ccpo_cli/estimator_registry.py",),
        ),
    ],
    "The batch schema": [
        Check(
            "the batch type and its keys",
            defines("RolloutBatch", "BATCH_KEYS"),
            ("ccpo_cli/estimators/batch.py",),
        ),
        Check(
            "reading and writing batch files",
            any_of(
                defines("save_batch", "load_batch", "load_dumped_batch"),
                calls("np.savez", "np.savez_compressed", "np.load", "numpy.load", "np.save"),
            ),
            ("ccpo_cli/batch_io.py",),
        ),
    ],
    "The advantage computation": [
        Check(
            "the entry point and the compute functions attached to the table",
            any_of(defines("compute_advantages"), calls("register_compute")),
            ("ccpo_cli/estimators/compute.py",),
        ),
    ],
    "runs.db schema": [
        Check(
            "the schema: tables, views, triggers, indexes and columns",
            any_of(
                strings(
                    r"\b(CREATE\s+(TABLE|VIEW|TRIGGER|(UNIQUE\s+)?INDEX)|ALTER\s+TABLE|DROP\s+(TABLE|VIEW|TRIGGER|INDEX))\b"
                ),
                calls("create_view", "create_table"),
            ),
            ("ccpo_cli/store/db.py",),
        ),
        Check("writes to runs.db", table_writes(), ("ccpo_cli/store/",)),
    ],
    "A run's global identity": [
        Check(
            "the host of a run (CCPO_HOST or the host name)",
            any_of(strings(r"^CCPO_HOST$"), defines("this_host", "HOST_ENV")),
            ("ccpo_cli/store/records.py",),
        ),
        Check("NAME@HOST", defines("host_label", "qualified_run_name"), ("ccpo_cli/names.py",)),
    ],
    "Sharing runs between machines": [
        Check(
            "parquet parts of runs",
            any_of(
                inside("ccpo_cli/store/", imports("pyarrow")),
                defines("write_parts", "merge_part", "item_key", "part_path"),
            ),
            BULLET,
        ),
    ],
    "Matrix designs": [
        Check(
            "the designs and their files",
            any_of(defines("Design", "load_design"), strings(r"^designs$")),
            ("ccpo_cli/experiments/designs.py",),
        ),
        Check("room sizes", defines("ROOMS"), ("ccpo_cli/task_types.py",)),
        Check(
            "the shipped set of each size", defines("manifest_name"), ("ccpo_cli/envs/games.py",)
        ),
    ],
    "The matrix": [
        Check(
            "the matrix touches Ray",
            inside("ccpo_cli/experiments/", imports("ray")),
            ("ccpo_cli/experiments/ray_blocks.py",),
        ),
        Check(
            "the matrix trains",
            inside("ccpo_cli/experiments/", calls("train_arm")),
            ("ccpo_cli/experiments/blocks.py",),
        ),
        Check(
            "a design's window start: its own, else the matrix rule",
            calls("MATRIX_WINDOW.start"),
            ("ccpo_cli/experiments/matrix.py",),
        ),
    ],
    "A matrix's records and its cost before it starts": [
        Check(
            "a matrix's records",
            defines("block_record", "load_records", "recorded_seeds", "write_record"),
            ("ccpo_cli/experiments/records.py",),
        ),
        Check(
            "the cost of a matrix before it starts",
            defines("budget_plan", "MatrixCost"),
            ("ccpo_cli/experiments/budget.py",),
        ),
        Check(
            "the evaluation-noise share",
            defines("noise_share", "reevaluate"),
            ("ccpo_cli/experiments/eval_noise.py",),
        ),
        Check(
            "the chi-squared and F quantiles",
            defines("chi2_ppf", "f_ppf"),
            ("ccpo_cli/distributions.py",),
        ),
    ],
    "The testbed's controls and cost": [
        Check(
            "the step-information control and the oracle ceiling",
            defines("permute_within_tasks", "oracle_step_term"),
            BULLET,
        ),
        Check("the A/A twin's rollout stream", defines("rollout_stream"), BULLET),
    ],
    "Corrections to the record": [
        Check("what stands", defines("STANDING"), ("ccpo_cli/store/records.py",)),
        Check(
            "retractions and settled conflicts",
            table_writes(r"retractions|conflict_resolutions|settled_conflicts"),
            ("ccpo_cli/store/retractions.py", "ccpo_cli/store/sync_corrections.py"),
        ),
    ],
    "The seed-list syntax": [
        Check(
            "a seed list parsed",
            any_of(defines("parse_seeds"), calls("_seed_range", "seed_range")),
            ("ccpo_cli/seeds.py",),
        ),
    ],
    "Outputs ccpo may replace": [
        Check(
            "an output replaced only when it carries ccpo's marker",
            any_of(defines("replace_owned", "check_replaceable"), strings(r"^\.ccpo-output$")),
            ("ccpo_cli/owned_output.py",),
        ),
    ],
    "Tables and their formats": [
        Check(
            "CSV written",
            calls("csv.writer", "csv.DictWriter"),
            ("ccpo_cli/report/tables.py", "ccpo_cli/report/trackers.py"),
            see=("Trackers",),
        ),
        Check(
            "Markdown tables written: a separator cell per column",
            strings(r"^:?-{3,}:?\Z"),
            ("ccpo_cli/report/tables.py",),
        ),
        Check("the format picked", defines("emit"), ("ccpo_cli/cli/common.py",)),
    ],
    "The comparison": [
        Check(
            "the typed comparison",
            defines("Comparison", "RunEntry", "ArmSummary", "PairComparison", "NotCompared"),
            ("ccpo_cli/report/comparison.py",),
        ),
        Check(
            "the compare document's keys written",
            strings(r"^(not_compared|reference_levels|seed_window_means|arm_recorded)\Z"),
            ("ccpo_cli/report/comparison.py",),
        ),
        Check(
            "one unit summarised across its seeds",
            defines("arm_summary", "MIN_SEEDS_RESOLVED"),
            ("ccpo_cli/report/arm_summary.py",),
        ),
    ],
    "Short unit labels": [
        Check(
            "labels and keys of units",
            defines("unit_key", "short_labels", "legend_rows"),
            ("ccpo_cli/report/labels.py",),
        ),
    ],
    "Trackers": [
        Check(
            "TensorBoard and trackio written",
            any_of(
                imports("trackio", "torch.utils.tensorboard", "tensorboardX"),
                calls("SummaryWriter", "EventFileWriter"),
            ),
            ("ccpo_cli/report/trackers.py",),
        ),
        Check(
            "the held-out keys of metrics.jsonl",
            any_of(
                defines("OVERALL_KEY", "MEAN_TURNS_KEY", "EPISODES_KEY", "SUCCESSES_KEY"),
                # by value: a key written out again, not imported, is a second place
                strings("^(" + "|".join(map(re.escape, sorted(metric_names.COMMON_KEYS))) + ")$"),
            ),
            ("ccpo_cli/store/readers/metric_names.py",),
        ),
    ],
    "Logged scalars": [
        Check(
            "the metrics table written",
            table_writes("metrics|metric_sources"),
            ("ccpo_cli/store/metrics.py",),
        ),
        Check(
            "which numbers of a record are scalars, and how one is recorded",
            defines("scalar_values", "record_metrics", "metric_series"),
            ("ccpo_cli/store/metrics.py",),
        ),
    ],
    "Best evaluation": [
        Check(
            "the best evaluation chosen", defines("best_evaluation"), ("ccpo_cli/store/queries.py",)
        ),
    ],
    "A run's recorded identity": [
        Check(
            "the reader and its types",
            defines(
                "RunIdentity",
                "ExternalArm",
                "ArmIdentity",
                "ComparisonUnit",
                "infer_episodes",
                "external_arm",
                "run_identity",
            ),
            ("ccpo_cli/store/identity.py",),
        ),
        Check(
            "the one writer",
            any_of(defines("ensure_run"), table_writes("runs", (*IDENTITY_FIELDS, "kind"))),
            # the migrations of runs.db rewrite recorded columns once, when the schema changes
            ("ccpo_cli/store/records.py", "ccpo_cli/store/db.py"),
            see=("runs.db schema",),
        ),
    ],
    "Window statistics": [
        Check(
            "the window formulas",
            defines("window_stats", "MIN_TREND_POINTS", "trend_test"),
            ("ccpo_cli/stats.py",),
        ),
        Check(
            "paired or Welch: the two-arm test",
            any_of(
                defines("two_arm_test", "MIN_PAIRED_SEEDS"),
                calls("welch_t_test", "paired_t_test", "ttest_ind", "ttest_rel", "ttest_1samp"),
            ),
            ("ccpo_cli/stats.py",),
        ),
        Check(
            "where the window starts (7/15 of the run, the matrix's window)",
            any_of(
                ratio((7, 15), (70, 150)),
                defines(
                    "DEFAULT_WINDOW",
                    "default_window_start",
                    "run_window_start",
                    "MatrixWindow",
                    "FractionWindow",
                ),
            ),
            ("ccpo_cli/report/window.py",),
        ),
    ],
    "Isolation check": [
        Check("the isolation check", defines("isolation_check"), ("ccpo_cli/report/isolation.py",)),
    ],
    "Model cards": [
        Check(
            "the card template read and rendered",
            calls("template_path", "templates_dir"),
            ("ccpo_cli/cards/",),
        ),
    ],
    "Card claims": [
        Check(
            "the claim kinds, each made by one function",
            defines(
                "StatusClaim",
                "WindowClaim",
                "BestPointClaim",
                "ArmSeedsClaim",
                "ArmComparisonClaim",
                "GrpoClaim",
                "IsolationClaim",
                "ReferencesClaim",
                "PublishedRowsClaim",
                "LeftOutClaim",
                "status_claim",
                "window_claim",
                "best_point_claim",
                "arm_seeds_claims",
                "arm_comparison_claims",
                "grpo_claim",
                "isolation_claim",
                "references_claim",
                "published_rows_claim",
                "left_out_claim",
                "card_claims",
            ),
            ("ccpo_cli/cards/claims.py",),
        ),
        Check(
            "the one interim/final decision",
            defines("card_status"),
            ("ccpo_cli/report/readiness.py",),
        ),
        Check(
            "what makes an arm difference resolved",
            defines("pair_resolved"),
            ("ccpo_cli/report/compare.py",),
        ),
    ],
    "Card lint": [
        Check(
            "the card checks",
            defines("lint_card", "layout_problems", "require_clean"),
            ("ccpo_cli/cards/lint.py",),
        ),
    ],
    "Hub publish": [
        Check(
            "commits and tags on the Hub",
            calls("create_commit", "create_tag"),
            BULLET,
            see=("Sharing runs between machines",),
        ),
        Check(
            "retries and backoff of Hub calls",
            any_of(
                literals([408, 429, 500, 502, 503, 504]),
                strings(r"^retry-after$", re.IGNORECASE),
                defines("RetryRule", "DEFAULT_RULE", "RETRY_STATUSES"),
            ),
            ("ccpo_cli/hub_access.py", "ccpo_cli/hub_transport.py"),
        ),
    ],
    "Publishing while training": [
        Check("the outbox", table_writes(r"publication_\w+"), ("ccpo_cli/store/outbox.py",)),
        Check(
            "the observer a trainer sees",
            defines("TrainingObserver"),
            ("ccpo_cli/backends/observer.py",),
        ),
        Check(
            "backends import nothing of publishing",
            inside("ccpo_cli/backends/", imports("ccpo_cli.publishing")),
            (),
        ),
    ],
    "verl hook": [
        Check(
            "DataProto <-> batch",
            defines("estimator_inputs", "advantage_tensor", "annotate_rollout_rows"),
            ("ccpo_cli/backends/verl/adapter.py",),
        ),
        Check(
            "the ccpo estimator registered with verl",
            defines("register_in_verl_registry", "registered_estimators", "ESTIMATOR_NAME"),
            ("ccpo_cli/backends/verl/setup_hook.py", "ccpo_cli/backends/verl/worker_env.py"),
        ),
    ],
    "Run ownership and liveness": [
        Check(
            "the trainer lock",
            any_of(imports("fcntl"), calls("flock", "lockf")),
            ("ccpo_cli/backends/local/ownership.py",),
        ),
        Check(
            "whether a trainer lives", table_writes("run_liveness"), ("ccpo_cli/store/liveness.py",)
        ),
    ],
    "Papers and citations": [
        Check(
            "papers.yaml and BibTeX",
            any_of(
                strings(r"^papers\.yaml$"), strings(r"^@(misc|article|software|inproceedings)\{")
            ),
            ("ccpo_cli/papers.py",),
        ),
    ],
    "Task types": [
        Check(
            "short keys and ALFWorld's long names",
            any_of(
                defines("TASK_TYPES", "VERL_METRIC_NAMES", "short_key"),
                *(strings(rf"^{n}$") for n in ALFWORLD_LONG_NAMES),
            ),
            ("ccpo_cli/task_types.py",),
        ),
    ],
    "Vocabulary": [
        Check(
            "a backend named to decide",
            any_of(literals(["local", "verl"], about=r"backend"), defines("BACKENDS")),
            ("ccpo_cli/vocabulary.py",),
        ),
        Check(
            "an agent kind named to decide",
            any_of(
                literals(["oracle", "random", "hf", "vllm"], about=r"agent"),
                defines("AGENT_KINDS", "MODEL_AGENT_KINDS", "SAMPLING_AGENT_KINDS"),
            ),
            ("ccpo_cli/vocabulary.py",),
        ),
        Check(
            "a card status named to decide",
            any_of(
                literals(["interim", "final"], about=r"status"),
                strings(r"^interim$"),  # by value: "final" has other meanings, "interim" none
                defines("CARD_STATUSES"),
            ),
            ("ccpo_cli/vocabulary.py",),
        ),
        Check(
            "an ingest format named to decide",
            any_of(
                literals(
                    ["auto", "ccpo", "verl-file", "console", "csv", "tensorboard", "wandb"],
                    about=r"^(\w+\.)?(input_)?(format|fmt|shape)$",
                ),
                defines("INGEST_FORMATS", "INGEST_FOLDER_FORMATS"),
            ),
            ("ccpo_cli/vocabulary.py",),
        ),
        Check("the evaluation temperature", constants(0.4), ("ccpo_cli/vocabulary.py",)),
    ],
    "Game sets": [
        Check(
            "the manifests read and checked",
            defines("load_manifest", "manifest_path", "materialize", "check_games"),
            ("ccpo_cli/envs/games.py",),
        ),
    ],
}

# What a scan finds that is another concept's word, not this one's: "title | check | file" ->
# what it is. An entry that no longer matches anything fails.
NOT_THE_CONCEPT: dict[str, str] = {
    "Matrix designs | the designs and their files | scripts/testbed_design.py": "the `designs` list of a tried-designs record (docs/testbed-designs-tried.json), not the designs folder",
    "Vocabulary | a card status named to decide | ccpo_cli/cards/context.py": "the card template's variable `interim`, set from `facts.status == INTERIM`",
    "The estimator table | an estimator named to decide something | ccpo_cli/store/facts.py": "verl-agent's own `algorithm.adv_estimator` values, read from its printed config",
    "The estimator table | an estimator named to decide something | ccpo_cli/store/identity.py": "verl-agent's own `adv_estimator` values, naming the external arm a log trained",
    "The estimator table | an estimator named to decide something | ccpo_cli/backends/verl/setup_hook.py": "verl-agent's own `grpo` estimator, which the hook lets verl's trainer set up",
    "The estimator table | an estimator named to decide something | ccpo_cli/backends/verl/worker_env.py": "the `ccpo` value of verl's adv_estimator (the verl hook's name, one for every arm)",
    "The estimator table | an estimator named to decide something | ccpo_cli/report/isolation.py": "`ccpo` as the config namespace `algorithm.ccpo.*`, not an estimator",
    "The testbed's controls and cost | the A/A twin's rollout stream | ccpo_cli/store/identity.py": "the recorded `train.rollout_stream` read back into a run's identity",
    "A run's recorded identity | the one writer | ccpo_cli/store/sync_runs.py": "a run row pulled from another machine's runs.db, written there by ensure_run and copied whole with its uid: the merge decides no identity of its own",
    "Arms and fingerprints | the fingerprint: sha256 over an arm's flags | ccpo_cli/report/labels.py": "the unit key hashes a unit's whole identity (its arm's fingerprint among it), not an arm's flags",
    "Short unit labels | labels and keys of units | ccpo_cli/report/comparison.py": "the fields that carry the unit key labels.py computed",
    "Window statistics | paired or Welch: the two-arm test | ccpo_cli/report/compare.py": "the document's `comparisons[].welch` field: Welch's t reported beside the test two_arm_test chose (docs/compare.schema.json), not a choice",
    "Window statistics | paired or Welch: the two-arm test | ccpo_cli/experiments/matrix.py": "the warm-start home advantage: Welch's t between two groups of per-seed differences (seeds warmed by one arm or the other), not a test of two arms",
}


# ---- the tests --------------------------------------------------------------------------------


def _in(path: str, place: Iterable[str]) -> bool:
    return any(path == entry or (entry.endswith("/") and path.startswith(entry)) for entry in place)


def _place(title: str, check: Check) -> tuple[str, ...]:
    if check.place is not BULLET:
        return check.place
    bullets = concept_bullets()
    return tuple(f for t in (title, *check.see) for f in named_files(bullets[t]))


@cache
def _all_findings() -> dict[tuple[str, str], dict[str, list[Finding]]]:
    """(title, check) -> file -> what the check finds there."""
    return {
        (title, check.what): {
            path: found for path, tree in modules().items() if (found := check.find(path, tree))
        }
        for title, checks in CHECKS.items()
        for check in checks
    }


def _findings(title: str, check: Check) -> dict[str, list[Finding]]:
    return _all_findings()[(title, check.what)]


def test_every_concept_of_the_page_has_a_check():
    titles = list(concept_bullets())
    assert len(titles) > 20, titles  # the page was read
    missing = [title for title in titles if not CHECKS.get(title)]
    assert missing == [], "register a check for each new concept of docs/architecture.md §3"
    stale = sorted(set(CHECKS) - set(titles))
    assert stale == [], "these checks name no concept of docs/architecture.md §3"


def test_each_place_is_named_by_its_bullet():
    bullets = concept_bullets()
    problems = []
    for title, checks in CHECKS.items():
        for check in checks:
            named = {f for t in (title, *check.see) for f in named_files(bullets[t])}
            for entry in _place(title, check):
                if entry not in named:
                    problems.append(f"{title}: {check.what}: the page names no {entry}")
                if not (ROOT / entry).exists():
                    problems.append(f"{title}: {check.what}: {entry} is no file")
    assert problems == [], "\n".join(problems)


def test_each_check_finds_its_concept_in_its_place():
    empty = []
    for title, checks in CHECKS.items():
        for check in checks:
            place = _place(title, check)
            if not place:  # a rule that nothing does it (backends never import publishing)
                continue
            if not any(_in(path, place) for path in _findings(title, check)):
                empty.append(f"{title}: {check.what}: nothing found in {', '.join(place)}")
    assert empty == [], "\n".join(empty)


def test_each_concept_is_decided_only_in_its_place():
    problems, used = [], set()
    for title, checks in CHECKS.items():
        for check in checks:
            place = _place(title, check)
            for path, found in _findings(title, check).items():
                if _in(path, place):
                    continue
                key = f"{title} | {check.what} | {path}"
                if key in NOT_THE_CONCEPT:
                    used.add(key)
                    continue
                problems += [
                    f"{path}:{line}: {what} ({title}: {check.what})" for line, what in found
                ]
    assert problems == [], "decided outside its place (docs/architecture.md §3):\n" + "\n".join(
        problems
    )
    listed = set(NOT_THE_CONCEPT)
    assert listed <= used, f"listed but no longer found: {sorted(listed - used)}"


def test_the_finders_find_what_they_look_for():
    """Each kind of scan, on a small module that decides something, says so; a use does not."""
    sample = ast.parse(
        '"""Docstring: local, 7/15, CREATE TABLE x."""\n'
        "from fractions import Fraction\n"
        "import pyarrow.parquet as pq\n"
        "START = Fraction(7, 15)\n"
        "def f(backend='local', *, kind: Literal['hf', 'vllm'] = 'hf'):\n"
        "    if backend == 'verl' or x.estimator in ('grpo',):\n"
        "        db['runs'].insert({})\n"
        "        db.table('retractions').insert({})\n"
        "        db.execute('INSERT INTO runs VALUES (1)')\n"
        "    log('local')\n"
        "    return hashlib.sha256(json.dumps(flags).encode())\n"
        "def ensure_run(): ...\n"
    )
    path = "ccpo_cli/sample.py"
    backend = literals(["local", "verl"], about="backend")(path, sample)
    assert [line for line, _ in backend] == [5, 6]  # not the docstring, not the log call
    assert literals(["hf"], about="kind")(path, sample)
    assert literals(ESTIMATOR_NAMES, about="estimator")(path, sample)
    assert ratio((7, 15))(path, sample) == [(4, "the rule 7/15: Fraction(7, 15)")]
    assert strings("CREATE TABLE")(path, sample) == []
    assert len(table_writes()(path, sample)) == 3
    assert len(table_writes("runs")(path, sample)) == 2
    assert hashes_over("flags")(path, sample)
    assert defines("ensure_run")(path, sample)
    assert imports("pyarrow")(path, sample)
    assert inside("ccpo_cli/other/", imports("pyarrow"))(path, sample) == []
    assert named_files("`ccpo_cli/experiments/matrix.py` and `blocks.py`, `store/db.py`") == [
        "ccpo_cli/experiments/matrix.py",
        "ccpo_cli/experiments/blocks.py",
        "ccpo_cli/store/db.py",
    ]
