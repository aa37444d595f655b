"""verl-agent's metric names that become evaluations, named once for every reader."""

from __future__ import annotations

from ccpo_cli.task_types import VERL_METRIC_NAMES

OVERALL_KEY = "val/success_rate"
MEAN_TURNS_KEY = "val/episode_length/mean"
TRAIN_SUCCESS_KEY = "episode/success_rate"
TASK_TYPE_KEYS = {f"val/{name}_success_rate": key for key, name in VERL_METRIC_NAMES.items()}
# Optional exact counts a ccpo metrics file may carry beside the rate.
EPISODES_KEY = "val/episodes"
SUCCESSES_KEY = "val/successes"

RATE_KEYS = frozenset({OVERALL_KEY, TRAIN_SUCCESS_KEY, *TASK_TYPE_KEYS})
KNOWN_KEYS = RATE_KEYS | {MEAN_TURNS_KEY, EPISODES_KEY, SUCCESSES_KEY}


def known_metric_from_tag(tag: str) -> str | None:
    """The metric a TensorBoard export's file-name tag stands for (it writes `/` as `_`)."""
    flattened = tag.replace("/", "_")
    return next((key for key in sorted(KNOWN_KEYS) if key.replace("/", "_") == flattened), None)
