"""Which of a source's rows its stores hold, and in what order.

``select`` removes exact duplicates, shuffles the rest with the seed and holds out the rows of
the first ``validation_size`` problems for validation; ``RowBudget`` (``rows_within_budget``)
then cuts the training rows to ``max_tokens`` or ``max_samples`` in whole rows. The rules are in
the ``entrodrop.data.store_plans`` docstring.
"""

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from entrodrop.errors import SourceError

# max_tokens: this many rows in a row that do not fit what is left of the budget end the selection
# (what is left is then smaller than each of them); without it a nearly full budget would read the
# whole source for a row short enough.
MISFITS_TO_STOP = 100


def validation_count(validation_size: Union[None, int, float], num_problems: int) -> int:
    """Problems to hold out: a float is a fraction of ``num_problems``, rounded up, an int a count
    (as ``Dataset.train_test_split`` reads ``test_size``).

    Example:
        >>> validation_count(0.1, 95), validation_count(0.25, 10), validation_count(7, 95), validation_count(None, 95)
        (10, 3, 7, 0)
    """
    if validation_size is None:
        return 0
    if isinstance(validation_size, float):
        return math.ceil(validation_size * num_problems)
    return validation_size


@dataclass
class Selection:
    """Positions, in the candidate rows, of the validation rows and the training rows, each in
    the order they are stored; how many duplicates were removed, how many distinct problems the
    kept rows hold, and how many of them were held out."""

    validation: np.ndarray
    train: np.ndarray
    duplicates: int
    num_problems: int
    held_out_problems: int


def select(hashes: np.ndarray, problems: np.ndarray, seed: int, validation_size: Union[None, int, float]) -> Selection:
    """Deduplicate, shuffle and split candidate rows by their ``rendering.sample_hash`` and ``rendering.problem_hash``.

    The first row of each distinct text is kept; the kept rows are permuted with
    ``numpy.random.default_rng(seed)``; the first ``validation_count`` problems, in the order of
    their first row there, are held out: all their rows are the validation rows, every other
    row a training row, in that order. So no problem (and no text) is on both sides.

    Raises:
        SourceError: the held-out problems would leave no training row.

    Example:
        >>> rows = np.array([5, 7, 5, 9, 11], dtype=np.uint64)  # row 2 repeats row 0
        >>> s = select(rows, np.array([1, 2, 1, 2, 3], dtype=np.uint64), seed=0, validation_size=1)
        >>> s.duplicates, s.num_problems, sorted(s.validation.tolist() + s.train.tolist())
        (1, 3, [0, 1, 3, 4])
        >>> {1, 3} <= set(s.validation.tolist()) or {1, 3} <= set(s.train.tolist())  # rows 1 and 3: one problem
        True
    """
    _, first = np.unique(hashes, return_index=True)
    kept = np.sort(first)
    order = kept[np.random.default_rng(seed).permutation(len(kept))]
    distinct, first_place, which = np.unique(problems[order], return_index=True, return_inverse=True)
    rank = np.empty(len(distinct), np.int64)
    rank[np.argsort(first_place, kind="stable")] = np.arange(len(distinct))  # problems by their first row
    n = validation_count(validation_size, len(distinct))
    if n >= len(distinct):
        raise SourceError(f"validation_size={validation_size} holds out {n} problems, but the source has "
                          f"{len(distinct)} distinct problems ({len(kept)} distinct non-empty rows): none would be "
                          "left to train on")
    held = rank[which.reshape(-1)] < n
    return Selection(order[held], order[~held], len(hashes) - len(kept), len(distinct), n)


class RowBudget:
    """The training rows a budget takes, offered one at a time in their stored order.

    ``max_samples``: the first that many rows. ``max_tokens``: each row whose tokens fit what is
    left is taken; one that does not fit is skipped (never half in) and the next one tried. The
    selection ends when the budget is met exactly, or after ``MISFITS_TO_STOP`` rows in a row
    did not fit (what is left is smaller than each of them), or when the rows run out.

    Example:
        >>> budget = RowBudget(max_tokens=10, max_samples=None)
        >>> [budget.offer(n) for n in [4, 7, 5, 1, 3]], budget.tokens, budget.reason
        ([True, False, True, True, False], 10, 'met exactly')
    """

    def __init__(self, max_tokens: Optional[int], max_samples: Optional[int]) -> None:
        self.max_tokens, self.max_samples = max_tokens, max_samples
        self.rows = self.tokens = self.skipped = self.misfits = 0
        self.done = False
        self.reason = "the rows ran out"

    def offer(self, row_tokens: int) -> bool:
        """Whether the next row is taken (never once the selection has ended)."""
        if self.done:
            return False
        if self.max_samples is not None:
            self.rows += 1
            self.tokens += row_tokens
            self.done = self.rows >= self.max_samples
            self.reason = f"max_samples {self.max_samples} rows taken" if self.done else self.reason
            return True
        if self.max_tokens is not None and self.tokens + row_tokens > self.max_tokens:
            self.skipped += 1
            self.misfits += 1
            if self.misfits >= MISFITS_TO_STOP:
                self.done = True
                self.reason = (f"{MISFITS_TO_STOP} rows in a row did not fit the {self.max_tokens - self.tokens} "
                               "tokens left")
            return False
        self.rows += 1
        self.tokens += row_tokens
        self.misfits = 0
        if self.max_tokens is not None and self.tokens == self.max_tokens:
            self.done, self.reason = True, "met exactly"
        return True

    def describe(self) -> str:
        """What the budget selected and why it stopped, for the log."""
        if self.max_samples is not None:
            return f"max_samples {self.max_samples}: {self.rows} rows, {self.tokens} tokens; stopped: {self.reason}"
        return (f"max_tokens {self.max_tokens}: {self.tokens} tokens selected ({self.tokens / self.max_tokens:.2%}), "
                f"{self.rows} rows taken, {self.skipped} rows that did not fit what was left skipped; stopped: "
                f"{self.reason}")


def rows_within_budget(row_tokens: Sequence[int], max_tokens: Optional[int],
                       max_samples: Optional[int]) -> Tuple[np.ndarray, RowBudget]:
    """Which rows a budget takes (``RowBudget``), as a mask (every row without one), and the budget
    after them (what it took, why it stopped: ``RowBudget.describe``).

    Example:
        >>> rows_within_budget([4, 7, 5, 2], max_tokens=10, max_samples=None)[0].tolist()
        [True, False, True, False]
        >>> rows_within_budget([4, 3, 5, 2], max_tokens=None, max_samples=3)[0].tolist()
        [True, True, True, False]
    """
    budget = RowBudget(max_tokens, max_samples)
    if max_tokens is None and max_samples is None:
        return np.ones(len(row_tokens), bool), budget
    return np.array([budget.offer(int(n)) for n in row_tokens], bool), budget
