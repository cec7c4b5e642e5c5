"""Input domains: the l-infinity box B_inf(x0, eps) and the l2 ball B_2(x0, rho), each intersected with [0, 1]^d.

A domain turns a linear function ``A x + c`` (``A`` of shape (B, K, *shape), K = input size) into elementwise
bounds over the domain (:meth:`Domain.concretize`). Over a box that is ``A xc +- |A| xr``; over the ball it is
``A x0 +- rho ||A||_2``, and since the ball is also inside its own clipped box, the tighter of the two is kept
(both contain the intersection).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .interval import Interval, widen


@dataclass
class Domain:
    """Per example: the box ``[lo, hi]`` (B, K) and, for an l2 ball, its centre (B, K) and radius."""

    lo: torch.Tensor
    hi: torch.Tensor
    centre: torch.Tensor | None = None
    rho: float | None = None

    @property
    def mid(self) -> torch.Tensor:
        return (self.lo + self.hi) / 2

    @property
    def rad(self) -> torch.Tensor:
        return (self.hi - self.lo) / 2

    @property
    def size(self) -> int:
        return int(self.lo.shape[1])

    def interval(self) -> Interval:
        return Interval(self.lo, self.hi)

    def concretize(self, a: torch.Tensor) -> Interval:
        """Bounds of ``a x`` over the domain, ``a`` of shape (B, K, *shape) -> (B, *shape), widened outward."""
        flat = a.reshape(a.shape[0], a.shape[1], -1)
        centre = torch.einsum("bkn,bk->bn", flat, self.mid)
        spread = torch.einsum("bkn,bk->bn", flat.abs(), self.rad)
        scale = torch.einsum("bkn,bk->bn", flat.abs(), self.mid.abs() + self.rad)
        lo, hi = centre - spread, centre + spread
        if self.rho is not None:
            c2 = torch.einsum("bkn,bk->bn", flat, self.centre)
            r2 = self.rho * flat.norm(dim=1)
            lo, hi = torch.maximum(lo, c2 - r2), torch.minimum(hi, c2 + r2)
        lo, hi = widen(lo, hi, scale)
        shape = (a.shape[0], *a.shape[2:])
        return Interval(lo.reshape(shape), hi.reshape(shape))

    def concretize_rows(self, lam: torch.Tensor) -> Interval:
        """Bounds of ``lam_r . x`` over the domain for rows ``lam`` of shape (B, R, *input shape) -> (B, R)."""
        return self.concretize(lam.reshape(lam.shape[0], lam.shape[1], -1).transpose(1, 2))

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``n`` random points of the domain per example, shape (n, B, K) (tests and sampling checks)."""
        u = torch.rand((n, *self.lo.shape), generator=generator, dtype=self.lo.dtype).to(self.lo.device)
        x = self.lo + u * (self.hi - self.lo)
        if self.rho is None:
            return x
        d = x - self.centre  # pull each point into the ball along its direction from the centre (stays in the box)
        norm = d.norm(dim=-1, keepdim=True)
        r = self.rho * torch.rand(norm.shape, generator=generator, dtype=x.dtype).to(x.device) ** (1 / self.size)
        return self.centre + d * torch.where(norm > r, r / norm.clamp_min(1e-300), torch.ones_like(norm))


def linf_domain(x0: torch.Tensor, eps: float, box: tuple[float, float] = (0.0, 1.0)) -> Domain:
    """B_inf(x0, eps) intersected with the pixel box, flattened per example."""
    flat = x0.reshape(x0.shape[0], -1)
    return Domain((flat - eps).clamp(*box), (flat + eps).clamp(*box))


def l2_domain(x0: torch.Tensor, rho: float, box: tuple[float, float] = (0.0, 1.0)) -> Domain:
    """B_2(x0, rho) intersected with the pixel box (its clipped bounding box carries the box part)."""
    flat = x0.reshape(x0.shape[0], -1)
    return Domain((flat - rho).clamp(*box), (flat + rho).clamp(*box), centre=flat.clone(), rho=float(rho))
