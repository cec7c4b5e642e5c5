"""Floating point: bounds are computed in float64 and every concretised bound and scalar relaxation is pushed
outward by 1e-12 times the magnitude of what was summed (robustbench_filters/crown/interval.py). These tests check
that rounding cannot make a bound unsound: against an 80-bit extended-precision evaluation of the model, on a
degenerate box (eps = 0, where the bound must bracket the value itself) and with badly scaled weights."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_crown_models import tiny_deit
from torch import nn

from robustbench_filters.crown import Verifier
from robustbench_filters.crown import scalar as S
from robustbench_filters.crown.interval import Interval

DT = torch.float64


def _relu_net(scale: float, seed: int) -> nn.Sequential:
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)).double().eval()
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(scale)
    return net


def _margins_longdouble(net: nn.Sequential, x: np.ndarray, y: int) -> np.ndarray:
    """z_y - z_t in numpy's extended precision (80-bit on x86): the reference the float64 bound must respect."""
    h = x.astype(np.longdouble)
    for layer in net:
        if isinstance(layer, nn.Linear):
            w = layer.weight.detach().numpy().astype(np.longdouble)
            b = layer.bias.detach().numpy().astype(np.longdouble)
            h = h @ w.T + b
        else:
            h = np.maximum(h, 0)
    return h[y] - h


@pytest.mark.skipif(np.finfo(np.longdouble).eps >= np.finfo(np.float64).eps, reason="no extended precision here")
@pytest.mark.parametrize("scale", [1.0, 30.0])
def test_bounds_hold_against_extended_precision(scale: float) -> None:
    net = _relu_net(scale, 0)
    g = torch.Generator().manual_seed(1)
    x0 = torch.rand(3, 8, generator=g, dtype=DT)
    y = net(x0).argmax(1)
    v = Verifier(net, (8,))
    for eps in (0.0, 1e-9, 1e-3):
        for method in ("ibp", "crown"):
            verdicts = v.verify(x0, y, eps, method=method, min_margin=-np.inf)
            lo, hi = (x0 - eps).clamp(0, 1), (x0 + eps).clamp(0, 1)
            for k in range(200):
                u = torch.rand(x0.shape, generator=g, dtype=DT)
                u = u.round() if k % 2 else u
                pts = (lo + u * (hi - lo)).numpy()
                for i, d in enumerate(verdicts):
                    ref = _margins_longdouble(net, pts[i], int(y[i]))
                    for t, m in enumerate(d.margins):
                        if t != d.label:
                            assert np.longdouble(m) <= ref[t], (scale, eps, method, m, ref[t])


def test_a_degenerate_box_brackets_the_value_tightly() -> None:
    """eps = 0: the margin lower bound is below the exact margin and within 1e-9 of it (so the slack is small)."""
    model = tiny_deit(grc=True)
    x0 = torch.rand(2, 1, 8, 8, dtype=DT)
    v = Verifier(model, (1, 8, 8))
    y = torch.tensor([0, 1])
    exact = v.graph.with_margin(y)(x0)
    for method in ("ibp", "crown"):
        for d in v.verify(x0, y, 0.0, method=method, min_margin=-np.inf):
            for t, m in enumerate(d.margins):
                if t != d.label:
                    e = float(exact[d.index, t])
                    assert m <= e and e - m < 1e-9 * (1 + abs(e)), (method, m, e)


def test_scalar_relaxations_are_widened_on_point_intervals() -> None:
    """On a point the chord and the tangent coincide; the intercept interval is still widened outward, so a
    rounded evaluation of f there stays inside."""
    for kind, relax, f in (("exp", S.relax_exp, torch.exp), ("rsqrt", S.relax_rsqrt, torch.rsqrt),
                           ("gelu", S.relax_gelu, S.gelu), ("square", S.relax_square, torch.square)):  # fmt: skip
        t = torch.tensor([0.37, 1.7, 3.1], dtype=DT)
        rel = relax(Interval(t, t))
        assert torch.all(rel.err > 0), kind
        assert torch.all((f(t) - rel.slope * t - rel.mid).abs() <= rel.err), kind


@pytest.mark.parametrize("op", ["scale", "lincomb", "center"])
def test_affine_interval_ends_hold_the_computed_value_to_the_last_bit(op: str) -> None:
    """The IBP of the affine ops brackets the value the graph computes in float64, at the box's own ends and inside
    it (the zoo deit's input normaliser once had an end 1 ulp inside a sampled value)."""
    from robustbench_filters.crown.ops import Center, LinComb, Scale

    g = torch.Generator().manual_seed(0)
    shape = (3, 17)
    gamma = torch.randn(shape[1:], generator=g, dtype=DT) / 0.353
    beta = -0.286 * gamma
    ops = {"scale": Scale(0, gamma, beta, shape, "s"), "lincomb": LinComb((0, 0), [0.1, torch.randn(shape[1:],
           generator=g, dtype=DT)], shape, "l"), "center": Center(0, shape, "c")}  # fmt: skip
    o = ops[op]
    x0 = torch.rand(1, *shape, generator=g, dtype=DT)
    lo, hi = (x0 - 1e-4).clamp(0, 1), (x0 + 1e-4).clamp(0, 1)
    b = Interval(lo, hi)
    out = o.ibp(*([b] * len(o.inputs)))
    u = torch.rand(256, 1, *shape, generator=g, dtype=DT)
    u[:128] = u[:128].round()  # corners: the ends themselves
    for x in lo + u * (hi - lo):
        v = o.forward(*([x] * len(o.inputs)))
        assert torch.all(v >= out.lo) and torch.all(v <= out.hi), op
