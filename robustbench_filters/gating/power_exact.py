"""Exact power of the gate's accuracy rules, to check the planning formulas of :mod:`.power` against.

Model for a baseline comparison: the baseline's outcomes are fixed (k = round(p n) of n examples right, as in a
committed baseline); a fresh run that is worse by Delta with discordance pi loses each baseline-correct
example with probability (pi + Delta) / (2 p) and wins each baseline-wrong one with probability
(pi - Delta) / (2 (1 - p)). So b ~ Binomial(k, .), c ~ Binomial(n - k, .) independently, and the power of a
rule is the probability mass of the (b, c) that it fails, summed exactly over the whole grid. For a
threshold, the observed count is Binomial(n, p). Used by the tests and by ``scripts/gate_mde_table.py``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import numpy as np

from ..stats.intervals import z_quantile
from .modes import Mode
from .power import DEFAULT_ALPHA, DEFAULT_POWER, wilson_bound


def _log_factorials(n: int) -> np.ndarray:
    return np.concatenate([[0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))])


def binom_pmf(n: int, p: float) -> np.ndarray:
    """P(X = 0..n) for X ~ Binomial(n, p), in log space (stable for n in the thousands)."""
    k = np.arange(n + 1)
    if p <= 0 or p >= 1:
        out = np.zeros(n + 1)
        out[0 if p <= 0 else n] = 1.0
        return out
    lf = _log_factorials(n)
    return np.exp(lf[n] - lf[k] - lf[n - k] + k * math.log(p) + (n - k) * math.log1p(-p))


@functools.lru_cache(maxsize=4)
def _half_sf_table(m_max: int) -> np.ndarray:
    """T[m, b] = P(Binomial(m, 1/2) >= b) for 0 <= b <= m <= m_max (exact McNemar's one-sided p-values)."""
    lf = _log_factorials(m_max)
    table = np.zeros((m_max + 1, m_max + 2))
    for m in range(m_max + 1):
        k = np.arange(m + 1)
        pmf = np.exp(lf[m] - lf[k] - lf[m - k] - m * math.log(2.0))
        table[m, : m + 1] = np.cumsum(pmf[::-1])[::-1]
    return table


FailRule = Callable[[np.ndarray, np.ndarray], np.ndarray]


def baseline_rule(mode: Mode, n: int, k: int, tolerance: float = 0.0, alpha: float = DEFAULT_ALPHA) -> FailRule:
    """The gate's FAIL rule for accuracy vs a baseline with k of n right, as a function of the (b, c) grid."""
    if mode is Mode.PAIRED and tolerance == 0:
        table = _half_sf_table(n)
        return lambda b, c: table[b + c, b] < alpha
    if mode is Mode.PAIRED:  # the score test with a margin (stats.paired_margin_score_test), vectorised
        d, z_crit = tolerance, z_quantile(1 - alpha)

        def score_fails(b: np.ndarray, c: np.ndarray) -> np.ndarray:
            b, c = b.astype(np.float64), c.astype(np.float64)
            B = -b - c + (2.0 * n - b + c) * d
            q = (np.sqrt(np.maximum(B * B + 8.0 * n * c * d * (1 - d), 0.0)) - B) / (4.0 * n)
            var = n * (2 * q + d * (1 - d))
            return (b - c - n * d) > z_crit * np.sqrt(var)

        return score_fails
    if mode is Mode.INTERVAL:
        base_lo = wilson_bound(k / n, n, upper=False)
        hi = np.array([wilson_bound(j / n, n, upper=True) for j in range(n + 1)])
        return lambda b, c: hi[k - b + c] + tolerance < base_lo
    return lambda b, c: (b - c) / n > tolerance


def baseline_power(
    mode: Mode,
    n: int,
    base: float,
    drop: float,
    discordance: float,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    rule: FailRule | None = None,
) -> float:
    """Exact probability that a fresh run ``drop`` below the baseline fails the check."""
    k = round(base * n)
    p = k / n
    discordance = max(discordance, drop)  # a drop beyond the discordance is all losses (as in .power)
    lose = (discordance + drop) / 2 / p if p > 0 else 0.0
    win = (discordance - drop) / 2 / (1 - p) if p < 1 else 0.0
    if not (0 <= lose <= 1 and 0 <= win <= 1):
        raise ValueError(f"drop {drop} and discordance {discordance} are impossible at accuracy {p}")
    pb, pc = binom_pmf(k, lose), binom_pmf(n - k, win)
    b, c = np.meshgrid(np.arange(k + 1), np.arange(n - k + 1), indexing="ij")
    fail = (rule or baseline_rule(mode, n, k, tolerance, alpha))(b, c)
    return float((np.outer(pb, pc) * fail).sum())


def threshold_power(mode: Mode, n: int, threshold: float, true_acc: float) -> float:
    """Exact probability that a ``min_acc`` check fails when the true accuracy is ``true_acc``."""
    j = np.arange(n + 1)
    if mode is Mode.INTERVAL:
        fail = np.array([wilson_bound(x / n, n, upper=True) < threshold for x in j])
    else:
        fail = j / n < threshold
    return float((binom_pmf(n, true_acc) * fail).sum())


def exact_mde(
    power_at: Callable[[float], float], hi: float, power: float = DEFAULT_POWER, step: float = 0.001
) -> float | None:
    """Smallest effect on a grid of ``step`` whose exact power reaches ``power`` (power need not be smooth)."""
    x = 0.0
    while x <= hi + 1e-12:
        if power_at(x) >= power:
            return x
        x = round(x + step, 10)
    return None


__all__ = ["baseline_power", "baseline_rule", "binom_pmf", "exact_mde", "threshold_power"]
