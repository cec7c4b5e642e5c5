"""LayerNorm as a chain of ops the engine can relax: centring, square, mean (+ eps), 1/sqrt, product, affine.

``LN(x) = gamma * (x - mu) / sqrt(var + eps) + beta`` with ``var = mean((x - mu)^2)``:

    c = x - mean(x)          exact (affine)
    q = c^2                  convex: chord and parallel tangent
    v = mean(q) + eps        exact; v >= eps always, so its bounds are clamped there
    r = 1 / sqrt(v)          convex and decreasing on v > 0
    y = c * r                product of two bounded tensors (r broadcast over the features)
    out = gamma * y + beta   exact

Each step is sound alone, so the chain is; the loss is in the product, which only sees boxes of c and r.

The variance's lower bound decides how loose 1/sqrt is (near the floor eps, 1/sqrt(v) is 1/sqrt(eps) = 1e3), and
the square's relaxation alone gives a poor one: every feature whose interval straddles 0 contributes a negative
lower line. :class:`Variance` adds a bound from the norm: ``||c||_2 >= <u, c>`` for every unit vector u, and
``<u, c>`` is one linear form of the input, bounded below over the domain like any node; with u the direction of
c at the domain's centre the loss is only second order in the width of c's set.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.errors import RobfiltError
from .bilinear import Product
from .elementwise import Elementwise
from .form import LinearForm
from .graph import Graph
from .interval import Interval, tol
from .ops import Center, MeanLast, Scale


class Variance(MeanLast):
    """``mean(q) + eps`` for ``q = c^2`` (c: the centred values, node ``centre``), kept >= eps, whose lower bound
    is also taken from ``mean(c^2) >= <u, c>^2 / (D ||u||^2)`` (u: c at the domain's centre; see the module)."""

    def __init__(self, q: int, centre: int, eps: float, shape, name: str) -> None:
        super().__init__(q, eps, shape, name, floor=eps)
        self.centre = centre

    def refine(self, bound, forms, domain, cost=None):
        form = forms.get(self.centre)
        if form is None or form.a is None:
            return bound
        a = form.a  # (B, K, *lead, D)
        d = a.shape[-1]
        u = torch.einsum("bk...,bk->b...", a, domain.mid) + form.mid  # c at the centre, (B, *lead, D)
        row = LinearForm((a * u.unsqueeze(1)).sum(-1), (u * form.mid).sum(-1), (u.abs() * form.err).sum(-1))
        low = row.bounds(domain).lo.clamp_min(0)  # <u, c> >= low on the domain, (B, *lead)
        if cost is not None:
            cost.charge(2 * a.numel())
        # Cauchy-Schwarz: ||c||^2 >= <u, c>^2 / ||u||^2; shrunk by a few ulps for the rounding of the squares
        norm2 = (u * u).sum(-1)
        safe = torch.where(norm2 > 0, norm2, torch.ones_like(norm2))
        v = torch.where(norm2 > 0, low * low / (d * safe), torch.zeros_like(low)) * (1 - 16 * tol(low.dtype))
        v = (v + self.add).unsqueeze(-1)
        return Interval(torch.maximum(bound.lo, v), torch.maximum(bound.hi, v))


def layer_norm(g: Graph, x: int, ln: nn.LayerNorm, name: str, dtype: torch.dtype, device: torch.device) -> int:
    """Append ``ln`` applied to node ``x`` (last dimension) and return the output node."""
    shape = g.shape(x)
    if tuple(ln.normalized_shape) != (shape[-1],):
        raise RobfiltError(f"{name}: LayerNorm over {tuple(ln.normalized_shape)} is not supported (only the last dim).")
    eps = float(ln.eps)
    c = g.add(Center(x, shape, f"{name}.centre"))
    q = g.add(Elementwise(c, "square", shape, f"{name}.square"))
    v = g.add(Variance(q, c, eps, (*shape[:-1], 1), f"{name}.var"))
    r = g.add(Elementwise(v, "rsqrt", (*shape[:-1], 1), f"{name}.rsqrt", floor=eps))
    y = g.add(Product(c, r, shape, f"{name}.normalised"))
    if ln.weight is None and ln.bias is None:
        return y
    w = ln.weight.detach().to(device, dtype) if ln.weight is not None else torch.ones(shape[-1], dtype=dtype)
    b = ln.bias.detach().to(device, dtype) if getattr(ln, "bias", None) is not None else None
    return g.add(Scale(y, w, b, shape, f"{name}.affine"))
