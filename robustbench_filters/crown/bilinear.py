"""The product of two bounded tensors: elementwise (LayerNorm's centred value times 1/std) and matrix products
(attention's Q K^T and A V).

McCormick's two lower planes of ``x y`` on a box, averaged, give the midpoint plane; with the upper planes
averaged too the relaxation has equal slopes and is a first-order expansion at the box centres:

    x y = cx cy + cy (x - cx) + cx (y - cy) + (x - cx)(y - cy),   |(x - cx)(y - cy)| <= rx ry,

so ``x y in cy x + cx y - cx cy +- rx ry``. A matrix product sums these terms: ``X Y in X Cy + Cx Y - Cx Cy
+- Rx Ry``. The real local Jacobian (dX Y + X dY) is off the map used by at most (dX Ry + Rx dY) entrywise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .interval import Interval, from_mid_rad, tol
from .ops import Op


@dataclass
class ProductRelax:
    cx: torch.Tensor
    rx: torch.Tensor
    cy: torch.Tensor
    ry: torch.Tensor


def _relax(bx: Interval, by: Interval) -> ProductRelax:
    return ProductRelax(bx.mid, bx.rad, by.mid, by.rad)


class Product(Op):
    """``x * y`` with broadcasting (y may have trailing size-1 dims)."""

    token_local = True

    affine = False

    def __init__(self, x: int, y: int, shape, name: str) -> None:
        self.inputs, self.shape, self.name = (x, y), tuple(shape), name

    def forward(self, x, y):
        return x * y

    def ibp(self, bx, by):
        cx, rx, cy, ry = bx.mid, bx.rad, by.mid, by.rad
        mid = cx * cy
        rad = cx.abs() * ry + rx * cy.abs() + rx * ry
        return from_mid_rad(mid, rad + tol(mid.dtype) * (mid.abs() + rad))

    def relax(self, bounds, forms, domain):
        return _relax(bounds[0], bounds[1])

    def lin(self, rel, ts, mode="c"):
        tx, ty = ts
        cx, cy = rel.cx.unsqueeze(1), rel.cy.unsqueeze(1)
        if mode == "c":
            return tx * cy + cx * ty
        if mode == "abs":
            return tx * cy.abs() + cx.abs() * ty
        return tx * rel.ry.unsqueeze(1) + rel.rx.unsqueeze(1) * ty

    def lin_t(self, rel, lam, mode, in_shapes):
        cx, cy = {"c": (rel.cx, rel.cy), "abs": (rel.cx.abs(), rel.cy.abs()), "dm": (rel.rx, rel.ry)}[mode]
        lead = tuple(lam.shape[:2])
        gx = (lam * cy.unsqueeze(1)).sum_to_size(lead + tuple(in_shapes[0]))
        gy = (lam * cx.unsqueeze(1)).sum_to_size(lead + tuple(in_shapes[1]))
        return [gx, gy]

    def const(self, rel):
        mid = -rel.cx * rel.cy
        err = rel.rx * rel.ry
        return mid, err + tol(mid.dtype) * (mid.abs() + err)


class MatMul(Op):
    """``x @ y`` (``transpose_y``: ``x @ y^T``) on the last two dims, plus a constant ``bias`` (BSA's position
    kernel, added to the attention logits)."""

    affine = False

    def __init__(self, x: int, y: int, shape, name: str, transpose_y: bool = False, bias=None, inner: int = 0):
        self.inputs, self.shape, self.name, self.tr, self.bias = (x, y), tuple(shape), name, transpose_y, bias
        self.inner = inner

    def _y(self, y: torch.Tensor) -> torch.Tensor:
        return y.transpose(-2, -1) if self.tr else y

    def forward(self, x, y):
        out = x @ self._y(y)
        return out + self.bias if self.bias is not None else out

    def ibp(self, bx, by):
        cx, rx, cy, ry = bx.mid, bx.rad, self._y(by.mid), self._y(by.rad)
        mid = cx @ cy + (self.bias if self.bias is not None else 0)
        rad = cx.abs() @ ry + rx @ cy.abs() + rx @ ry
        return from_mid_rad(mid, rad + tol(mid.dtype) * (cx.abs() @ cy.abs() + rad + mid.abs()))

    def relax(self, bounds, forms, domain):
        return _relax(bounds[0], bounds[1])

    def lin(self, rel, ts, mode="c"):
        tx, ty = ts
        ty = self._y(ty)
        cx, cy = rel.cx.unsqueeze(1), self._y(rel.cy).unsqueeze(1)
        if mode == "c":
            return tx @ cy + cx @ ty
        if mode == "abs":
            return tx @ cy.abs() + cx.abs() @ ty
        return tx @ self._y(rel.ry).unsqueeze(1) + rel.rx.unsqueeze(1) @ ty

    def lin_t(self, rel, lam, mode, in_shapes):
        cx, cy = rel.cx.unsqueeze(1), self._y(rel.cy).unsqueeze(1)
        if mode == "abs":
            cx, cy = cx.abs(), cy.abs()
        elif mode == "dm":
            cx, cy = rel.rx.unsqueeze(1), self._y(rel.ry).unsqueeze(1)
        gx = lam @ cy.transpose(-2, -1)
        gy = cx.transpose(-2, -1) @ lam  # gradient w.r.t. y as used (x @ y'); y' = y^T when transposed
        return [gx, gy.transpose(-2, -1) if self.tr else gy]

    def const(self, rel):
        cx, cy, rx, ry = rel.cx, self._y(rel.cy), rel.rx, self._y(rel.ry)
        mid = -(cx @ cy)
        err = rx @ ry
        if self.bias is not None:
            mid = mid + self.bias
        return mid, err + tol(mid.dtype) * (cx.abs() @ cy.abs() + err + mid.abs())

    def macs(self):
        n = 1
        for s in self.shape:
            n *= s
        return n * self.inner
