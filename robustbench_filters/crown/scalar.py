"""Sound linear relaxations of the scalar nonlinearities, their interval images and derivative ranges.

For ``f`` on ``[l, u]`` a relaxation is one slope ``s`` and an intercept interval: ``f(t) in s t + [b_lo, b_hi]``
for every t in [l, u] (equal slopes, see :mod:`.form`). The slope is the chord's (the derivative at ``l`` when the
interval is a point). The intercepts are the exact extremes of ``g(t) = f(t) - s t`` on [l, u]:

- convex f (exp, t^2, 1/sqrt(t), 1/t on t > 0): ``max g`` is at an endpoint and ``min g`` at the tangent point
  ``f'(t*) = s`` clamped to [l, u]. These are the chord and the tangent parallel to it, and they stay sound for
  any ``s`` (a rounded chord slope included);
- GELU (neither convex nor concave): ``f'`` is monotone on (-inf, -sqrt 2], [-sqrt 2, sqrt 2] and [sqrt 2, inf),
  so the stationary points of g are found by bisection on each piece and g is evaluated there and at l, u;
- ReLU: the DeepZ parallelogram (slope u / (u - l) on crossing neurons).

``dslope = sup |f'(t) - s|`` over [l, u] is what the Lipschitz bound needs (:mod:`.lipschitz`): how far the real
local derivative can be from the slope the linearisation used. Everything is widened outward (:mod:`.interval`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .interval import Interval, tol

SQRT2 = math.sqrt(2.0)
GELU_ARGMIN = -0.7517916243739  # f'(t) = 0 for f = GELU (its only stationary point)


@dataclass
class ScalarRelax:
    """``f(t) in slope * t + [mid - err, mid + err]`` on the interval, and ``dslope = sup |f'(t) - slope|``."""

    slope: torch.Tensor
    mid: torch.Tensor
    err: torch.Tensor
    dslope: torch.Tensor


# ---- the functions and their derivatives -------------------------------------------------------------------
def gelu(t: torch.Tensor) -> torch.Tensor:
    return 0.5 * t * (1.0 + torch.erf(t / SQRT2))


def gelu_d(t: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1.0 + torch.erf(t / SQRT2)) + t * torch.exp(-0.5 * t * t) / math.sqrt(2 * math.pi)


def rsqrt_d(t: torch.Tensor) -> torch.Tensor:
    return -0.5 * t.pow(-1.5)


# ---- helpers --------------------------------------------------------------------------------------------------
def _chord(f, fd, lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    w = hi - lo
    point = w <= 1e-12 * (1 + lo.abs())
    safe = torch.where(point, torch.ones_like(w), w)
    return torch.where(point, fd(lo), (f(hi) - f(lo)) / safe)


def _finish(slope, g_lo, g_hi, dmin, dmax, f_scale, lo, hi) -> ScalarRelax:
    """Intercepts [g_lo, g_hi] and derivative range [dmin, dmax], widened by the magnitude of what was summed."""
    t = tol(slope.dtype)
    scale = f_scale + slope.abs() * torch.maximum(lo.abs(), hi.abs())
    g_lo, g_hi = g_lo - t * scale, g_hi + t * scale
    dslope = torch.maximum(dmax - slope, slope - dmin).clamp_min(0) + t * (dmin.abs() + dmax.abs())
    return ScalarRelax(slope, (g_lo + g_hi) / 2, (g_hi - g_lo) / 2, dslope)


def _convex(f, fd, tangent, lo, hi, dmin, dmax) -> ScalarRelax:
    """Chord / parallel tangent for a convex ``f``; ``tangent(s)`` solves f'(t) = s (may be nan: clamped)."""
    s = _chord(f, fd, lo, hi)
    t_star = tangent(s)
    t_star = torch.where(torch.isfinite(t_star), t_star, lo)
    t_star = torch.minimum(torch.maximum(t_star, lo), hi)
    g_lo = torch.minimum(f(t_star) - s * t_star, torch.minimum(f(lo) - s * lo, f(hi) - s * hi))
    g_hi = torch.maximum(f(lo) - s * lo, f(hi) - s * hi)
    return _finish(s, g_lo, g_hi, dmin, dmax, torch.maximum(f(lo).abs(), f(hi).abs()), lo, hi)


# ---- relaxations --------------------------------------------------------------------------------------------
def relax_exp(b: Interval) -> ScalarRelax:
    lo, hi = b.lo, b.hi
    return _convex(torch.exp, torch.exp, torch.log, lo, hi, torch.exp(lo), torch.exp(hi))


def relax_square(b: Interval) -> ScalarRelax:
    lo, hi = b.lo, b.hi
    return _convex(torch.square, lambda t: 2 * t, lambda s: s / 2, lo, hi, 2 * lo, 2 * hi)


def relax_rsqrt(b: Interval) -> ScalarRelax:
    """1 / sqrt(t) for t > 0 (the caller clamps the interval to t >= a positive floor)."""
    lo, hi = b.lo, b.hi
    return _convex(torch.rsqrt, rsqrt_d, lambda s: (-2 * s).pow(-2.0 / 3.0), lo, hi, rsqrt_d(lo), rsqrt_d(hi))


def relax_reciprocal(b: Interval) -> ScalarRelax:
    """1 / t for t > 0."""
    lo, hi = b.lo, b.hi
    return _convex(torch.reciprocal, lambda t: -1 / (t * t), lambda s: (-s).rsqrt(), lo, hi, -1 / (lo * lo),
                   -1 / (hi * hi))  # fmt: skip


def relax_relu(b: Interval) -> ScalarRelax:
    lo, hi = b.lo, b.hi
    cross = (lo < 0) & (hi > 0)
    w = torch.where(cross, hi - lo, torch.ones_like(lo))
    s = torch.where(cross, hi / w, (lo >= 0).to(lo.dtype))
    zero = torch.zeros_like(lo)
    g_hi = torch.where(cross, -s * lo, zero)  # the chord s (t - l); the lower line is s t
    dmin = torch.where(cross | (hi <= 0), zero, torch.ones_like(lo))
    dmax = torch.where(lo >= 0, torch.ones_like(lo), torch.where(cross, torch.ones_like(lo), zero))
    return _finish(s, zero, g_hi, dmin, dmax, torch.maximum(lo.abs(), hi.abs()), lo, hi)


def _bisect(fd, s: torch.Tensor, a: torch.Tensor, b: torch.Tensor, iters: int = 80) -> torch.Tensor:
    """A root of fd(t) = s in [a, b] where fd - s changes sign on [a, b] and is monotone there."""
    fa = fd(a) - s
    for _ in range(iters):
        m = (a + b) / 2
        fm = fd(m) - s
        left = (fm > 0) == (fa > 0)
        a, fa = torch.where(left, m, a), torch.where(left, fm, fa)
        b = torch.where(left, b, m)
    return (a + b) / 2


def relax_gelu(b: Interval) -> ScalarRelax:
    lo, hi = b.lo, b.hi
    s = _chord(gelu, gelu_d, lo, hi)
    cands = [lo, hi]
    dcands = [gelu_d(lo), gelu_d(hi)]
    inf = torch.full_like(lo, math.inf)
    for p_lo, p_hi in ((-inf, -SQRT2 + 0 * lo), (-SQRT2 + 0 * lo, SQRT2 + 0 * lo), (SQRT2 + 0 * lo, inf)):
        a, c = torch.maximum(lo, p_lo), torch.minimum(hi, p_hi)
        ok = a < c
        a, c = torch.where(ok, a, lo), torch.where(ok, c, lo)
        fa, fc = gelu_d(a) - s, gelu_d(c) - s
        ok = ok & ((fa <= 0) != (fc <= 0))
        root = _bisect(gelu_d, s, a, torch.where(ok, c, a))
        cands.append(torch.where(ok, root, lo))
    for crit in (-SQRT2, SQRT2):  # extremes of f' (for the derivative range)
        inside = (lo <= crit) & (crit <= hi)
        dcands.append(torch.where(inside, gelu_d(torch.full_like(lo, crit)), dcands[0]))
    g = torch.stack([gelu(t) - s * t for t in cands])
    d = torch.stack(dcands)
    f_scale = torch.maximum(gelu(lo).abs(), gelu(hi).abs())
    return _finish(s, g.amin(0), g.amax(0), d.amin(0), d.amax(0), f_scale + 0.2, lo, hi)


# ---- interval images (IBP) ----------------------------------------------------------------------------------
def ibp_monotone(f, b: Interval, increasing: bool = True) -> Interval:
    a, c = f(b.lo), f(b.hi)
    return Interval(a, c) if increasing else Interval(c, a)


def ibp_gelu(b: Interval) -> Interval:
    fl, fh = gelu(b.lo), gelu(b.hi)
    inside = (b.lo <= GELU_ARGMIN) & (b.hi >= GELU_ARGMIN)
    floor = gelu(torch.full_like(b.lo, GELU_ARGMIN))
    lo = torch.where(inside, torch.minimum(floor, torch.minimum(fl, fh)), torch.minimum(fl, fh))
    hi = torch.maximum(fl, fh)
    t = tol(lo.dtype)
    return Interval(lo - t * (lo.abs() + 1), hi + t * (hi.abs() + 1))


def ibp_square(b: Interval) -> Interval:
    a, c = b.lo.square(), b.hi.square()
    cross = (b.lo < 0) & (b.hi > 0)
    return Interval(torch.where(cross, torch.zeros_like(a), torch.minimum(a, c)), torch.maximum(a, c))
