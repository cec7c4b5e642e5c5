"""Paired comparisons of two runs on the same examples: the samples, and a sign-flip test for ratio metrics.

Two runs evaluated on the same examples differ only where their outcomes differ, so a paired test sees much
smaller changes than two independent intervals do: examples both runs get right (or both wrong) cancel.

- Binary outcomes (image accuracy) use McNemar's exact test on the discordant pairs
  (:func:`robustbench_filters.stats.intervals.mcnemar_one_sided`, or the score test with a margin).
- Ratio metrics over examples (perplexity = exp(sum nll / sum tokens), token accuracy = sum correct / sum
  tokens) use a paired permutation (sign-flip) test, :func:`sign_flip_ratio_test`: under "the two runs are
  exchangeable on every example", swapping the two runs' (numerator, denominator) on any subset of examples
  gives an equally likely data set (Fisher 1935; Good, *Permutation, Parametric and Bootstrap Tests of
  Hypotheses*, 3rd ed., 2005, ch. 3). The statistic is the difference of the two corpus-level ratios (for
  perplexity, the difference of log-perplexities: token-weighted, exactly what the gate reports), so no
  per-sequence normality is assumed. Up to 16 examples every one of the 2^n swaps is enumerated (exact);
  beyond, ``n_perm`` seeded random swaps give p = (1 + #{T* >= T}) / (1 + n_perm), which never reports 0
  (Phipson & Smyth 2010, Stat. Appl. Genet. Mol. Biol. 9:39).

A tolerance margin d ("fail only when worse by more than d") shifts the fresh run by d before testing: the
null hypothesis becomes "fresh = base + d on every example" (a location-shift model), whose boundary is
exactly "worse by d".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

EXACT_MAX_N = 16  # 2^16 = 65,536 swaps: enumerate them all up to here
_CHUNK = 2048


@dataclass(frozen=True)
class PairedBinary:
    """Correct / wrong per example for the baseline and the fresh run, aligned on ``ids``."""

    ids: np.ndarray
    base: np.ndarray  # bool
    fresh: np.ndarray  # bool

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def b(self) -> int:
        """Examples only the baseline gets right (the fresh run lost them)."""
        return int((self.base & ~self.fresh).sum())

    @property
    def c(self) -> int:
        """Examples only the fresh run gets right."""
        return int((~self.base & self.fresh).sum())

    @property
    def drop(self) -> float:
        """acc(base) - acc(fresh) = (b - c) / n."""
        return (self.b - self.c) / self.n if self.n else 0.0


@dataclass(frozen=True)
class PairedRatio:
    """Per-example numerators and denominators of a ratio metric for both runs, aligned on ``ids``.

    For perplexity the numerator is the summed negative log-likelihood of a sequence and the denominator its
    token count; for token accuracy, the correct tokens and the token count.
    """

    ids: np.ndarray
    base_num: np.ndarray
    base_den: np.ndarray
    fresh_num: np.ndarray
    fresh_den: np.ndarray

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def base_ratio(self) -> float:
        return float(self.base_num.sum() / self.base_den.sum())

    @property
    def fresh_ratio(self) -> float:
        return float(self.fresh_num.sum() / self.fresh_den.sum())


@dataclass(frozen=True)
class PermutationResult:
    difference: float  # fresh ratio - base ratio (no margin applied)
    p_worse: float  # one-sided p for "fresh is worse by more than the margin"
    p_better: float  # one-sided p for "fresh is better" (margin not applied), to suggest a baseline update
    n: int
    n_perm: int  # swaps evaluated (2^n when exact)
    exact: bool


def _swap_statistics(d_num: np.ndarray, d_den: np.ndarray, sums: tuple[float, float, float, float], masks: np.ndarray):
    """T* for each row of ``masks`` (1 = swap that example): fresh ratio minus base ratio after the swaps."""
    fn, fd, bn, bd = sums
    m = masks.astype(np.float64)
    # swapping example i moves d_num[i] = fresh_num[i] - base_num[i] from the fresh sum to the base sum
    f_num, f_den = fn - m @ d_num, fd - m @ d_den
    b_num, b_den = bn + m @ d_num, bd + m @ d_den
    return f_num / f_den - b_num / b_den


def _all_masks(n: int) -> np.ndarray:
    codes = np.arange(2**n, dtype=np.int64)[:, None]
    return ((codes >> np.arange(n, dtype=np.int64)) & 1).astype(bool)


def sign_flip_ratio_test(
    pair: PairedRatio,
    *,
    worse: Literal["higher", "lower"],
    margin: float = 0.0,
    n_perm: int = 10_000,
    seed: int = 0,
) -> PermutationResult:
    """One-sided paired permutation test that the fresh run's ratio is worse than the baseline's by > margin.

    ``worse="higher"`` for metrics where a larger ratio is worse (mean nll per token = log-perplexity; give a
    relative perplexity tolerance r as ``margin = log(1 + r)``), ``"lower"`` for accuracies (absolute margin).
    Deterministic: the same inputs and seed give the same p-value.
    """
    if pair.n == 0:
        raise ValueError("no paired examples")
    if n_perm < 1:
        raise ValueError(f"n_perm must be >= 1, got {n_perm}")
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    sign = 1.0 if worse == "higher" else -1.0  # sign * (fresh - base) > 0 means "fresh is worse"
    base_num, base_den = pair.base_num.astype(np.float64), pair.base_den.astype(np.float64)
    fresh_den = pair.fresh_den.astype(np.float64)
    raw_num = pair.fresh_num.astype(np.float64)
    # the margin test: move the fresh run back by the margin, so the null's boundary becomes "equal"
    shifted_num = raw_num - sign * margin * fresh_den
    t_worse = sign * (shifted_num.sum() / fresh_den.sum() - base_num.sum() / base_den.sum())
    t_better = sign * (pair.fresh_ratio - pair.base_ratio)
    tie = 1e-12 * max(1.0, abs(t_worse), abs(t_better))  # identical runs must give p = 1, not float noise
    d_den = fresh_den - base_den
    worse_args = (shifted_num - base_num, d_den, (shifted_num.sum(), fresh_den.sum(), base_num.sum(), base_den.sum()))
    better_args = (raw_num - base_num, d_den, (raw_num.sum(), fresh_den.sum(), base_num.sum(), base_den.sum()))

    exact = pair.n <= EXACT_MAX_N
    ge = le = total = 0
    for masks in _mask_batches(pair.n, exact, n_perm, seed):
        ge += int((sign * _swap_statistics(*worse_args, masks) >= t_worse - tie).sum())
        le += int((sign * _swap_statistics(*better_args, masks) <= t_better + tie).sum())
        total += len(masks)
    if exact:  # the identity swap is among the 2^n, so p >= 2^-n
        p_worse, p_better = ge / total, le / total
    else:
        p_worse, p_better = (1 + ge) / (1 + total), (1 + le) / (1 + total)
    return PermutationResult(pair.fresh_ratio - pair.base_ratio, p_worse, p_better, pair.n, total, exact)


def _mask_batches(n: int, exact: bool, n_perm: int, seed: int) -> Iterator[np.ndarray]:
    """All 2^n swap patterns, or ``n_perm`` seeded random ones in fixed-size chunks (same seed, same draws)."""
    if exact:
        yield _all_masks(n)
        return
    rng = np.random.default_rng(seed)
    remaining = n_perm
    while remaining > 0:
        k = min(_CHUNK, remaining)
        yield rng.random((k, n)) < 0.5
        remaining -= k


__all__ = ["EXACT_MAX_N", "PairedBinary", "PairedRatio", "PermutationResult", "sign_flip_ratio_test"]
