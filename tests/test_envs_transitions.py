"""The transition cache changes speed only: byte-identical transcripts with and without it."""

from __future__ import annotations

import random

import pytest
from helpers_envs import transcript
from helpers_local_train import generated_games

from ccpo_cli.envs import AlfworldBatchEnv, find_games
from ccpo_cli.envs.transitions import EngineState, TransitionCache, snapshot_of


class OpeningThenRandom:
    """Plays the first admissible command for `opening` turns, then uniformly at random: two
    seeds share their openings (cache hits) and then part (misses, which replay the engine)."""

    def __init__(self, seed: int, opening: int = 3):
        self.seed, self.opening = seed, opening
        self._turn = 0

    def reset(self, observations, infos):
        self._turn = 0
        self._rngs = [random.Random(f"{self.seed}/{slot}") for slot in range(len(infos))]

    def act(self, observations, infos):
        self._turn += 1
        actions = []
        for rng, info in zip(self._rngs, infos):
            commands = [c for c in info["admissible_commands"] if c != "help"]
            actions.append(commands[0] if self._turn <= self.opening else rng.choice(commands))
        return actions


def _rounds(games, transition_cache: int) -> tuple[str, dict | None]:
    with AlfworldBatchEnv(games, workers=0, max_steps=12, transition_cache=transition_cache) as env:
        texts = [transcript(env, OpeningThenRandom(seed)) for seed in (1, 2, 1, 3, 2)]
        stats = env._local.transitions.stats.as_dict() if env._local.transitions else None
    return "\n".join(texts), stats


@pytest.mark.slow
def test_batch_transcripts_are_byte_identical_with_the_cache():
    games = find_games(generated_games("heldout", 6, seed=3))
    without, _ = _rounds(games, 0)
    cached, stats = _rounds(games, 10_000)
    assert without.count("\nS") > 200  # enough steps were compared
    assert cached.encode() == without.encode()
    # Repeated seeds replay whole episodes from the table; new seeds miss after the opening and
    # bring the lagging engine up by replaying it.
    assert stats["hits"] > 100 and stats["misses"] > 100 and stats["replayed"] > 0
    # A tiny table evicts constantly and must still never serve a wrong state.
    evicting, small = _rounds(games, 7)
    assert evicting.encode() == without.encode() and small["misses"] > stats["misses"]


@pytest.mark.slow
def test_local_rollouts_are_identical_with_the_cache():
    from ccpo_cli.backends.local.policy import build_model
    from ccpo_cli.backends.local.rollouts import rollout_digest
    from ccpo_cli.backends.local.workers import EpisodeJob, RolloutPool

    games = find_games(generated_games("train", 4, seed=5))
    jobs = [
        EpisodeJob(
            game_path=path,
            uid=f"g{index}",
            traj_uids=tuple(f"g{index}/ep{e}" for e in range(4)),
            seeds=tuple((0, 1, index, e % 2) for e in range(4)),
            temperature=0.3,
            max_steps=15,
        )
        for index, path in enumerate(games)
    ]
    model = build_model(0)
    digests = {}
    for entries in (0, 5_000):
        with RolloutPool(model, 0, transition_entries=entries) as pool:
            first = pool.play(jobs)
            second = pool.play(jobs)  # the same episodes again: served from the table
            digests[entries] = [
                rollout_digest([t for group in played for t in group]) for played in (first, second)
            ]
            transitions = pool._local.transitions
        if entries:
            assert transitions.stats.hits > transitions.stats.misses
    assert digests[0] == digests[5_000]


def test_the_table_is_bounded_and_ids_are_never_reused():
    cache = TransitionCache(max_entries=3)
    state = ("obs", ("look",), False, None)
    seen = set()
    for index in range(10):
        child = cache.put(("reset", f"game{index}"), "", state)
        assert child not in seen
        seen.add(child)
        assert len(cache) <= 3
    assert cache.get(("reset", "game0"), "") is None  # evicted, least recently used first
    assert cache.get(("reset", "game9"), "")[1:] == state
    assert cache.stats.as_dict()["hit_rate"] == 0.5
    with pytest.raises(ValueError):
        TransitionCache(0)


@pytest.mark.slow
def test_oracle_walkthroughs_are_served_identically_from_the_cache():
    from ccpo_cli.agents.oracle import OracleAgent

    games = find_games(generated_games("heldout", 3, seed=4))
    texts = {}
    for entries in (0, 1_000):
        with AlfworldBatchEnv(
            games, workers=0, max_steps=20, walkthrough=True, transition_cache=entries
        ) as env:
            texts[entries] = transcript(env, OracleAgent()) + "\n" + transcript(env, OracleAgent())
            if entries:
                stats = env._local.transitions.stats
                # The second round is the first one again: every reset and step is a hit.
                assert stats.hits == stats.misses and stats.replayed == 0
    assert texts[0].count("|True|") >= 6  # the oracle won every episode, so walkthroughs were used
    assert texts[0].encode() == texts[1_000].encode()


def test_snapshots_are_untracked_by_the_garbage_collector():
    import gc

    snapshot = snapshot_of(
        EngineState(
            "You see a fridge.", {"admissible_commands": ["look", "open fridge 1"], "won": False}
        ),
        walkthrough=False,
    )
    cache = TransitionCache(10)
    cache.put(5, "look", snapshot)
    key, value = next(iter(cache._edges.items()))
    # Young collections untrack them (inner tuples first, then the entries holding them), so a
    # table of them never piles up long-lived objects that set off full collections.
    gc.collect(0)
    gc.collect(1)
    assert not any(gc.is_tracked(item) for item in (snapshot, key, value, value[2]))
    rebuilt = EngineState.from_snapshot(snapshot)
    assert rebuilt.feedback == "You see a fridge." and list(rebuilt["admissible_commands"]) == [
        "look",
        "open fridge 1",
    ]
