"""When a run evaluates: every N steps, at each N-th target epoch, and at its last step."""

import math
from typing import Optional


def crossed_multiple(before: float, after: float, every: int) -> bool:
    """Whether a multiple of ``every`` lies in (before, after]: ``floor(x / every)`` went up.

    Example:
        >>> crossed_multiple(1.9, 2.1, 2), crossed_multiple(2.1, 3.9, 2), crossed_multiple(3.9, 4.0, 2)
        (True, False, True)
    """
    return math.floor(after / every) > math.floor(before / every)


def evaluation_due(step: int, num_steps: int, epoch_before: float, epoch_after: float,
                   every_n_steps: Optional[int], every_n_epochs: Optional[int]) -> bool:
    """Whether the run evaluates after ``step`` (counted from 1), the step that took the logged
    target epoch from ``epoch_before`` to ``epoch_after``: every ``every_n_steps`` steps, when
    the target epoch crosses a multiple of ``every_n_epochs`` (null: neither), and always at the
    last step, so every run ends with a score.

    Example:
        >>> [s for s in range(1, 11) if evaluation_due(s, 10, (s - 1) / 2, s / 2, None, 2)]  # 2 steps an epoch
        [4, 8, 10]
    """
    return (step == num_steps
            or (every_n_steps is not None and step % every_n_steps == 0)
            or (every_n_epochs is not None and crossed_multiple(epoch_before, epoch_after, every_n_epochs)))
