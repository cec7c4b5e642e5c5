"""Intervals and the outward rounding that keeps them sound in floating point.

Every bound in this package is a pair of tensors ``lo <= value <= hi`` (batch first). The arithmetic is done in
float64 by default; rounding can still move a computed bound by a few ulps of the quantities summed into it, so
every bound that leaves a concretisation or a scalar relaxation is widened by :func:`widen`:
``tol(dtype) * scale``, where ``scale`` is the magnitude of what was summed (not of the result, which may have
cancelled). ``tol`` is 1e-12 in float64, i.e. ~1e4 ulps of every term: far above the error of the sums involved
(at most ~1e4 terms each), and far below any bound that matters (margins and widths of 1e-6 and up).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: relative outward slack per dtype (see the module docstring)
TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 1e-1}


def tol(dtype: torch.dtype) -> float:
    return TOL.get(dtype, 1e-5)


def widen(lo: torch.Tensor, hi: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``[lo, hi]`` pushed outward by ``tol * scale`` (``scale >= 0``, the magnitude of the summed terms)."""
    slack = tol(lo.dtype) * scale
    return lo - slack, hi + slack


@dataclass
class Interval:
    """Elementwise bounds of a node's value, shape (B, *node shape). ``lo <= hi`` wherever both are finite."""

    lo: torch.Tensor
    hi: torch.Tensor

    @property
    def mid(self) -> torch.Tensor:
        return (self.lo + self.hi) / 2

    @property
    def rad(self) -> torch.Tensor:
        return ((self.hi - self.lo) / 2).clamp_min(0)

    def meet(self, other: Interval | None) -> Interval:
        """The intersection (both contain the true value, so it does too)."""
        if other is None:
            return self
        return Interval(torch.maximum(self.lo, other.lo), torch.minimum(self.hi, other.hi))

    def clamp(self, lo: float | None = None, hi: float | None = None) -> Interval:
        """Intersect with a range the value is known to lie in (a softmax in [0, 1], a variance above eps)."""
        a, b = self.lo, self.hi
        if lo is not None:
            a, b = a.clamp_min(lo), b.clamp_min(lo)
        if hi is not None:
            a, b = a.clamp_max(hi), b.clamp_max(hi)
        return Interval(a, b)

    def finite(self) -> bool:
        return bool(torch.isfinite(self.lo).all() and torch.isfinite(self.hi).all())


def from_mid_rad(mid: torch.Tensor, rad: torch.Tensor) -> Interval:
    return Interval(mid - rad, mid + rad)
