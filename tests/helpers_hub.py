"""What every test against the loopback fake Hub shares: the token it accepts and how a test
points huggingface_hub at it."""

from __future__ import annotations

import huggingface_hub
import huggingface_hub.file_download
from huggingface_hub import constants

TOKEN = "hf_fake_token_for_tests_9f3a1c"
HUB_0X = int(huggingface_hub.__version__.split(".")[0]) < 1


def started_with(monkeypatch, endpoint: str) -> None:
    """On huggingface_hub 0.3x, what HF_ENDPOINT set before start-up does: that line parses the
    URLs the Hub returns against the address it read at import (hub_repo.check_endpoint_supported)."""
    if HUB_0X:
        monkeypatch.setattr(constants, "ENDPOINT", endpoint)
        template = endpoint + "/{repo_id}/resolve/{revision}/{filename}"
        monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", template)
        monkeypatch.setattr(huggingface_hub.file_download, "HUGGINGFACE_CO_URL_TEMPLATE", template)
