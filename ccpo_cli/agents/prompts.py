"""The ALFWorld prompts a text policy sees, laid out as verl-agent lays them out.

Structure (facts from verl-agent; docs/alfworld-games.md, "Prompts and action projection"):

* first turn: the role line, the current observation, the admissible actions, the answer
  instruction;
* later turns (history length > 0): the role line with "Your task is to: {task}", how many
  steps were already taken, the most recent `history_length` observation/action pairs, "You are
  now at step {k} and your current observation is: ...", the admissible actions and the same
  instruction;
* admissible actions are single-quoted, joined by a newline and a space, with `help` removed,
  inside square brackets;
* a history entry is `[Observation k: '<obs>', Action k: '<action>']` with k the 1-based step
  number; entries are joined by newlines; the observation stored is the one the action was
  taken in; the action is the command actually sent to the game;
* the task is the text of the reset observation after "Your task is to: ".

The answer instruction and the history sentence are reproduced verbatim from verl-agent's
ALFWorld templates (Apache-2.0), including its spelling "observaitons": they are the interface a
policy trained with verl-agent was conditioned on, so a paraphrase would evaluate a different
prompt. `ANSWER_INSTRUCTION` and `HISTORY_SENTENCE` are the single places that hold them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

DEFAULT_HISTORY_LENGTH = 2
TASK_MARKER = "Your task is to: "
ROLE_LINE = "You are an expert agent operating in the ALFRED Embodied Environment."

ANSWER_INSTRUCTION = (
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process "
    "MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current "
    "step and present it within <action> </action> tags."
)
HISTORY_SENTENCE = (
    "Below are the most recent {count} observaitons and the corresponding actions you took: "
)


def extract_task(reset_observation: str) -> str:
    """The task sentence of a game, read from its first observation."""
    start = reset_observation.find(TASK_MARKER)
    if start == -1:
        raise ValueError("the observation holds no task ('Your task is to: ' is missing)")
    return reset_observation[start + len(TASK_MARKER) :].strip()


def format_admissible(commands: Sequence[str]) -> str:
    """The admissible commands as they appear between the prompt's square brackets."""
    return "\n ".join(f"'{command}'" for command in commands if command != "help")


def format_history(pairs: Sequence[tuple[str, str]], first_step: int) -> str:
    """History entries for consecutive steps starting at 1-based step `first_step`."""
    return "\n".join(
        f"[Observation {step}: '{observation}', Action {step}: '{action}']"
        for step, (observation, action) in enumerate(pairs, start=first_step)
    )


def _observation_and_actions(observation: str, admissible: Sequence[str]) -> str:
    return (
        f"Your current observation is: {observation}\n"
        f"Your admissible actions of the current situation are: [{format_admissible(admissible)}]."
    )


def first_turn_prompt(observation: str, admissible: Sequence[str]) -> str:
    return (
        f"\n{ROLE_LINE}\n"
        f"{_observation_and_actions(observation, admissible)}\n\n"
        f"{ANSWER_INSTRUCTION}\n"
    )


def history_prompt(
    *,
    task: str,
    steps_taken: int,
    recent: Sequence[tuple[str, str]],
    observation: str,
    admissible: Sequence[str],
) -> str:
    """A later-turn prompt; `recent` holds the last (observation, action) pairs, oldest first."""
    first_shown = steps_taken - len(recent) + 1
    return (
        f"\n{ROLE_LINE} {TASK_MARKER}{task}\n"
        f"Prior to this step, you have already taken {steps_taken} step(s). "
        f"{HISTORY_SENTENCE.format(count=len(recent))}{format_history(recent, first_shown)}\n"
        f"You are now at step {steps_taken + 1} and your current observation is: {observation}\n"
        f"Your admissible actions of the current situation are: [{format_admissible(admissible)}].\n\n"
        f"{ANSWER_INSTRUCTION}\n"
    )


@dataclass
class EpisodePrompter:
    """Builds each turn's prompt for one episode and remembers what happened.

    Call `prompt(observation, admissible)` for the current turn, then `record(command)` with
    the command sent to the game; the observation of the last prompt is stored with it.
    """

    history_length: int = DEFAULT_HISTORY_LENGTH
    task: str | None = None
    history: list[tuple[str, str]] = field(default_factory=list)
    _pending_observation: str | None = None

    def prompt(self, observation: str, admissible: Sequence[str]) -> str:
        if self.task is None:
            self.task = extract_task(observation)
        self._pending_observation = observation
        if not self.history or self.history_length <= 0:
            return first_turn_prompt(observation, admissible)
        return history_prompt(
            task=self.task,
            steps_taken=len(self.history),
            recent=self.history[-self.history_length :],
            observation=observation,
            admissible=admissible,
        )

    def record(self, command: str) -> None:
        if self._pending_observation is None:
            raise RuntimeError("record() needs a prompt() for the same turn first")
        self.history.append((self._pending_observation, command))
        self._pending_observation = None
