"""The statistics of CERTIFY and PREDICT (Cohen, Rosenfeld & Kolter 2019): exact binomial bounds and tests.

Everything is vectorised over examples and computed with scipy in float64. The one-sided Clopper-Pearson lower
bound is the ``alpha`` quantile of Beta(k, n - k + 1): with probability at least ``1 - alpha`` over the
Monte-Carlo draws it lies below the true top-class probability pA, which is what makes the radius a certificate.
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from ..stats.intervals import (
    max_certifiable_radius,
)  # one formula, in stats: the gate judges certified radii with it too


def _as_int(a: np.ndarray | int) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def clopper_pearson_lower(successes: np.ndarray | int, n: np.ndarray | int, alpha: float) -> np.ndarray:
    """One-sided (1 - alpha) Clopper-Pearson lower bound on a binomial proportion; 0 where successes == 0."""
    k, n = _as_int(successes), _as_int(n)
    with np.errstate(invalid="ignore"):
        lower = stats.beta.ppf(alpha, k, n - k + 1)
    return np.where(k > 0, lower, 0.0).astype(np.float64)


def clopper_pearson_interval(successes: np.ndarray | int, n: np.ndarray | int, level: float = 0.95) -> np.ndarray:
    """Two-sided exact interval at ``level``: array ``(..., 2)`` of (low, high); (0, 1) where n == 0."""
    k, n = _as_int(successes), _as_int(n)
    tail = (1 - level) / 2
    with np.errstate(invalid="ignore", divide="ignore"):
        low = np.where(k > 0, stats.beta.ppf(tail, k, n - k + 1), 0.0)
        high = np.where(k < n, stats.beta.ppf(1 - tail, k + 1, n - k), 1.0)
    return np.stack([np.nan_to_num(low, nan=0.0), np.nan_to_num(high, nan=1.0)], axis=-1)


def binom_test_half(count_a: np.ndarray | int, count_b: np.ndarray | int) -> np.ndarray:
    """Two-sided exact binomial p-value of ``count_a`` successes in ``count_a + count_b`` trials against p = 1/2.

    At p = 1/2 the null distribution is symmetric, so the p-value (sum of the probabilities no larger than the
    observed one, as in ``scipy.stats.binomtest``) is ``2 * P(X <= min(a, b))``, capped at 1.
    """
    a, b = _as_int(count_a), _as_int(count_b)
    total = a + b
    p = 2 * stats.binom.cdf(np.minimum(a, b), total, 0.5)
    return np.where(total > 0, np.minimum(1.0, p), 1.0)


def radius_from_lower(p_lower: np.ndarray | float, sigma: float) -> np.ndarray:
    """Certified L2 radius sigma * Phi^-1(pA_lower) (Cohen et al., Theorem 1 with pB = 1 - pA); 0 if pA_lower <= 1/2."""
    p = np.asarray(p_lower, dtype=np.float64)
    return np.where(p > 0.5, sigma * stats.norm.ppf(np.clip(p, 0.5, 1.0)), 0.0)


__all__ = [
    "binom_test_half",
    "clopper_pearson_interval",
    "clopper_pearson_lower",
    "max_certifiable_radius",
    "radius_from_lower",
]
