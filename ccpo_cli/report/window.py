"""One run's converged window: the evaluations of one protocol from the window start on, their
mean and sd, the trend test over them, the best point with its selection bias, and the noise of
one evaluation.

The window holds evaluations of one protocol (dataset split, temperature, episodes per
evaluation): when a run mixes panels, the protocol with the most evaluations in the window is
used (ties: the larger panel) and the others are listed as left out. A window of fewer than
`MIN_HEADLINE_EVALUATIONS` is never a headline. A window whose slope interval excludes 0 is
"not converged", and the best point's bias is then measured on the detrended noise.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from ccpo_cli import stats
from ccpo_cli.store.queries import best_evaluation
from ccpo_cli.task_types import TASK_TYPES

# verl-agent's ALFWorld protocol evaluates 128 held-out episodes; used for the single-eval
# interval only when the evaluations did not record their episode count (flagged as assumed).
PROTOCOL_EVAL_EPISODES = 128
# A window mean of fewer evaluations is one or two noisy points, not a converged level.
MIN_HEADLINE_EVALUATIONS = 3
RUN_STATES = ("running", "stopped-early", "finished", "unknown")


def protocol_of(row: dict, facts: dict) -> dict[str, Any]:
    """An evaluation's protocol: its own episodes and temperature, else the run's recorded facts."""
    return {
        "split": facts.get("split"),
        "temperature": row.get("temperature") if row.get("temperature") is not None else facts.get("temperature"),
        "episodes": row.get("episodes") if row.get("episodes") is not None else facts.get("episodes"),
    }


def _key(protocol: dict) -> tuple:
    return (protocol["split"], protocol["temperature"], protocol["episodes"])


def _choose_protocol(rows: list[dict], facts: dict) -> tuple[dict | None, list[dict]]:
    counts = Counter(_key(protocol_of(row, facts)) for row in rows)
    if not counts:
        return None, []
    chosen = max(counts, key=lambda key: (counts[key], key[2] or 0))
    return dict(zip(("split", "temperature", "episodes"), chosen)), [
        {"split": key[0], "temperature": key[1], "episodes": key[2], "n": n} for key, n in counts.items()
    ]


def _best(window: dict, window_evals: list[dict], trend: dict) -> dict | None:
    best = best_evaluation(window_evals)
    if best is None:
        return None
    n_candidates = len(window_evals)
    bias_sd = stats.expected_max_of_normals(n_candidates)
    if n_candidates < MIN_HEADLINE_EVALUATIONS:
        noise_sd, basis = None, (f"left out: {n_candidates} evaluation{'s' if n_candidates != 1 else ''} "
                                 f"in the window, too few to measure their noise")
    elif trend.get("converged") is False:
        noise_sd, basis = trend["residual_sd"], "the detrended window (the window still moves, so its sd counts the trend)"
    else:
        noise_sd, basis = window["sd"], "the window sd"
    return {
        "step": best["step"],
        "success": best["success_rate"],
        "task_types": {key: best["task_types"][key]["success"] for key in TASK_TYPES if key in best["task_types"]},
        "task_type_episodes": {
            key: best["task_types"][key]["episodes"] for key in TASK_TYPES if key in best["task_types"]
        },
        "mean_turns": best["mean_turns"],
        "episodes": best["episodes"],
        "successes": best["successes"],
        "train_success_rate": best["train_success_rate"],
        "evaluation_id": best["id"],
        "chosen_from": "window",
        "n_candidates": n_candidates,
        "expected_max_bias_sd": bias_sd,
        "expected_max_bias_points": None if noise_sd is None else bias_sd * noise_sd,
        "bias_noise": basis,
    }


def _single_eval_interval(window: dict, episodes: int | None, confidence: float) -> dict | None:
    if window["mean"] is None:
        return None
    assumed = not episodes
    episodes = int(episodes) if episodes else PROTOCOL_EVAL_EPISODES
    low, high = stats.wilson_interval(window["mean"] / 100 * episodes, episodes, confidence)
    return {"at": window["mean"], "episodes": episodes, "episodes_assumed": assumed, "confidence": confidence,
            "low": 100 * low, "high": 100 * high, "half_width": 100 * (high - low) / 2}


def _window_task_types(window_evals: list[dict]) -> dict[str, dict]:
    result = {}
    for key in TASK_TYPES:
        rows = [row["task_types"][key] for row in window_evals if key in row["task_types"]]
        if not rows:
            continue
        episode_counts = [row["episodes"] for row in rows if row["episodes"] is not None]
        summary = stats.mean_sd_n([row["success"] for row in rows])
        summary["episodes"] = sum(episode_counts) if len(episode_counts) == len(rows) else None
        result[key] = summary
    return result


def _pooled(window: dict, window_evals: list[dict], confidence: float) -> None:
    window["pooled_interval"] = None
    episode_counts = [row["episodes"] for row in window_evals]
    if window_evals and all(count is not None for count in episode_counts):
        window["episodes"] = sum(episode_counts)
        window["successes"] = sum(row["successes"] or 0 for row in window_evals)
        if all(row["successes"] is not None for row in window_evals):
            # Measurement precision of the whole window (all its episodes pooled), not of one eval.
            low, high = stats.wilson_interval(window["successes"], window["episodes"], confidence)
            window["pooled_interval"] = {"low": 100 * low, "high": 100 * high, "confidence": confidence}
    else:
        window["episodes"] = window["successes"] = None


def window_entry(evaluations: list[dict], facts: dict, window_start: int, confidence: float) -> dict:
    """{"window", "window_task_types", "best", "single_eval_interval", "protocols"} of one run."""
    in_window = [row for row in evaluations if row["step"] >= window_start]
    protocol, in_window_protocols = _choose_protocol(in_window, facts)
    chosen = [row for row in in_window if protocol is not None and protocol_of(row, facts) == protocol]
    chosen_ids = {row["id"] for row in chosen}
    raw = stats.window_stats([row["step"] for row in chosen], [row["success_rate"] for row in chosen], window_start)
    raw.pop("indices")
    window = dict(raw, start=window_start, evaluation_ids=[row["id"] for row in chosen], protocol=protocol,
                  protocol_mixed=len(in_window_protocols) > 1,
                  left_out_evaluation_ids=[row["id"] for row in in_window if row["id"] not in chosen_ids])
    window["headline"] = window["n"] >= MIN_HEADLINE_EVALUATIONS
    window["headline_note"] = None if window["headline"] else (
        f"{window['n']} evaluation{'s' if window['n'] != 1 else ''} at step >= {window_start}: a window mean "
        f"needs at least {MIN_HEADLINE_EVALUATIONS} to be a result"
    )
    trend = stats.trend_test(window["steps"], [row["success_rate"] for row in chosen], confidence)
    window["trend"] = trend
    window["converged"] = trend["converged"]
    _pooled(window, chosen, confidence)
    all_protocols = _choose_protocol(evaluations, facts)[1]
    return {
        "window": window,
        "window_task_types": _window_task_types(chosen),
        "best": _best(window, chosen, trend),
        "single_eval_interval": _single_eval_interval(window, protocol and protocol["episodes"], confidence),
        "protocols": all_protocols,
        "protocol_mixed": len(all_protocols) > 1,
    }


def run_state(status: str | None, last_step: int | None, total_steps: list[int]) -> str:
    """running / stopped-early / finished from the data: the last step seen against the largest
    total recorded; a run below it is stopped-early only when an ingest said it ended
    (`ccpo ingest --ended`, stored as status "stopped"), else running."""
    if not total_steps or last_step is None:
        return "unknown"
    if last_step >= max(total_steps):
        return "finished"
    return "stopped-early" if status in ("stopped", "failed") else "running"

