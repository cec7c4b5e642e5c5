"""Graph nodes: the op interface and the exact (affine) ops.

An op maps its input nodes' values to its output, batch first. Every op offers the same five views:

- ``forward(*values)``: the exact value (to check the graph against the model, and for sampling tests);
- ``ibp(*intervals)``: an interval containing the output (interval bound propagation);
- ``relax(bounds, forms, domain)``: for a nonlinear op, its relaxation on the input bounds (a linear map plus an
  interval constant, :mod:`.form`); affine ops return None;
- ``lin(rel, tangents, mode)``: the relaxation's linear map applied to tangents of shape (B, T, *input shape) —
  ``mode`` ``"c"`` is the map itself, ``"abs"`` its entrywise absolute value (to carry error intervals), ``"dm"``
  the bound on how far the op's real local Jacobian can be from that map on the input bounds (Lipschitz bound;
  None where it is exact). The transposes (:meth:`Op.lin_t`) are the vector-Jacobian products of ``lin``;
- ``const(rel)``: the constant interval (mid, err) added to the output (an affine op's bias has err 0).

``macs`` counts the multiply-adds of one forward pass of the op on one example; the engine charges T times
that for a ``lin`` on T tangents, which is how costs are reported in model passes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.func import vjp

from .interval import Interval, from_mid_rad, tol

Const = tuple[torch.Tensor, torch.Tensor]  # (mid, err), broadcastable to (B, *shape)


class Op:
    """One node of a :class:`~robustbench_filters.crown.graph.Graph`."""

    name: str = ""
    inputs: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    affine: bool = True
    value_range: tuple[float | None, float | None] = (None, None)  # a range the output always lies in
    token_local: bool = False  # acts on each token (the leading dim of an (N, D) value) separately

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def ibp(self, *bs: Interval) -> Interval:
        raise NotImplementedError

    def relax(self, bounds: Sequence[Interval], forms: Sequence[Any], domain: Any) -> Any:
        return None

    def finish(self, rel: Any, out: Interval) -> None:
        """Called with the output bounds once known (ops whose Lipschitz view needs them)."""

    def implied(self, rel: Any) -> Interval | None:
        """Bounds of the output that the relaxation's own construction implies (a softmax's from the bounds of
        its logits' differences), met with the form's; None when it implies none beyond the form."""
        return None

    def refine(self, bound: Interval, forms: dict, domain: Any, cost: Any = None) -> Interval:
        """A tighter bound of this node from the linear forms of earlier nodes (``forms``: node -> form), met
        with ``bound``; the default keeps ``bound`` (see :class:`~.layernorm.Variance`)."""
        return bound

    def lin(self, rel: Any, ts: Sequence[torch.Tensor], mode: str = "c") -> torch.Tensor | None:
        raise NotImplementedError

    def const(self, rel: Any) -> Const | None:
        return None

    def macs(self) -> int:
        return 0

    def lin_t(self, rel: Any, lam: torch.Tensor, mode: str, in_shapes: Sequence[tuple[int, ...]]) -> list:
        """The transpose of ``lin``: cotangent (B, R, *out) -> one (B, R, *in) per input (None: no dependence)."""
        lead = tuple(lam.shape[:2])
        zeros = [lam.new_zeros(lead + tuple(s)) for s in in_shapes]
        out, pull = vjp(lambda *t: self.lin(rel, list(t), mode), *zeros)
        if out is None:
            return [None] * len(in_shapes)
        return list(pull(lam))


def _merge(t: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
    """(B, T, *s) -> (B * T, *s) and the lead dims."""
    return t.reshape(-1, *t.shape[2:]), (t.shape[0], t.shape[1])


class Input(Op):
    """The input node (node 0): the flattened K coordinates of the input domain, reshaped to the model's input."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape, self.name = tuple(shape), "input"


class Linear(Op):
    """``t @ W^T + b`` on the last dimension (nn.Linear, the qkv projection, the head)."""

    token_local = True

    def __init__(self, inp: int, weight: torch.Tensor, bias: torch.Tensor | None, shape: tuple[int, ...], name: str):
        self.inputs, self.w, self.b, self.shape, self.name = (inp,), weight, bias, tuple(shape), name
        self.w_abs = weight.abs()
        self.in_features = weight.shape[1]

    def forward(self, x):
        return F.linear(x, self.w, self.b)

    def ibp(self, b):
        mid = F.linear(b.mid, self.w, self.b)
        rad = F.linear(b.rad, self.w_abs)
        return from_mid_rad(mid, rad + tol(mid.dtype) * (F.linear(b.mid.abs() + b.rad, self.w_abs) + mid.abs()))

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        return F.linear(ts[0], self.w_abs if mode == "abs" else self.w)

    def lin_t(self, rel, lam, mode, in_shapes):
        if mode == "dm":
            return [None]
        return [lam @ (self.w_abs if mode == "abs" else self.w)]

    def const(self, rel):
        return None if self.b is None else (self.b, None)

    def macs(self):
        n = 1
        for s in self.shape:
            n *= s
        return n * self.in_features


class Scale(Op):
    """``t * gamma + beta`` with gamma, beta broadcast over the value (LayerNorm's affine part, LayerScale, the
    input normaliser)."""

    token_local = True

    def __init__(self, inp: int, gamma: torch.Tensor, beta: torch.Tensor | None, shape: tuple[int, ...], name: str):
        self.inputs, self.g, self.b, self.shape, self.name = (inp,), gamma, beta, tuple(shape), name

    def forward(self, x):
        return x * self.g + (self.b if self.b is not None else 0)

    def ibp(self, b):
        # the ends in the order ``forward`` computes (rounding is monotone, so each end stays outside the value)
        a, c = b.lo * self.g, b.hi * self.g
        lo, hi = torch.minimum(a, c), torch.maximum(a, c)
        if self.b is None:
            return Interval(lo, hi)
        return Interval(lo + self.b, hi + self.b)

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        return ts[0] * (self.g.abs() if mode == "abs" else self.g)

    def lin_t(self, rel, lam, mode, in_shapes):
        return [self.lin(rel, [lam], mode)]

    def const(self, rel):
        return None if self.b is None else (self.b, None)


class LinComb(Op):
    """``sum_i c_i x_i`` of same-shaped inputs (residual connections, the boosting residual of GRC)."""

    token_local = True

    def __init__(self, inputs: Sequence[int], coeffs: Sequence[float | torch.Tensor], shape, name: str):
        self.inputs, self.c, self.shape, self.name = tuple(inputs), list(coeffs), tuple(shape), name

    def forward(self, *xs):
        return sum(c * x for c, x in zip(self.c, xs, strict=True))

    def ibp(self, *bs):
        # each term's ends, summed in ``forward``'s order: rounding is monotone in every summand, so the sums of
        # the low (high) ends stay below (above) the computed value
        lo, hi = 0, 0
        for c, b in zip(self.c, bs, strict=True):
            a, d = c * b.lo, c * b.hi
            lo, hi = lo + torch.minimum(a, d), hi + torch.maximum(a, d)
        return Interval(lo, hi)

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        return sum((abs(c) if mode == "abs" else c) * t for c, t in zip(self.c, ts, strict=True))

    def lin_t(self, rel, lam, mode, in_shapes):
        if mode == "dm":
            return [None] * len(self.c)
        return [(abs(c) if mode == "abs" else c) * lam for c in self.c]


class Center(Op):
    """``x - mean(x)`` over the last dimension (LayerNorm's centring)."""

    token_local = True

    def __init__(self, inp: int, shape, name: str):
        self.inputs, self.shape, self.name = (inp,), tuple(shape), name

    def forward(self, x):
        return x - x.mean(-1, keepdim=True)

    def ibp(self, b):
        # x_i - mean = (1 - 1/n) x_i - sum_{j != i} x_j / n
        n = b.lo.shape[-1]
        mid = b.mid - b.mid.mean(-1, keepdim=True)
        rad = b.rad * (1 - 2 / n) + b.rad.mean(-1, keepdim=True)
        return from_mid_rad(
            mid, rad + tol(mid.dtype) * (b.mid.abs() + b.rad + (b.mid.abs() + b.rad).mean(-1, keepdim=True))
        )

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        t = ts[0]
        if mode == "abs":  # |I - 11^T/n| = (1 - 2/n) I + 11^T/n entrywise
            n = t.shape[-1]
            return t * (1 - 2 / n) + t.mean(-1, keepdim=True)
        return t - t.mean(-1, keepdim=True)

    def lin_t(self, rel, lam, mode, in_shapes):  # symmetric
        return [self.lin(rel, [lam], mode)]


class MeanLast(Op):
    """``mean(x, -1) + add`` kept as a trailing dimension of size 1 (LayerNorm's variance, with its eps)."""

    token_local = True

    def __init__(self, inp: int, add: float, shape, name: str, floor: float | None = None):
        self.inputs, self.add, self.shape, self.name = (inp,), float(add), tuple(shape), name
        self.value_range = (floor, None)

    def forward(self, x):
        return x.mean(-1, keepdim=True) + self.add

    def ibp(self, b):
        return Interval(b.lo.mean(-1, keepdim=True) + self.add, b.hi.mean(-1, keepdim=True) + self.add)

    def lin(self, rel, ts, mode="c"):
        return None if mode == "dm" else ts[0].mean(-1, keepdim=True)

    def lin_t(self, rel, lam, mode, in_shapes):
        if mode == "dm":
            return [None]
        n = in_shapes[0][-1]
        return [lam.expand(*lam.shape[:-1], n) / n]

    def const(self, rel):
        return torch.tensor(self.add, dtype=torch.float64), None  # 0-dim: broadcasts on any device


class Reshape(Op):
    """A fixed linear rearrangement with nonnegative coefficients (a selection, permutation, split of heads, mean
    of tokens, a positive scale): ``fn`` maps (lead, *in) -> (lead, *out) for any lead dims, and being
    nonnegative it is its own absolute value."""

    def __init__(self, inp: int, fn, shape, name: str, fn_t=None):
        self.inputs, self.fn, self.shape, self.name, self.fn_t = (inp,), fn, tuple(shape), name, fn_t

    def forward(self, x):
        return self.fn(x)

    def ibp(self, b):
        return Interval(self.fn(b.lo), self.fn(b.hi))

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        t, lead = _merge(ts[0])
        out = self.fn(t)
        return out.reshape(*lead, *out.shape[1:])

    def lin_t(self, rel, lam, mode, in_shapes):
        if mode == "dm":
            return [None]
        if self.fn_t is None:  # the adjoint by autograd (a generic rearrangement)
            return super().lin_t(rel, lam, mode, in_shapes)
        t, lead = _merge(lam)
        out = self.fn_t(t)
        return [out.reshape(*lead, *out.shape[1:])]


class Conv(Op):
    """A 2D convolution (no bias in ``lin``), as in a Sequential or the patch embedding."""

    def __init__(self, inp: int, conv: torch.nn.Conv2d, weight: torch.Tensor, bias, shape, name: str):
        self.inputs, self.shape, self.name = (inp,), tuple(shape), name
        self.w, self.b, self.w_abs = weight, bias, weight.abs()
        self.kw = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)

    def _conv(self, x, w):
        return F.conv2d(x, w, None, **self.kw)

    def forward(self, x):
        return F.conv2d(x, self.w, self.b, **self.kw)

    def ibp(self, b):
        mid = self.forward(b.mid)
        rad = self._conv(b.rad, self.w_abs)
        return from_mid_rad(mid, rad + tol(mid.dtype) * (self._conv(b.mid.abs() + b.rad, self.w_abs) + mid.abs()))

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        t, lead = _merge(ts[0])
        out = self._conv(t, self.w_abs if mode == "abs" else self.w)
        return out.reshape(*lead, *out.shape[1:])

    def lin_t(self, rel, lam, mode, in_shapes):
        if mode == "dm":
            return [None]
        t, lead = _merge(lam)
        w = self.w_abs if mode == "abs" else self.w
        out = torch.nn.grad.conv2d_input((t.shape[0], *in_shapes[0]), w, t, **self.kw)
        return [out.reshape(*lead, *out.shape[1:])]

    def const(self, rel):
        if self.b is None:
            return None
        return self.b[:, None, None].expand(self.shape), None

    def macs(self):
        n = 1
        for s in self.shape:
            n *= s
        return n * self.w[0].numel()


class Margin(Op):
    """``z_y - z_t`` for every class t (0 at t = y): the quantity a verifier bounds from below."""

    def __init__(self, inp: int, y: torch.Tensor, shape, name: str = "margin"):
        self.inputs, self.y, self.shape, self.name = (inp,), y, tuple(shape), name

    def _pick(self, t: torch.Tensor) -> torch.Tensor:
        idx = self.y.reshape(-1, *([1] * (t.ndim - 1))).expand(*t.shape[:-1], 1)
        return t.gather(-1, idx)

    def forward(self, x):
        return self._pick(x) - x

    def ibp(self, b):  # exact per coordinate: z_y and z_t are bounded separately
        return Interval(self._pick(b.lo) - b.hi, self._pick(b.hi) - b.lo)

    def lin(self, rel, ts, mode="c"):
        if mode == "dm":
            return None
        out = self._pick(ts[0]) + ts[0] if mode == "abs" else self._pick(ts[0]) - ts[0]
        own = torch.arange(out.shape[-1], device=out.device) == self.y.reshape(-1, *([1] * (out.ndim - 1)))
        return out.masked_fill(own, 0.0)


def widen_interval(b: Interval) -> Interval:
    """``b`` pushed outward for rounding (IBP of the nonlinear ops)."""
    t = tol(b.lo.dtype)
    return Interval(b.lo - t * (b.lo.abs() + 1e-300), b.hi + t * (b.hi.abs() + 1e-300))
