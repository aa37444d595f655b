"""runs.db: the record of every run, evaluation, checkpoint and publication.

Open it with `open_db(path)`; write with `ensure_run`, `update_run_state`, `record_evaluation`,
`record_checkpoint`, `record_publication`; read with the functions from `queries`;
bring in training logs with `ingest_file`; correct the record with `store.retractions`.

The names below load on first use (PEP 562): importing a light module of the store, such as
`store.run_names` for shell completion, must not pay for sqlite-utils and numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each exported name and the module that defines it.
_EXPORTS = {
    "open_db": "ccpo_cli.store.db",
    "write_transaction": "ccpo_cli.store.db",
    "best_evaluation": "ccpo_cli.store.queries",
    "evaluation_episodes": "ccpo_cli.store.queries",
    "evaluations_for_runs": "ccpo_cli.store.queries",
    "get_run": "ccpo_cli.store.queries",
    "list_runs": "ccpo_cli.store.queries",
    "run_checkpoints": "ccpo_cli.store.queries",
    "run_conflicts": "ccpo_cli.store.queries",
    "run_evaluations": "ccpo_cli.store.queries",
    "run_publications": "ccpo_cli.store.queries",
    "EvaluationOutcome": "ccpo_cli.store.records",
    "ensure_run": "ccpo_cli.store.records",
    "record_checkpoint": "ccpo_cli.store.records",
    "record_evaluation": "ccpo_cli.store.records",
    "record_evaluation_outcome": "ccpo_cli.store.records",
    "record_publication": "ccpo_cli.store.records",
    "run_id": "ccpo_cli.store.records",
    "update_run_state": "ccpo_cli.store.records",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
