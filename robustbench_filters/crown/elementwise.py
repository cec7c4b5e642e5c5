"""Elementwise nonlinear ops (ReLU, GELU, exp, square, 1/sqrt, 1/t) on the scalar relaxations of :mod:`.scalar`."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import scalar as S
from .interval import Interval
from .ops import Op, widen_interval

# kind -> (exact function, relaxation, interval image, output range)
KINDS = {
    "relu": (F.relu, S.relax_relu, lambda b: S.ibp_monotone(F.relu, b), (0.0, None)),
    "gelu": (S.gelu, S.relax_gelu, S.ibp_gelu, (-0.17, None)),
    "exp": (torch.exp, S.relax_exp, lambda b: S.ibp_monotone(torch.exp, b), (0.0, None)),
    "square": (torch.square, S.relax_square, S.ibp_square, (0.0, None)),
    "rsqrt": (torch.rsqrt, S.relax_rsqrt, lambda b: S.ibp_monotone(torch.rsqrt, b, increasing=False), (0.0, None)),
    "reciprocal": (
        torch.reciprocal, S.relax_reciprocal, lambda b: S.ibp_monotone(torch.reciprocal, b, increasing=False),
        (0.0, None),
    ),
}  # fmt: skip


class Elementwise(Op):
    """``f(x)`` elementwise. ``floor`` clamps the input bounds from below where the input is known to be at least
    that (LayerNorm's variance plus eps for 1/sqrt), so the relaxation never sees t <= 0."""

    token_local = True

    affine = False

    def __init__(self, inp: int, kind: str, shape, name: str, floor: float | None = None) -> None:
        self.inputs, self.kind, self.shape, self.name, self.floor = (inp,), kind, tuple(shape), name, floor
        self.f, self._relax, self._ibp, self.value_range = KINDS[kind]

    def _in(self, b: Interval) -> Interval:
        return b.clamp(lo=self.floor) if self.floor is not None else b

    def forward(self, x):
        return self.f(x)

    def ibp(self, b):
        return widen_interval(self._ibp(self._in(b)))

    def relax(self, bounds, forms, domain):
        return self._relax(self._in(bounds[0]))

    def lin(self, rel, ts, mode="c"):
        coef = {"c": rel.slope, "abs": rel.slope.abs(), "dm": rel.dslope}[mode]
        return ts[0] * coef.unsqueeze(1)

    def lin_t(self, rel, lam, mode, in_shapes):
        return [self.lin(rel, [lam], mode)]

    def const(self, rel):
        return rel.mid, rel.err
