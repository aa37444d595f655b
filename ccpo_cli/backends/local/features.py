"""Text features for the local policy: hashed n-grams and text-overlap cross features.

The policy sees what verl-agent's prompt carries: the task sentence, the current observation,
the last two (observation, action) turns and the admissible commands. Every feature is a string
hashed into a fixed number of buckets with a stable hash (Python's own `hash` is salted per
process, which would break determinism across worker processes and runs).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field

import numpy as np

HASH_BITS = 16
NUM_BUCKETS = 1 << HASH_BITS
HISTORY_TURNS = 2

_TOKEN = re.compile(r"[a-z0-9]+")
# Words that carry no task or object identity; kept out of the overlap features only.
_FUNCTION_WORDS = frozenset(
    {
        "a",
        "an",
        "the",
        "to",
        "in",
        "on",
        "from",
        "with",
        "of",
        "some",
        "and",
        "is",
        "it",
        "you",
        "your",
    }
)


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def ngrams(words: list[str]) -> list[str]:
    """Unigrams and bigrams."""
    return words + [f"{left}_{right}" for left, right in zip(words, words[1:])]


def task_sentence(observation: str) -> str:
    """The task as ALFWorld states it in the first observation ("Your task is to: ...")."""
    marker = "your task is to:"
    lowered = observation.lower()
    at = lowered.find(marker)
    if at < 0:
        return ""
    return observation[at + len(marker) :].strip().split("\n")[0].strip()


@dataclass(frozen=True)
class Turn:
    """One past turn: the observation the action was taken in, and the action."""

    observation: str
    action: str


@dataclass
class DecisionFeatures:
    """Hashed features of one decision: the state bag and one bag per candidate."""

    state_ids: np.ndarray  # int64
    state_weights: np.ndarray  # float32
    candidate_ids: list[np.ndarray] = field(default_factory=list)
    candidate_weights: list[np.ndarray] = field(default_factory=list)


class Featurizer:
    """Turns (task, observation, history, candidates) into hashed feature bags.

    Each field's features share the weight 1/sqrt(count) so that a long observation does not
    drown out the task sentence.
    """

    def __init__(self, hash_bits: int = HASH_BITS):
        self.num_buckets = 1 << hash_bits
        self._bucket_cache: dict[str, int] = {}
        # Command features that do not depend on the observation repeat across turns and
        # episodes; caching their bags keeps featurizing well under a millisecond per decision.
        self._static_cache: dict = {}
        self._task_cache: dict = {}

    def bucket(self, feature: str) -> int:
        found = self._bucket_cache.get(feature)
        if found is None:
            found = zlib.crc32(feature.encode()) & (self.num_buckets - 1)
            if len(self._bucket_cache) < 2_000_000:
                self._bucket_cache[feature] = found
        return found

    def _bag(self, fields: list[tuple[str, list[str]]]) -> tuple[np.ndarray, np.ndarray]:
        ids: list[int] = []
        weights: list[float] = []
        for prefix, values in fields:
            if not values:
                continue
            weight = 1.0 / np.sqrt(len(values))
            ids.extend(self.bucket(f"{prefix}|{value}") for value in values)
            weights.extend([weight] * len(values))
        return np.asarray(ids, dtype=np.int64), np.asarray(weights, dtype=np.float32)

    def state_fields(
        self, task: str, observation: str, history: list[Turn]
    ) -> list[tuple[str, list[str]]]:
        fields = [("task", ngrams(tokens(task))), ("obs", ngrams(tokens(observation)))]
        recent = history[-HISTORY_TURNS:][::-1]  # most recent first
        for lag, turn in enumerate(recent, start=1):
            fields.append((f"h{lag}obs", tokens(turn.observation)))
            fields.append((f"h{lag}act", ngrams(tokens(turn.action))))
        return fields

    def candidate_fields(
        self,
        candidate: str,
        task_words: set[str],
        observation_words: set[str],
        previous_actions: list[str],
    ) -> list[tuple[str, list[str]]]:
        """Every candidate field; `featurize` computes the same ones with caches."""
        words = tokens(candidate)
        return (
            _static_fields(words)
            + _task_fields(words, task_words)
            + _dynamic_fields(candidate, words, observation_words, previous_actions)
        )

    def _cached_bag(self, cache: dict, key, make, *args) -> tuple[np.ndarray, np.ndarray]:
        found = cache.get(key)
        if found is None:
            found = self._bag(make(*args))
            if len(cache) > 200_000:
                cache.clear()
            cache[key] = found
        return found

    def featurize(
        self, task: str, observation: str, history: list[Turn], candidates: list[str]
    ) -> DecisionFeatures:
        state_ids, state_weights = self._bag(self.state_fields(task, observation, history))
        task_words = set(tokens(task))
        observation_words = set(tokens(observation))
        previous_actions = [turn.action for turn in history[-HISTORY_TURNS:][::-1]]
        out = DecisionFeatures(state_ids, state_weights)
        frozen_task = frozenset(task_words)
        for candidate in candidates:
            words = tokens(candidate)
            static = self._cached_bag(self._static_cache, candidate, _static_fields, words)
            paired = self._cached_bag(
                self._task_cache, (frozen_task, candidate), _task_fields, words, task_words
            )
            dynamic = self._bag(
                _dynamic_fields(candidate, words, observation_words, previous_actions)
            )
            out.candidate_ids.append(np.concatenate([static[0], paired[0], dynamic[0]]))
            out.candidate_weights.append(np.concatenate([static[1], paired[1], dynamic[1]]))
        return out


def _verb(words: list[str]) -> str:
    return words[0] if words else ""


def _static_fields(words: list[str]) -> list[tuple[str, list[str]]]:
    """What the command says by itself."""
    return [("cand", ngrams(words)), ("verb", [_verb(words)])]


def _task_fields(words: list[str], task_words: set[str]) -> list[tuple[str, list[str]]]:
    """Command x task: which command words the task mentions, task word x verb and x word."""
    verb = _verb(words)
    task_overlap = [
        f"{position}|{verb}"
        for position, word in enumerate(words)
        if word not in _FUNCTION_WORDS and word in task_words
    ]
    content_words = [w for w in words if w not in _FUNCTION_WORDS and not w.isdigit()]
    task_content = sorted(w for w in task_words if w not in _FUNCTION_WORDS)
    return [
        ("in_task", task_overlap),
        ("task_x_verb", [f"{t}|{verb}" for t in task_content]),
        ("task_x_word", [f"{t}|{w}" for t in task_content for w in content_words]),
    ]


def _dynamic_fields(
    candidate: str, words: list[str], observation_words: set[str], previous_actions: list[str]
) -> list[tuple[str, list[str]]]:
    """Command x current observation and recent actions."""
    verb = _verb(words)
    observation_overlap = [
        f"{position}|{verb}"
        for position, word in enumerate(words)
        if word not in _FUNCTION_WORDS and not word.isdigit() and word in observation_words
    ]
    repeats = []
    for lag, previous in enumerate(previous_actions, start=1):
        if previous == candidate:
            repeats.append(f"same{lag}|{verb}")
        previous_words = previous.split(" ", 1)
        if previous_words and previous_words[0] == verb:
            repeats.append(f"verb{lag}|{verb}")
    return [("in_obs", observation_overlap), ("repeat", repeats)]
