"""What dumped training batches (`--dump-batches`) say about a design's credit-assignment signal.

- `batch_structure`: how often GiGPO's step groups form (a (task, observation) state reached by
  two or more trajectories of a group), the horizon, and how sparse the reward is.
- `step_term_overlap`: how much GiGPO's step term repeats the episode term.
- `advantage_overlap`: how much of GiGPO's whole advantage GRPO's does not explain (the share of
  its variance left after the best linear fit on GRPO's), where their signs disagree, and the
  sizes of the loop-state groups: a design in which the two arms make almost the same update
  cannot tell them apart, whatever its seeds.

Every advantage is computed through the estimator entry point training uses, and every batch is
read by `batch_io.load_batch`, checked as `ccpo estimate` checks its input.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ccpo_cli.batch_io import load_batch


def batch_structure(paths: Iterable[Path]) -> dict[str, Any]:
    """Revisits, horizon and reward sparsity of dumped training batches (`--dump-batches`).

    A *group* is one game of a step (its `uid`) played by several trajectories; a GiGPO *step
    group* is a (group, observation) state; it carries a step-level signal only when two or more
    distinct trajectories reach it. Reported over all batches: the share of decisions in such
    states, the same without each episode's first turn (which every trajectory of a group
    shares), the mean number of trajectories per revisited state, the horizon (turns per
    episode), the success rate, the share of decisions with a non-zero reward, and the share of
    groups whose episodes all end alike (all won or all lost: GRPO's episode term is 0 there)."""
    decisions = shared = shared_later = later = 0
    state_sizes: list[int] = []
    lengths: list[int] = []
    rewarded = 0
    groups = uniform_groups = 0
    wins = episodes = 0
    batches = 0
    for path in paths:
        batch = load_batch(path)
        uid, traj, anchor = batch.uid, batch.traj_uid, batch.anchor_obs
        step_index, reward, episode_reward = (
            batch.step_index,
            batch.env_reward,
            batch.episode_reward,
        )
        batches += 1
        decisions += len(uid)
        rewarded += int(np.count_nonzero(reward))
        trajectories: dict[str, set[str]] = defaultdict(set)
        for key, trajectory, observation in zip(uid, traj, anchor):
            trajectories[(str(key), str(observation))].add(str(trajectory))
        for key, observation, index in zip(uid, anchor, step_index):
            size = len(trajectories[(str(key), str(observation))])
            if size >= 2:
                shared += 1
            if index > 0:
                later += 1
                if size >= 2:
                    shared_later += 1
        state_sizes.extend(len(members) for members in trajectories.values() if len(members) >= 2)
        per_episode: dict[str, tuple[str, int, float]] = {}
        for key, trajectory, index, total in zip(uid, traj, step_index, episode_reward):
            previous = per_episode.get(str(trajectory))
            per_episode[str(trajectory)] = (
                str(key),
                max(int(index) + 1, previous[1] if previous else 0),
                float(total),
            )
        by_group: dict[str, list[float]] = defaultdict(list)
        for key, length, total in per_episode.values():
            lengths.append(length)
            by_group[key].append(total)
            episodes += 1
            wins += total > 0
        for totals in by_group.values():
            groups += 1
            uniform_groups += len(set(totals)) == 1
    if not batches:
        return {"batches": 0}
    return {
        "batches": batches,
        "decisions": decisions,
        "episodes": episodes,
        "share_of_decisions_in_revisited_states": shared / decisions,
        "share_without_first_turn": shared_later / later if later else None,
        "trajectories_per_revisited_state": statistics.fmean(state_sizes) if state_sizes else None,
        "horizon_mean_turns": statistics.fmean(lengths),
        "horizon_median_turns": statistics.median(lengths),
        "success_rate": wins / episodes,
        "share_of_decisions_rewarded": rewarded / decisions,
        "share_of_groups_all_alike": uniform_groups / groups,
    }


def step_term_overlap(paths: Iterable[Path]) -> dict[str, Any]:
    """How much GiGPO's step term says beyond the episode term, in dumped batches: per row, the
    episode term (the grpo arm's advantage) and the step term alone (the gigpo arm with ep_w = 0),
    both through the estimator entry point training uses. Reported: their correlation over all
    rows, the share of rows whose step term is 0 (a state no other trajectory of the group
    reached, or reached with equal returns), and, where both are non-zero, how often their signs
    agree. A step term that is mostly the episode term's sign and size adds little credit."""
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local.advantages import advantages_for

    episode_arm = load_arm("grpo")
    step_arm = load_arm("gigpo", {"ep_w": 0.0})
    episode_terms, step_terms = [], []
    for path in paths:
        batch = load_batch(path)
        episode_terms.append(advantages_for(batch, episode_arm))
        step_terms.append(advantages_for(batch, step_arm))
    if not episode_terms:
        return {"batches": 0}
    episode, step = np.concatenate(episode_terms), np.concatenate(step_terms)
    both = (episode != 0) & (step != 0)
    return {
        "batches": len(episode_terms),
        "rows": int(len(episode)),
        "correlation": float(np.corrcoef(episode, step)[0, 1])
        if episode.std() > 0 and step.std() > 0
        else None,
        "share_step_term_zero": float(np.mean(step == 0)),
        "share_episode_term_zero": float(np.mean(episode == 0)),
        "sign_agreement_where_both_nonzero": float(
            np.mean(np.sign(episode[both]) == np.sign(step[both]))
        )
        if both.any()
        else None,
        "mean_abs_step_term": float(np.mean(np.abs(step))),
        "mean_abs_episode_term": float(np.mean(np.abs(episode))),
    }


def advantage_overlap(paths: Iterable[Path]) -> dict[str, Any]:
    """GiGPO's whole per-row advantage against GRPO's on the same dumped batches: their
    correlation r, the share of GiGPO's variance GRPO's does not explain (1 − r²), the share of
    rows where both are non-zero with opposite signs, and the step groups' sizes (rows per
    (task, observation) state of two or more rows)."""
    from ccpo_cli.arms import load_arm
    from ccpo_cli.backends.local.advantages import advantages_for

    grpo, gigpo = load_arm("grpo"), load_arm("gigpo")
    grpo_terms, gigpo_terms, group_sizes = [], [], []
    for path in paths:
        batch = load_batch(path)
        grpo_terms.append(advantages_for(batch, grpo))
        gigpo_terms.append(advantages_for(batch, gigpo))
        _, counts = np.unique(
            np.stack([batch.uid.astype(str), batch.anchor_obs.astype(str)]),
            axis=1,
            return_counts=True,
        )
        group_sizes.extend(int(count) for count in counts if count >= 2)
    if not grpo_terms:
        return {"batches": 0}
    a, b = np.concatenate(gigpo_terms), np.concatenate(grpo_terms)
    r = float(np.corrcoef(a, b)[0, 1]) if a.std() > 0 and b.std() > 0 else None
    both = (a != 0) & (b != 0)
    return {
        "batches": len(grpo_terms),
        "rows": int(a.size),
        "correlation": r,
        "share_of_gigpo_variance_unexplained_by_grpo": None if r is None else 1.0 - r * r,
        "share_of_rows_with_opposite_signs": float(np.mean(np.sign(a[both]) != np.sign(b[both])))
        if both.any()
        else None,
        "step_group_rows_mean": statistics.fmean(group_sizes) if group_sizes else None,
        "step_group_rows_median": statistics.median(group_sizes) if group_sizes else None,
    }
