"""Reports over runs.db: the comparison document, its tables and the learning-curve plot."""

from __future__ import annotations

import math
from fractions import Fraction

# The window a run is summarised over starts at this fraction of its recorded total steps: the
# seed card's protocol, a window from step 70 of 150. A run of another length gets the same
# share of its own training, never the literal step 70.
WINDOW_START_FRACTION = Fraction(70, 150)


def default_window_start(total_steps: int | None, last_step: int | None) -> tuple[int, str]:
    """(first step of the window, how it was chosen) for a run with no --window-start."""
    share = f"{WINDOW_START_FRACTION.numerator}/{WINDOW_START_FRACTION.denominator}"
    if total_steps:
        return math.ceil(total_steps * WINDOW_START_FRACTION), f"{share} of the run's {total_steps} total steps"
    if last_step:
        return (math.ceil(last_step * WINDOW_START_FRACTION),
                f"total steps not recorded: {share} of the last step seen ({last_step})")
    return 0, "neither total steps nor a step recorded: from step 0"
