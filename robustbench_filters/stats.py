"""Statistics for honest robustness numbers: binomial intervals and paired tests.

Every accuracy is reported with a 95% Wilson score interval (well-behaved at 0% and 100%, unlike the normal
approximation), and every paired comparison on the same examples uses McNemar's exact test.
"""

from __future__ import annotations

import math
from statistics import NormalDist

Z95 = NormalDist().inv_cdf(0.975)


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n == 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (only A right) and c (only B right)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def mean_interval(values: list[float], z: float = Z95) -> tuple[float, float, float]:
    """Mean and a t-based 95% interval across seeds (normal z when scipy is absent and n is large)."""
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = sum(values) / n
    if n == 1:
        return mean, float("nan"), float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _t_quantile_975(n - 1)
    half = t * sd / math.sqrt(n)
    return mean, mean - half, mean + half


def _t_quantile_975(df: int) -> float:
    """Student-t 97.5% quantile (table for small df, normal beyond)."""
    table = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
    return table.get(df, Z95 if df > 30 else 2.2)
