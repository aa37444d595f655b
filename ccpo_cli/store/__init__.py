"""runs.db: the record of every run, evaluation, checkpoint and publication.

Open it with `open_db(path)`; write with `ensure_run`, `update_run_state`, `record_evaluation`,
`record_checkpoint`, `record_publication`; read with the functions from `queries`;
bring in training logs with `ingest_file`.
"""

from ccpo_cli.store.db import open_db, write_transaction
from ccpo_cli.store.queries import (
    best_evaluation,
    evaluation_episodes,
    evaluations_for_runs,
    get_run,
    list_runs,
    run_checkpoints,
    run_conflicts,
    run_evaluations,
    run_publications,
)
from ccpo_cli.store.records import (
    EvaluationOutcome,
    ensure_run,
    record_checkpoint,
    record_evaluation,
    record_evaluation_outcome,
    record_publication,
    run_id,
    update_run_state,
)

__all__ = [
    "EvaluationOutcome",
    "ensure_run",
    "evaluation_episodes",
    "evaluations_for_runs",
    "get_run",
    "list_runs",
    "open_db",
    "record_checkpoint",
    "record_evaluation",
    "record_evaluation_outcome",
    "record_publication",
    "best_evaluation",
    "run_checkpoints",
    "run_conflicts",
    "run_evaluations",
    "run_id",
    "run_publications",
    "update_run_state",
    "write_transaction",
]
