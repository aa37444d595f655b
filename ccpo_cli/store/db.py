"""Opening runs.db: schema migrations, WAL, foreign keys, and write transactions.

Every connection goes through `open_db`, so foreign keys are enforced everywhere (SQLite
leaves them off per connection) and the schema is always current.

The file knows whose it is: ccpo stamps `PRAGMA application_id` (APPLICATION_ID) and
`PRAGMA user_version` (how many of ccpo's migrations the schema holds) beside sqlite-utils'
migrations table. A file with tables but no stamp is someone else's, a stamp or migration this
version does not know means a newer ccpo wrote it, and a table missing a column ccpo needs
means it was edited by hand; all three are refused (exit 3) before anything is written. A runs
database created before the stamp existed is recognised by its migrations table and stamped
on its next write. Writes go through
`write_transaction`, which takes the write lock up front (BEGIN IMMEDIATE) so that two
processes never deadlock upgrading a read lock, and retries a busy database with backoff
before giving up with one clear message. A runs.db in a folder this process cannot write is
opened read-only (immutable when WAL's `-shm` cannot be made there), so the read commands work;
a file SQLite finds damaged, at opening or at the query that reads the damaged page, is one
line (exit 3) naming `sqlite3 .recover` (`unusable_database`).

One concern, kept in one file past 400 lines: the migrations are one ordered history of the
schema, and `open_db`'s checks of whose file it is, which migrations it holds and which columns
it needs read that same list; they cannot be read apart.
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import os
import random
import sqlite3
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import sqlite_utils
from sqlite_utils import Migrations

from ccpo_cli.errors import CcpoError, InvalidInput

MIGRATIONS = Migrations("ccpo")
# "ccpo" in ASCII, in the header field SQLite reserves for the application that owns a file.
APPLICATION_ID = 0x6363706F

# How long one connection waits inside SQLite for a lock, and how long write_transaction
# keeps retrying on top of that before telling the user.
BUSY_TIMEOUT_MS = 5_000
LOCK_RETRY_SECONDS = 60.0


def utc_now() -> str:
    """An ISO-8601 UTC timestamp with microseconds (sorts as text)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")


# ccpo's tables are reached as `db.table(name)`, not `db[name]`: the latter may be a view and is
# typed `Table | View`, while every name ccpo writes through is a table (the views of m009 are
# for other readers).


def inserted_id(table: sqlite_utils.db.Table) -> int:
    """The id of the row `table.insert(row)` just wrote (call it on what insert returns).

    sqlite-utils types `last_pk` as optional because an insert with ignore=True may write
    nothing; ccpo's inserts write their row, so the id is always there."""
    pk = table.last_pk
    assert pk is not None, f"an insert into {table.name} reported no id"
    return int(pk)


def _append_only(table: str, words: str, *, kept: bool = False) -> str:
    """The triggers that refuse to change a row of `table` (and, `kept`, to delete one): what is
    recorded is evidence, corrected by a new row, never edited. Their text, as SQLite keeps it
    in sqlite_master, is the same whichever migration writes them."""
    refusal = f"BEGIN SELECT RAISE(ABORT, '{words} are append-only'); END;"
    triggers = f"CREATE TRIGGER {table}_append_only BEFORE UPDATE ON {table}\n        {refusal}"
    if kept:
        triggers += (
            f"\n        CREATE TRIGGER {table}_kept BEFORE DELETE ON {table}\n        {refusal}"
        )
    return triggers


@MIGRATIONS()
def m001_initial(db: sqlite_utils.Database) -> None:
    db.executescript(
        """
        CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            arm TEXT,
            arm_fingerprint TEXT,
            base_model TEXT,
            benchmark TEXT,
            seed INTEGER,
            backend TEXT,
            total_steps INTEGER,
            last_step INTEGER,
            status TEXT,
            hardware TEXT,
            data_order_seed INTEGER,
            git_commit TEXT,
            git_dirty INTEGER,
            package_versions TEXT,
            config TEXT,
            step1_rollout_hash TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL
        );
        CREATE TABLE evaluations (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            split TEXT NOT NULL,
            episodes INTEGER,
            successes INTEGER,
            success_rate REAL NOT NULL,
            mean_turns REAL,
            temperature REAL,
            eval_seed INTEGER,
            train_success_rate REAL,
            source_file TEXT,
            source_line INTEGER,
            content_hash TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            UNIQUE (run_id, content_hash)
        );
        CREATE INDEX evaluations_run_step ON evaluations (run_id, step, split);
        CREATE TABLE task_type_results (
            evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE,
            task_type TEXT NOT NULL,
            episodes INTEGER,
            successes INTEGER,
            success_rate REAL NOT NULL,
            PRIMARY KEY (evaluation_id, task_type)
        );
        CREATE TABLE episodes (
            id INTEGER PRIMARY KEY,
            evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE,
            episode_index INTEGER NOT NULL,
            game_id TEXT,
            task_type TEXT,
            won INTEGER NOT NULL,
            turns INTEGER,
            invalid_turns INTEGER,
            reward REAL,
            extra TEXT,
            UNIQUE (evaluation_id, episode_index)
        );
        CREATE TABLE checkpoints (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            path TEXT NOT NULL,
            sha256 TEXT,
            size_bytes INTEGER,
            evaluation_id INTEGER REFERENCES evaluations(id),
            created_at TEXT NOT NULL,
            UNIQUE (run_id, step, path)
        );
        CREATE TABLE publications (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            repo_id TEXT NOT NULL,
            revision TEXT,
            commit_id TEXT,
            card_hash TEXT,
            status TEXT,
            checkpoint_step INTEGER,
            url TEXT,
            published_at TEXT NOT NULL
        );
        CREATE TABLE conflicts (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            split TEXT NOT NULL,
            eval_seed INTEGER,
            kept_evaluation_id INTEGER NOT NULL REFERENCES evaluations(id) ON DELETE CASCADE,
            content_hash TEXT NOT NULL,
            content TEXT NOT NULL,
            source_file TEXT,
            source_line INTEGER,
            recorded_at TEXT NOT NULL,
            UNIQUE (run_id, content_hash)
        );
        """
    )


@MIGRATIONS()
def m002_append_only_evaluations(db: sqlite_utils.Database) -> None:
    # Recorded results are evidence: a correction is a new row or a conflict, never an edit.
    db.executescript(
        f"""
        {_append_only("evaluations", "evaluations")}
        {_append_only("task_type_results", "task_type_results")}
        {_append_only("episodes", "episodes")}
        """
    )


@MIGRATIONS()
def m003_run_facts(db: sqlite_utils.Database) -> None:
    # Protocol facts of a run (store/facts.py): one row per distinct value of a key, so a value
    # recorded later that disagrees is kept as a conflict instead of replacing the first.
    db.table("run_facts").create(
        {"id": int, "run_id": int, "key": str, "value": str, "source": str, "recorded_at": str},
        pk="id",
        not_null={"run_id", "key", "value", "recorded_at"},
        foreign_keys=[("run_id", "runs", "id")],
    )
    db.table("run_facts").create_index(["run_id", "key", "value"], unique=True)


@MIGRATIONS()
def m004_run_identity(db: sqlite_utils.Database) -> None:
    # A run's recorded identity (store/identity.py): a global id created with the run and the
    # host that created it (so rows from two machines can be told apart and merged), whether it
    # trained or only evaluated, and the resolved arm flags and overrides it trained with.
    runs = db.table("runs")
    for column in ("uid", "host", "kind", "arm_flags", "arm_overrides"):
        runs.add_column(column, str)
    for row in list(db.query("SELECT id FROM runs")):
        db.execute("UPDATE runs SET uid = ? WHERE id = ?", [uuid.uuid4().hex, row["id"]])
    # Runs recorded before kinds existed: one created by `ccpo eval` without an arm only evaluated.
    db.execute(
        "UPDATE runs SET kind = CASE WHEN arm IS NULL AND EXISTS (SELECT 1 FROM run_facts f WHERE "
        "f.run_id = runs.id AND f.source = 'ccpo eval') THEN 'evaluation' ELSE 'training' END"
    )
    runs.create_index(["uid"], unique=True)


@MIGRATIONS()
def m006_run_liveness(db: sqlite_utils.Database) -> None:
    # Whether a run's trainer still lives (store/liveness.py): the process that trains it now
    # and its heartbeat, so a killed trainer shows as interrupted instead of running for ever;
    # and why a run failed (the step and the quantity that went non-finite, or the error).
    db.executescript(
        """
        CREATE TABLE run_liveness (
            run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
            session TEXT NOT NULL,
            pid INTEGER NOT NULL,
            host TEXT NOT NULL,
            boot_id TEXT,
            start_ticks INTEGER,
            started_at TEXT NOT NULL,
            heartbeat_at TEXT NOT NULL,
            heartbeat_every_s REAL NOT NULL,
            ended_at TEXT
        );
        CREATE TABLE run_failures (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            session TEXT,
            step INTEGER,
            quantity TEXT,
            value TEXT,
            message TEXT NOT NULL,
            recorded_at TEXT NOT NULL
        );
        CREATE INDEX run_failures_run ON run_failures (run_id, id);
        """
    )


@MIGRATIONS()
def m007_sync(db: sqlite_utils.Database) -> None:
    # Sharing runs through a Hub dataset (store/sync*.py, docs/sync.md). sync_items: what this
    # database knows to be in a dataset (pushed from here or merged from it), one row per item
    # (a run snapshot, an evaluation, a fact, a conflict, a publication), so a push sends only
    # the rest and a card can name the dataset commit its pulled rows came from. sync_parts: the
    # part files already merged or pushed (a pull skips them). sync_log: every push and pull,
    # with the dataset commit. sync_run_conflicts: a run's identity field recorded with another
    # value by another machine (both kept; the local one stands).
    db.executescript(
        """
        CREATE TABLE sync_items (
            id INTEGER PRIMARY KEY,
            repo_id TEXT NOT NULL,
            item_key TEXT NOT NULL,
            run_id INTEGER REFERENCES runs(id) ON DELETE CASCADE,
            direction TEXT NOT NULL,
            commit_id TEXT,
            part TEXT,
            recorded_at TEXT NOT NULL,
            UNIQUE (repo_id, item_key)
        );
        CREATE INDEX sync_items_run ON sync_items (run_id, direction);
        CREATE TABLE sync_parts (
            repo_id TEXT NOT NULL,
            path TEXT NOT NULL,
            blob_id TEXT,
            size_bytes INTEGER,
            direction TEXT NOT NULL,
            commit_id TEXT,
            recorded_at TEXT NOT NULL,
            PRIMARY KEY (repo_id, path)
        );
        CREATE TABLE sync_log (
            id INTEGER PRIMARY KEY,
            repo_id TEXT NOT NULL,
            direction TEXT NOT NULL,
            commit_id TEXT,
            revision TEXT,
            parts INTEGER NOT NULL,
            rows_new INTEGER NOT NULL,
            rows_duplicate INTEGER NOT NULL,
            rows_conflict INTEGER NOT NULL,
            recorded_at TEXT NOT NULL
        );
        CREATE TABLE sync_run_conflicts (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            field TEXT NOT NULL,
            local_value TEXT,
            remote_value TEXT,
            origin TEXT,
            recorded_at TEXT NOT NULL,
            UNIQUE (run_id, field, remote_value)
        );
        """
    )


@MIGRATIONS()
def m005_publication_outbox(db: sqlite_utils.Database) -> None:
    # Hub publications waiting, done, failed or skipped (store/outbox.py): one row per (run,
    # repository, kind, step, content hash), so a killed trainer or uploader resumes the queue
    # and a repeated request is the same row; and one row per attempt at one of them.
    db.executescript(
        """
        CREATE TABLE publication_outbox (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            repo_id TEXT NOT NULL,
            revision TEXT NOT NULL,
            kind TEXT NOT NULL,
            role TEXT NOT NULL,
            step INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            source TEXT,
            private INTEGER NOT NULL,
            endpoint TEXT NOT NULL,
            state TEXT NOT NULL,
            reason TEXT,
            commit_id TEXT,
            tag TEXT,
            base_commit TEXT,
            attempts INTEGER NOT NULL DEFAULT 0,
            next_attempt_at TEXT,
            created_at TEXT NOT NULL,
            updated_at TEXT NOT NULL,
            UNIQUE (run_id, repo_id, kind, step, content_hash)
        );
        CREATE INDEX publication_outbox_state ON publication_outbox (run_id, state);
        CREATE TABLE publication_attempts (
            id INTEGER PRIMARY KEY,
            outbox_id INTEGER NOT NULL REFERENCES publication_outbox(id) ON DELETE CASCADE,
            started_at TEXT NOT NULL,
            finished_at TEXT,
            outcome TEXT,
            reason TEXT,
            commit_id TEXT,
            pid INTEGER
        );
        CREATE INDEX publication_attempts_outbox ON publication_attempts (outbox_id);
        """
    )


@MIGRATIONS()
def m008_retractions(db: sqlite_utils.Database) -> None:
    # Correcting the record without losing it (store/retractions.py): a retraction marks a whole
    # run (evaluation_id NULL) or one evaluation as wrong, with why, who and when (and the
    # resolution that superseded it, when a settled conflict kept another result); a conflict
    # resolution records the value kept for one run, step, split and seed, and settled_conflicts
    # the conflicts it settles (each at most once). All three are append-only.
    db.executescript(
        f"""
        CREATE TABLE retractions (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            evaluation_id INTEGER REFERENCES evaluations(id) ON DELETE CASCADE,
            step INTEGER,
            reason TEXT NOT NULL,
            retracted_by TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            resolution_id INTEGER REFERENCES conflict_resolutions(id)
        );
        CREATE INDEX retractions_run ON retractions (run_id, evaluation_id);
        CREATE UNIQUE INDEX retractions_evaluation ON retractions (evaluation_id) WHERE evaluation_id IS NOT NULL;
        CREATE TABLE conflict_resolutions (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            step INTEGER NOT NULL,
            split TEXT NOT NULL,
            eval_seed INTEGER,
            kept_value REAL NOT NULL,
            kept_evaluation_id INTEGER NOT NULL REFERENCES evaluations(id),
            kept_content_hash TEXT NOT NULL,
            reason TEXT,
            resolved_by TEXT NOT NULL,
            recorded_at TEXT NOT NULL
        );
        CREATE INDEX conflict_resolutions_run ON conflict_resolutions (run_id, step);
        CREATE TABLE settled_conflicts (
            conflict_id INTEGER PRIMARY KEY REFERENCES conflicts(id) ON DELETE CASCADE,
            resolution_id INTEGER NOT NULL REFERENCES conflict_resolutions(id) ON DELETE CASCADE
        );
        {_append_only("retractions", "retractions", kept=True)}
        {_append_only("conflict_resolutions", "conflict resolutions", kept=True)}
        {_append_only("settled_conflicts", "settled conflicts", kept=True)}
        """
    )


@MIGRATIONS()
def m009_views(db: sqlite_utils.Database) -> None:
    # Views for readers of runs.db that are not ccpo (pandas, duckdb, sqlite-utils, datasette),
    # so that a plain SELECT leaves out what compare leaves out (docs/runs-db.md, "SQL views"):
    # standing_evaluations holds no retracted evaluation (STANDING, the one condition) and no
    # evaluation of a retracted run; a conflicting result is in `conflicts`, never here, and a
    # settled conflict that kept the other value retracted the row that stood.
    # run_identity is each run with its identity as recorded (the identity reader, not SQL,
    # infers episodes that were not recorded). compare_window is every standing held-out
    # evaluation of a run that is not failed from the default window start on (the default rule
    # of report/window.py, on the recorded total steps, else on the last step), of the
    # run's protocol: the (episodes, temperature) most of its evaluations used.
    # Imported here: store/records.py imports this module.
    from ccpo_cli.store.records import STANDING

    db.executescript(
        f"""
        CREATE VIEW standing_evaluations AS
        SELECT runs.name AS run, e.*
        FROM (SELECT * FROM evaluations WHERE {STANDING}) AS e JOIN runs ON runs.id = e.run_id
        WHERE e.run_id NOT IN (SELECT run_id FROM retractions WHERE evaluation_id IS NULL);

        CREATE VIEW run_identity AS
        SELECT runs.id AS run_id, runs.name AS run, runs.uid, runs.host, runs.kind, runs.arm,
               runs.arm_fingerprint, runs.arm_overrides, runs.base_model, runs.backend, runs.benchmark,
               runs.seed, runs.total_steps, runs.last_step, runs.status, runs.hardware,
               (SELECT json_extract(value, '$') FROM run_facts f WHERE f.run_id = runs.id AND f.key = 'split'
                ORDER BY f.id LIMIT 1) AS split,
               (SELECT json_extract(value, '$') FROM run_facts f WHERE f.run_id = runs.id AND f.key = 'max_steps'
                ORDER BY f.id LIMIT 1) AS turn_limit,
               runs.id IN (SELECT run_id FROM retractions WHERE evaluation_id IS NULL) AS retracted,
               runs.created_at, runs.updated_at
        FROM runs;

        CREATE VIEW compare_window AS
        WITH protocol AS (
            SELECT run_id, episodes, temperature FROM (
                SELECT run_id, episodes, temperature, ROW_NUMBER() OVER (
                    PARTITION BY run_id ORDER BY COUNT(*) DESC, COALESCE(episodes, 0) DESC, temperature) AS rank
                FROM standing_evaluations WHERE split = 'heldout' GROUP BY run_id, episodes, temperature)
            WHERE rank = 1
        ),
        started AS (
            SELECT run_identity.*, CASE
                WHEN total_steps THEN (total_steps * 7 + 14) / 15
                WHEN last_step THEN (last_step * 7 + 14) / 15
                ELSE 0 END AS window_start
            FROM run_identity WHERE NOT retracted AND COALESCE(status, '') != 'failed'
        )
        SELECT started.run, started.run_id, started.kind, started.arm, started.arm_fingerprint,
               started.arm_overrides, started.base_model, started.backend, started.benchmark, started.seed,
               started.split, started.turn_limit, started.window_start, e.id AS evaluation_id, e.step,
               e.success_rate, e.episodes, e.successes, e.temperature, e.mean_turns
        FROM standing_evaluations AS e
        JOIN started ON started.run_id = e.run_id
        JOIN protocol ON protocol.run_id = e.run_id AND protocol.episodes IS e.episodes
                     AND protocol.temperature IS e.temperature
        WHERE e.split = 'heldout' AND e.step >= started.window_start;
        """
    )


@MIGRATIONS()
def m010_completed_evaluations(db: sqlite_utils.Database) -> None:
    # A second record of one result that carries a value the first left out (a console's per-type
    # rates, a history's training rate) completes the kept row (store/records.py): a value not
    # recorded may be filled in once; a recorded value, the result and its provenance never change.
    db.executescript(
        """
        DROP TRIGGER evaluations_append_only;
        CREATE TRIGGER evaluations_append_only BEFORE UPDATE ON evaluations
        WHEN NOT (
            NEW.id IS OLD.id AND NEW.run_id IS OLD.run_id AND NEW.step IS OLD.step
            AND NEW.split IS OLD.split AND NEW.success_rate IS OLD.success_rate
            AND NEW.eval_seed IS OLD.eval_seed AND NEW.source_file IS OLD.source_file
            AND NEW.source_line IS OLD.source_line AND NEW.content_hash IS OLD.content_hash
            AND NEW.recorded_at IS OLD.recorded_at
            AND (OLD.episodes IS NULL OR NEW.episodes IS OLD.episodes)
            AND (OLD.successes IS NULL OR NEW.successes IS OLD.successes)
            AND (OLD.mean_turns IS NULL OR NEW.mean_turns IS OLD.mean_turns)
            AND (OLD.temperature IS NULL OR NEW.temperature IS OLD.temperature)
            AND (OLD.train_success_rate IS NULL OR NEW.train_success_rate IS OLD.train_success_rate))
        BEGIN SELECT RAISE(ABORT, 'evaluations are append-only'); END;
        """
    )


@MIGRATIONS()
def m011_metrics(db: sqlite_utils.Database) -> None:
    # Every scalar a run logged, at every step (store/metrics.py, docs/runs-db.md "Logged
    # scalars"): one row per (run, name, step, value), in long format, append-only like the
    # evaluations. A value already recorded for that run, name and step is a duplicate whatever
    # file it came from (IFNULL: SQLite stores a logged NaN as NULL, and NULLs never collide in
    # an index); another value is kept beside it, and the first recorded stands in
    # `metric_steps`. Names and files are stored once (metric_names, metric_sources) so that a
    # row is a few integers and its value: a 150-step verl log holds ~10,000 of them.
    db.executescript(
        f"""
        CREATE TABLE metric_names (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE
        );
        CREATE TABLE metric_sources (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            source_file TEXT NOT NULL,
            recorded_at TEXT NOT NULL,
            UNIQUE (run_id, source_file)
        );
        CREATE TABLE metrics (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            name_id INTEGER NOT NULL REFERENCES metric_names(id),
            step INTEGER NOT NULL,
            value REAL,
            source_id INTEGER REFERENCES metric_sources(id) ON DELETE CASCADE,
            source_line INTEGER
        );
        CREATE UNIQUE INDEX metrics_value ON metrics (run_id, name_id, step, IFNULL(value, 'NaN'));
        {_append_only("metrics", "metrics")}
        {_append_only("metric_names", "metric names")}
        {_append_only("metric_sources", "metric sources")}

        CREATE VIEW run_metrics AS
        SELECT runs.name AS run, m.run_id, m.step, n.name, m.value, s.source_file, m.source_line, m.id
        FROM metrics AS m JOIN runs ON runs.id = m.run_id JOIN metric_names AS n ON n.id = m.name_id
        LEFT JOIN metric_sources AS s ON s.id = m.source_id;

        CREATE VIEW metric_steps AS
        SELECT runs.name AS run, first.run_id, first.step,
               json_group_object(n.name, first.value) AS metrics
        FROM (SELECT run_id, name_id, step, value FROM metrics
              WHERE id IN (SELECT MIN(id) FROM metrics GROUP BY run_id, name_id, step)) AS first
        JOIN runs ON runs.id = first.run_id JOIN metric_names AS n ON n.id = first.name_id
        GROUP BY first.run_id, first.step;
        """
    )


@MIGRATIONS()
def m012_sync_held_rows(db: sqlite_utils.Database) -> None:
    # Only this machine writes its own runs (store/sync_trust.py): a pulled row that would change
    # one of them (an evaluation, a conflict, a fact, a publication, a retraction or a settled
    # conflict) is held here, out of every number, until `ccpo sync accept` merges it or `ccpo
    # sync reject` sets it aside. state: held, accepted or rejected.
    db.executescript(
        """
        CREATE TABLE sync_held_rows (
            id INTEGER PRIMARY KEY,
            run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
            part_table TEXT NOT NULL,
            item_key TEXT NOT NULL,
            row TEXT NOT NULL,
            repo_id TEXT NOT NULL,
            commit_id TEXT,
            part TEXT NOT NULL,
            state TEXT NOT NULL DEFAULT 'held',
            recorded_at TEXT NOT NULL,
            settled_at TEXT,
            settled_by TEXT,
            UNIQUE (run_id, item_key)
        );
        CREATE INDEX sync_held_rows_run ON sync_held_rows (run_id, state);
        """
    )


def _is_lock_error(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and (
        "locked" in str(error) or "busy" in str(error)
    )


# SQLite's words for a write the file system refused (read-only file, full disk, I/O error).
_WRITE_FAILURES = ("readonly", "read-only", "full", "disk i/o", "unable to open", "no space")


def _is_write_failure(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and any(
        word in str(error).lower() for word in _WRITE_FAILURES
    )


def _db_file(db: sqlite_utils.Database) -> str:
    rows = db.execute("PRAGMA database_list").fetchall()
    return next((row[2] for row in rows if row[1] == "main" and row[2]), ":memory:")


def _write_failed(db: sqlite_utils.Database, error: BaseException) -> CcpoError:
    return CcpoError(f"{_db_file(db)}: the write failed and nothing was recorded ({error})")


def _with_lock_retry(action, what: str):
    deadline = time.monotonic() + LOCK_RETRY_SECONDS
    delay = 0.05
    while True:
        try:
            return action()
        except sqlite3.OperationalError as error:
            if not _is_lock_error(error) or time.monotonic() > deadline:
                if _is_lock_error(error):
                    raise CcpoError(
                        f"{what}: the database stayed locked by another writer for "
                        f"{LOCK_RETRY_SECONDS:.0f} s; try again"
                    ) from None
                raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 1.0)


def unusable_database(path: str, error: BaseException) -> InvalidInput:
    """The one line for a file SQLite cannot read as a database (a damaged page, not SQLite)."""
    return InvalidInput(
        f"{path}: not a usable runs database ({error}); if it is a damaged runs.db, "
        f"`sqlite3 {path} .recover | sqlite3 recovered.db` saves what can still be read"
    )


def is_damaged_database(error: BaseException) -> bool:
    """Whether an sqlite3 error says the file is damaged or no database (not a lock, not a
    constraint): SQLite finds a damaged page only when a query reads it."""
    if not isinstance(error, sqlite3.DatabaseError):
        return False
    text = str(error).lower()
    return type(error) is sqlite3.DatabaseError or "malformed" in text or "not a database" in text


def _folder_writable(path_text: str) -> bool:
    return os.access(Path(path_text).parent, os.W_OK)


def _sqlite_connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit: `write_transaction`) that
    waits for locks and may be used from the thread that did not open it. `uri` is passed only
    when the target is one (a plain path is given as a path alone)."""
    return sqlite3.connect(
        target,
        **({"uri": True} if uri else {}),
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )


def _connect_read_only(path_text: str) -> sqlite3.Connection:
    """A runs.db in a folder this process cannot write: read-only, and immutable when SQLite
    cannot open WAL's shared-memory file there (a WAL database needs `-shm` beside it)."""
    uri = "file:" + urllib.parse.quote(str(Path(path_text).resolve()))
    error: sqlite3.Error | None = None
    for query in ("mode=ro", "immutable=1"):
        connection = _sqlite_connect(f"{uri}?{query}", uri=True)
        try:
            connection.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return connection
        except sqlite3.Error as failed:
            error = failed
            connection.close()
    assert error is not None
    raise error


def _checked_location(path_text: str, must_exist: bool) -> bool:
    """Whether the runs.db at `path_text` is to be opened read-only (a read command's file in a
    folder this process cannot write); InvalidInput for a folder that does not exist, or a file
    a read command needs that is not there."""
    parent = Path(path_text).parent
    if not parent.is_dir():
        raise InvalidInput(f"{path_text}: folder {parent} does not exist")
    if must_exist and not Path(path_text).is_file():
        raise InvalidInput(
            f"{path_text}: no such runs database (check --db / CCPO_DB); "
            "this command only reads one and never creates it"
        )
    return must_exist and not _folder_writable(path_text)


def _connect(path_text: str, read_only: bool) -> sqlite3.Connection:
    return _connect_read_only(path_text) if read_only else _sqlite_connect(path_text)


def _use_wal(db: sqlite_utils.Database, path_text: str, must_exist: bool) -> None:
    """WAL, so readers never block the writer; a read command on a file it cannot write goes
    on in the journal mode the file has."""
    try:
        _with_lock_retry(lambda: db.execute("PRAGMA journal_mode = WAL"), path_text)
    except sqlite3.OperationalError as error:
        if not (must_exist and _is_write_failure(error)):
            raise
    db.execute("PRAGMA synchronous = NORMAL")


def open_db(path: str | Path, *, must_exist: bool = False) -> sqlite_utils.Database:
    """Open (creating if needed) a runs database, migrated to the current schema.

    The connection is in autocommit mode outside explicit transactions, uses WAL, waits for
    locks, and enforces foreign keys. Use `write_transaction(db)` for every multi-row write.
    ``":memory:"`` gives a private in-memory database (tests). `must_exist` (the read-only
    commands) refuses a missing file instead of creating an empty database, and leaves an
    unstamped database as it is; in a folder this process cannot write it opens the file
    read-only (reads work; a write fails with one line).
    """
    path_text = str(path)
    read_only = path_text != ":memory:" and _checked_location(path_text, must_exist)
    try:
        db = _LineScripts(_connect(path_text, read_only))
        db.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        db.execute("PRAGMA foreign_keys = ON")
        stamped = _check_identity(db, path_text)
        if read_only and MIGRATIONS.pending(db):
            raise InvalidInput(
                f"{path_text}: written by an older ccpo and its folder cannot be written, so it "
                "cannot be brought to this schema; copy it to a folder you can write"
            )
        if path_text != ":memory:" and not read_only:
            _use_wal(db, path_text, must_exist)
        if MIGRATIONS.pending(db) or (not stamped and not must_exist):
            with write_transaction(db):
                # apply() re-checks under the write lock: another process may have migrated.
                MIGRATIONS.apply(db)
                _stamp(db)
        _check_columns(db, path_text)
    except sqlite3.DatabaseError as error:
        if _is_lock_error(error):
            raise
        if _is_write_failure(error):
            raise CcpoError(f"{path_text}: cannot write the database ({error})") from None
        raise unusable_database(path_text, error) from None
    return db


def check_writable(db: sqlite_utils.Database, why: str) -> None:
    """CcpoError (exit 1) unless a write transaction can start: before an action whose record
    must be written afterwards (a sync push records what it pushed)."""
    try:
        _with_lock_retry(lambda: db.execute("BEGIN IMMEDIATE"), "write")
        # BEGIN succeeds on a read-only connection: writing the stamp back as it is does not.
        application_id = db.execute("PRAGMA application_id").fetchone()[0]
        db.execute(f"PRAGMA application_id = {int(application_id)}")
    except sqlite3.OperationalError as error:
        if _is_write_failure(error):
            raise CcpoError(
                f"{_db_file(db)}: cannot be written ({error}), and {why}; nothing was done"
            ) from None
        raise
    finally:
        if db.conn.in_transaction:
            db.execute("ROLLBACK")


def _known_migrations() -> list[str]:
    return [migration.name for migration in MIGRATIONS.pending(sqlite_utils.Database(memory=True))]


def _stamp(db: sqlite_utils.Database) -> None:
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS.applied(db))}")


def _check_identity(db: sqlite_utils.Database, path: str) -> bool:
    """Whether the file carries ccpo's stamp; InvalidInput for a file ccpo must not touch."""
    application_id = db.execute("PRAGMA application_id").fetchone()[0]
    user_version = db.execute("PRAGMA user_version").fetchone()[0]
    tables = [name for name in db.table_names() if not name.startswith("sqlite_")]
    applied = [migration.name for migration in MIGRATIONS.applied(db)]
    if application_id not in (0, APPLICATION_ID):
        raise InvalidInput(
            f"{path}: an SQLite file of another application (application_id "
            f"{application_id:#x}), not a ccpo runs database; refusing to touch it"
        )
    if application_id == 0 and tables and not applied:
        raise InvalidInput(
            f"{path}: an SQLite file with tables of its own ({', '.join(sorted(tables)[:5])}) "
            "and no ccpo schema; not a ccpo runs database, refusing to touch it"
        )
    known = _known_migrations()
    unknown = [name for name in applied if name not in known]
    if unknown:
        raise InvalidInput(
            f"{path}: written by a newer ccpo (it holds migration(s) this ccpo does not know: "
            f"{', '.join(unknown)}); upgrade ccpo to use it"
        )
    if user_version > len(known):
        raise InvalidInput(
            f"{path}: written by a newer ccpo (schema version {user_version}, this ccpo knows "
            f"up to {len(known)}); upgrade ccpo to use it"
        )
    if application_id == APPLICATION_ID and not applied:
        raise InvalidInput(
            f"{path}: stamped as a ccpo runs database but its migrations table is gone; "
            "not a usable runs database"
        )
    return application_id == APPLICATION_ID


class _LineScripts(sqlite_utils.Database):
    """sqlite-utils' Database, with a script inside a transaction run a statement at a time,
    cut at line ends: ccpo opens every runs database (and builds the reference schema) so.

    Inside a transaction sqlite-utils cuts a script into statements by testing every prefix of
    it, one character longer each time, which made the migrations' long view SELECTs most of a
    command's start-up. A statement of ccpo's migrations ends at a line end; a line that holds
    two, and any script outside a transaction, go through sqlite-utils' own executescript."""

    def executescript(self, sql: str) -> sqlite3.Cursor:
        if not self.conn.in_transaction:
            return super().executescript(sql)
        cursor, statement = self.conn.cursor(), ""
        for line in sql.splitlines(keepends=True):
            statement += line
            if sqlite3.complete_statement(statement):
                try:
                    cursor.execute(statement)
                except sqlite3.ProgrammingError:  # more than one statement on its last line
                    cursor = super().executescript(statement)
                statement = ""
        if statement.strip():
            cursor = super().executescript(statement)
        return cursor


@functools.lru_cache(maxsize=1)
def _expected_columns() -> dict[str, frozenset[str]]:
    reference = _LineScripts(memory=True)
    MIGRATIONS.apply(reference)
    return {
        table.name: frozenset(table.columns_dict)
        for table in reference.tables
        if table.name != Migrations.migrations_table
    }


def _check_columns(db: sqlite_utils.Database, path: str) -> None:
    for name, expected in _expected_columns().items():
        table = db.table(name)
        if not table.exists():
            raise InvalidInput(
                f"{path}: table {name} is missing; the schema was changed by hand, "
                "not a usable runs database"
            )
        missing = sorted(expected - set(table.columns_dict))
        if missing:
            raise InvalidInput(
                f"{path}: table {name} lacks column(s) {', '.join(missing)} "
                "(renamed or dropped by hand?); not a usable runs database"
            )


@contextlib.contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """One all-or-nothing write. Nested use becomes a savepoint of the outer transaction.

    The outermost level takes the write lock immediately, retrying a busy database with
    backoff; an exception rolls everything back.
    """
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    try:
        _with_lock_retry(lambda: db.execute("BEGIN IMMEDIATE"), "write")
    except sqlite3.OperationalError as error:
        if _is_write_failure(error):
            raise _write_failed(db, error) from None
        raise
    try:
        if db.execute("PRAGMA application_id").fetchone()[0] == 0 and MIGRATIONS.applied(db):
            _stamp(db)  # a runs.db from before the stamp, opened by a read command that now writes
        yield db
    except BaseException as error:
        if db.conn.in_transaction:
            db.execute("ROLLBACK")
        if _is_write_failure(error):
            raise _write_failed(db, error) from None
        raise
    else:
        try:
            _with_lock_retry(lambda: db.execute("COMMIT"), "commit")
        except BaseException as error:
            if db.conn.in_transaction:
                db.execute("ROLLBACK")
            if _is_write_failure(error):
                raise _write_failed(db, error) from None
            raise
