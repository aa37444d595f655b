"""What `ccpo runs show RUN` shows of one run: its record, identity and facts, every evaluation
(retracted ones included), conflicts and their settlements, checkpoints, publications and the
outbox, and what `ccpo sync` brought or held for it, as one document (its `--json`)."""

from __future__ import annotations

from typing import Any

import sqlite_utils

from ccpo_cli.store.facts import run_facts
from ccpo_cli.store.identity import run_identity
from ccpo_cli.store.liveness import annotate_runs
from ccpo_cli.store.outbox import run_outbox
from ccpo_cli.store.queries import (
    get_run,
    run_checkpoints,
    run_conflicts,
    run_evaluations,
    run_publications,
)
from ccpo_cli.store.retractions import resolutions
from ccpo_cli.store.sync import dataset_sources
from ccpo_cli.store.sync_runs import run_field_conflicts
from ccpo_cli.store.sync_trust import held_rows


def run_document(db: sqlite_utils.Database, run: str) -> dict[str, Any]:
    """The document of `ccpo runs show RUN`, its keys in the order the JSON shows them; the
    run's status is the one to show (`annotate_runs`: a run whose trainer died is interrupted)."""
    shown = annotate_runs(db, [get_run(db, run)])[0]
    return {
        "run": shown,
        "identity": run_identity(db, run).as_dict(),
        "facts": run_facts(db, shown["id"])["values"],
        "evaluations": run_evaluations(db, run, split=None, include_retracted=True),
        "conflicts": run_conflicts(db, run),
        "resolutions": resolutions(db, [shown["id"]]).get(shown["id"], []),
        "checkpoints": run_checkpoints(db, run),
        "publications": run_publications(db, run),
        "publication_outbox": run_outbox(db, run),
        "dataset_sources": dataset_sources(db, shown["id"]),
        "field_conflicts": run_field_conflicts(db, shown["id"]),
        "held_from_sync": held_rows(db, shown["id"]),
    }
