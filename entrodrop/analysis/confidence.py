"""The mean of a few values with its 95% confidence interval: the one statistic the seed tables
and the seed plots (``entrodrop.analysis.multi_seed``) print.

The interval is Student's t over the values (seeds): mean +- t(0.975, n - 1) * sd / sqrt(n), with
the sample standard deviation. It assumes the values are independent draws of a roughly normal
quantity: each seed draws its own data order and masks, and a run's loss is an average over
thousands of tokens. With three seeds t is 4.30, with ten 2.26: a few seeds give wide intervals,
as they should. One value has no interval.
"""

import math
from typing import Optional, Sequence, Tuple

CONFIDENCE = 0.95


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Tuple[float, Optional[float]]:
    """The mean of ``values`` and the half-width of its two-sided ``confidence`` t-interval (None
    for fewer than two values).

    Example:
        >>> mean, half = t_interval([1.0, 2.0, 3.0])
        >>> mean, round(half, 4)  # t(0.975, 2) = 4.3027, sd = 1, n = 3
        (2.0, 2.4841)
        >>> t_interval([5.0])
        (5.0, None)
    """
    from scipy.stats import t  # here: scipy.stats costs 0.75 s to import, and only the reports need it

    n = len(values)
    if n == 0:
        raise ValueError("t_interval of no values")
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)
