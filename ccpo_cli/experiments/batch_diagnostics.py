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
from dataclasses import dataclass, field
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
    structure = _Structure()
    for path in paths:
        batch = load_batch(path)
        structure.batches += 1
        structure.decisions += len(batch.uid)
        structure.rewarded += int(np.count_nonzero(batch.env_reward))
        structure.add_states(batch)
        structure.add_episodes(batch)
    return structure.summary()


@dataclass
class _Structure:
    """The counts `batch_structure` reports, summed over batches."""

    batches: int = 0
    decisions: int = 0
    rewarded: int = 0
    shared: int = 0  # decisions in a state two or more trajectories of the group reach
    later: int = 0  # decisions after an episode's first turn
    shared_later: int = 0
    state_sizes: list[int] = field(default_factory=list)  # trajectories per revisited state
    lengths: list[int] = field(default_factory=list)  # turns per episode
    episodes: int = 0
    wins: int = 0
    groups: int = 0
    uniform_groups: int = 0  # groups whose episodes all end alike

    def add_states(self, batch: Any) -> None:
        """The batch's (group, observation) states and the trajectories that reach each."""
        uid, anchor = batch.uid, batch.anchor_obs
        trajectories: dict[tuple[str, str], set[str]] = defaultdict(set)
        for key, trajectory, observation in zip(uid, batch.traj_uid, anchor):
            trajectories[(str(key), str(observation))].add(str(trajectory))
        for key, observation, index in zip(uid, anchor, batch.step_index):
            size = len(trajectories[(str(key), str(observation))])
            if size >= 2:
                self.shared += 1
            if index > 0:
                self.later += 1
                if size >= 2:
                    self.shared_later += 1
        self.state_sizes.extend(
            len(members) for members in trajectories.values() if len(members) >= 2
        )

    def add_episodes(self, batch: Any) -> None:
        """The batch's episodes: their length and outcome, and which groups end all alike."""
        per_episode: dict[str, tuple[str, int, float]] = {}
        for key, trajectory, index, total in zip(
            batch.uid, batch.traj_uid, batch.step_index, batch.episode_reward
        ):
            previous = per_episode.get(str(trajectory))
            per_episode[str(trajectory)] = (
                str(key),
                max(int(index) + 1, previous[1] if previous else 0),
                float(total),
            )
        by_group: dict[str, list[float]] = defaultdict(list)
        for key, length, total in per_episode.values():
            self.lengths.append(length)
            by_group[key].append(total)
            self.episodes += 1
            self.wins += total > 0
        for totals in by_group.values():
            self.groups += 1
            self.uniform_groups += len(set(totals)) == 1

    def summary(self) -> dict[str, Any]:
        if not self.batches:
            return {"batches": 0}
        decisions, later, sizes = self.decisions, self.later, self.state_sizes
        return {
            "batches": self.batches,
            "decisions": decisions,
            "episodes": self.episodes,
            "share_of_decisions_in_revisited_states": self.shared / decisions,
            "share_without_first_turn": self.shared_later / later if later else None,
            "trajectories_per_revisited_state": statistics.fmean(sizes) if sizes else None,
            "horizon_mean_turns": statistics.fmean(self.lengths),
            "horizon_median_turns": statistics.median(self.lengths),
            "success_rate": self.wins / self.episodes,
            "share_of_decisions_rewarded": self.rewarded / decisions,
            "share_of_groups_all_alike": self.uniform_groups / self.groups,
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
