"""Where a run is pushed while it trains, as one typed object (never a dict of options).

The token is not part of it: it is resolved once by the command and handed to the uploader
process on its standard input, so it never reaches a command line, a file or runs.db.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ccpo_cli.errors import InvalidInput
from ccpo_cli.hub_access import HubTimeouts, resolve_timeouts
from ccpo_cli.names import check_repo_id

# The most `ccpo train --push-to-hub` waits for pending uploads after its last step.
DEFAULT_END_WAIT_S = 120.0
# How often an uploader looks for new entries in the outbox.
POLL_S = 0.5


@dataclass(frozen=True)
class PushTarget:
    """A Hub repository a run's cards and checkpoints go to, and how."""

    repo_id: str
    endpoint: str
    timeouts: HubTimeouts
    revision: str = "main"
    private: bool = True
    window_start: int | None = None
    license: str | None = None
    end_wait_s: float = DEFAULT_END_WAIT_S
    staging: Path | None = (
        None  # where cards are staged (default: beside runs.db, ccpo-publish-RUN/)
    )
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        document = asdict(self)
        document["staging"] = None if self.staging is None else str(self.staging)
        return json.dumps(document, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> PushTarget:
        document = json.loads(text)
        document["timeouts"] = HubTimeouts(**document["timeouts"])
        document["staging"] = None if document.get("staging") is None else Path(document["staging"])
        return cls(**document)

    def staging_for(self, db_path: Path, run: str) -> Path:
        return (
            self.staging
            if self.staging is not None
            else Path(db_path).resolve().parent / f"ccpo-publish-{run}"
        )


def push_target(
    repo_id: str,
    *,
    endpoint: str | None = None,
    private: bool | None = None,
    timeout: str | None = None,
    deadline: str | float | None = None,
    revision: str = "main",
    window_start: int | None = None,
    license: str | None = None,  # noqa: A002 - the metadata key's name
    end_wait_s: float | None = None,
    staging: Path | None = None,
) -> PushTarget:
    """The target the Hub options describe (validated: a bad value is exit 3 before anything runs)."""
    from ccpo_cli.hub_plan import check_revision, resolve_endpoint

    check_repo_id(repo_id, "--push-to-hub")
    check_revision(revision)
    wait = DEFAULT_END_WAIT_S if end_wait_s is None else float(end_wait_s)
    if not 0 <= wait <= 86_400:
        raise InvalidInput(f"--push-wait {end_wait_s}: expected seconds in [0, 86400]")
    return PushTarget(
        repo_id=repo_id,
        endpoint=resolve_endpoint(endpoint),
        timeouts=resolve_timeouts(timeout, deadline),
        revision=revision,
        private=True if private is None else private,
        window_start=window_start,
        license=license,
        end_wait_s=wait,
        staging=staging,
    )
