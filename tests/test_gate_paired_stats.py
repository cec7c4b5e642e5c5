"""One-sided paired tests: exact McNemar, the margin score test, the sign-flip test for ratio metrics."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from robustbench_filters.stats.intervals import (
    binom_half_sf,
    holm,
    mcnemar_exact,
    mcnemar_one_sided,
    paired_margin_score_test,
)
from robustbench_filters.stats.paired import PairedRatio, sign_flip_ratio_test


def test_mcnemar_one_sided_by_hand() -> None:
    # b = 3 lost, c = 0 gained: P(Bin(3, 1/2) >= 3) = 1/8
    assert mcnemar_one_sided(3, 0) == 0.125
    # b = 4, c = 1: P(Bin(5, 1/2) >= 4) = (C(5,4) + C(5,5)) / 32 = 6/32
    assert mcnemar_one_sided(4, 1) == 6 / 32
    assert mcnemar_one_sided(0, 0) == 1.0
    assert mcnemar_one_sided(0, 7) == 1.0
    # the one-sided p is half the two-sided one when b > c (symmetric null)
    assert mcnemar_one_sided(20, 8) == pytest.approx(mcnemar_exact(20, 8) / 2)
    assert binom_half_sf(0, 5) == 1.0 and binom_half_sf(6, 5) == 0.0


def test_margin_score_test_reduces_to_mcnemar_score_and_respects_the_margin() -> None:
    z, p = paired_margin_score_test(15, 5, 500, 0.0)
    assert z == pytest.approx((15 - 5) / math.sqrt(20))  # McNemar's score statistic at margin 0
    # restricted MLE check: at margin d the z statistic is 0 exactly when b - c = n d
    z0, p0 = paired_margin_score_test(30, 20, 500, 0.02)
    assert z0 == pytest.approx(0.0, abs=1e-12) and p0 == pytest.approx(0.5)
    # a 3-point drop is significant against margin 0 but not against a 3-point margin
    assert paired_margin_score_test(25, 10, 500, 0.0)[1] < 0.05
    assert paired_margin_score_test(25, 10, 500, 0.03)[1] > 0.4
    assert paired_margin_score_test(0, 0, 500, 0.0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        paired_margin_score_test(5, 5, 8, 0.0)


def test_margin_score_test_uses_the_restricted_mle() -> None:
    """The variance is evaluated where the likelihood peaks under p_b - p_c = d (checked by a grid search)."""
    b, c, n, d = 40, 12, 300, 0.05
    grid = np.linspace(1e-6, (1 - d) / 2 - 1e-6, 200_001)  # p_c; p_b = p_c + d
    loglik = b * np.log(grid + d) + c * np.log(grid) + (n - b - c) * np.log(1 - 2 * grid - d)
    q = grid[np.argmax(loglik)]
    expected = (b - c - n * d) / math.sqrt(n * (2 * q + d * (1 - d)))
    assert paired_margin_score_test(b, c, n, d)[0] == pytest.approx(expected, rel=1e-4)


def test_holm() -> None:
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])


def _lm_pair(rng: np.random.Generator, n: int, rise: float = 0.0, noise: float = 0.0) -> PairedRatio:
    tok = rng.integers(80, 200, n).astype(float)
    nll = tok * rng.normal(1.3, 0.2, n)
    fresh = nll + tok * (rise + rng.normal(0.0, noise, n))
    return PairedRatio(np.arange(n), nll, tok, fresh, tok.copy())


def test_sign_flip_detects_a_small_perplexity_rise_and_passes_identical_runs() -> None:
    rng = np.random.default_rng(0)
    pair = _lm_pair(rng, 64, rise=0.01, noise=0.02)  # +1% perplexity, per-sequence noise twice that
    res = sign_flip_ratio_test(pair, worse="higher")
    assert res.difference == pytest.approx(pair.fresh_ratio - pair.base_ratio)
    assert math.expm1(res.difference) == pytest.approx(0.01, abs=0.006)
    assert res.p_worse < 0.01 and res.p_better > 0.5
    # against a 3% tolerance the same rise is not a regression
    assert sign_flip_ratio_test(pair, worse="higher", margin=math.log(1.03)).p_worse > 0.5
    same = PairedRatio(pair.ids, pair.base_num, pair.base_den, pair.base_num.copy(), pair.base_den.copy())
    res = sign_flip_ratio_test(same, worse="higher")
    assert res.difference == 0.0 and res.p_worse == 1.0 and res.p_better == 1.0


def test_sign_flip_is_deterministic_and_seeded() -> None:
    pair = _lm_pair(np.random.default_rng(1), 200, rise=0.002, noise=0.02)
    a = sign_flip_ratio_test(pair, worse="higher", seed=3)
    b = sign_flip_ratio_test(pair, worse="higher", seed=3)
    c = sign_flip_ratio_test(pair, worse="higher", seed=4)
    assert a == b
    assert a.p_worse != c.p_worse and abs(a.p_worse - c.p_worse) < 0.03  # Monte Carlo error only
    assert a.n_perm == 10_000 and not a.exact


def test_sign_flip_exact_enumeration_matches_brute_force() -> None:
    rng = np.random.default_rng(2)
    pair = _lm_pair(rng, 5, rise=0.05, noise=0.05)
    res = sign_flip_ratio_test(pair, worse="higher")
    assert res.exact and res.n_perm == 32

    def stat(swap: tuple[int, ...]) -> float:
        s = np.array(swap, dtype=bool)
        fn = np.where(s, pair.base_num, pair.fresh_num).sum() / np.where(s, pair.base_den, pair.fresh_den).sum()
        bn = np.where(s, pair.fresh_num, pair.base_num).sum() / np.where(s, pair.fresh_den, pair.base_den).sum()
        return fn - bn

    observed = stat((0,) * 5)
    count = sum(stat(s) >= observed - 1e-12 for s in itertools.product((0, 1), repeat=5))
    assert res.p_worse == count / 32


def test_sign_flip_for_accuracy_ratios_looks_at_lower_values() -> None:
    rng = np.random.default_rng(3)
    tok = np.full(100, 200.0)
    base = rng.binomial(200, 0.6, 100).astype(float)
    fresh = base - rng.binomial(8, 0.5, 100)  # about 2 points of token accuracy lost on every sequence
    pair = PairedRatio(np.arange(100), base, tok, fresh, tok)
    assert sign_flip_ratio_test(pair, worse="lower").p_worse < 0.001
    assert sign_flip_ratio_test(pair, worse="higher").p_worse > 0.99
