"""The one syntax of a seed list, for every command that takes `--seeds` (train, eval, matrix).

A list is comma-separated items, each a seed (`3`) or an inclusive range (`0-2`): `0-2,5` is
seeds 0, 1, 2 and 5, in the order given. Only ASCII digits, one dash per range and commas
between items (spaces around an item allowed) are read: an empty item (`0-2,,3`), `1_000`, a
sign, or a digit of another script (`٣`, `１`), which Python's `int` would accept, is refused, so
what the shell shows is the seed that runs. Seeds are non-negative integers, each at most once (a
seed is one run or one evaluation), and a list holds at most MAX_SEEDS of them, so a typo such as
`0-1000000000` is refused instead of filling memory. A seed is at most MAX_SEED (32 bits: every
random generator the stack seeds takes it, and runs.db stores it as an integer). Anything else
is invalid input (exit 3), with a message that shows the syntax.
"""

from __future__ import annotations

import re
from collections import Counter

from ccpo_cli.errors import InvalidInput

MAX_SEEDS = 10_000
MAX_SEED = 2**32 - 1
SYNTAX = "seeds separated by commas, each a number or a range, e.g. 0,1,2 or 0-2,5"
# ASCII on purpose: `\d` and `int` take every script's digits and `_` separators.
_ITEM = re.compile(r"[ \t]*([0-9]{1,30})(?:-([0-9]{1,30}))?[ \t]*", re.ASCII)


def parse_seeds(text: str, option: str = "--seeds") -> list[int]:
    """'0-2,5' -> [0, 1, 2, 5]; InvalidInput naming `option` for anything else."""
    seeds: list[int] = []
    for item in str(text).split(","):
        matched = _ITEM.fullmatch(item)
        if matched is None:
            if not item.strip() and str(text).strip() == "":
                continue  # no seeds at all: said below
            raise InvalidInput(f"{option} {text!r}: expected {SYNTAX}")
        first, last = matched.groups()
        low = int(first)
        high = int(last) if last is not None else low
        item = item.strip()
        if high > MAX_SEED:
            raise InvalidInput(f"{option} {text!r}: a seed is at most {MAX_SEED} (got {high})")
        if high < low:
            raise InvalidInput(
                f"{option} {text!r}: the range {item} runs backwards (write {high}-{low})"
            )
        if len(seeds) + high - low + 1 > MAX_SEEDS:
            raise InvalidInput(f"{option} {text!r}: more than {MAX_SEEDS} seeds")
        seeds.extend(range(low, high + 1))
    if not seeds:
        raise InvalidInput(f"{option}: at least one seed is needed ({SYNTAX})")
    repeated = sorted(seed for seed, count in Counter(seeds).items() if count > 1)
    if repeated:
        raise InvalidInput(
            f"{option} {text!r}: each seed at most once (repeated: {', '.join(map(str, repeated))})"
        )
    return seeds


def check_seed(value: int | None, option: str = "--seed") -> int | None:
    """One seed given as a number (`--seed N`): the same range as a seed in a list."""
    if value is not None and not 0 <= value <= MAX_SEED:
        raise InvalidInput(f"{option} {value}: a seed is a whole number from 0 to {MAX_SEED}")
    return value
