"""Each relaxation alone, tested like a verifier: no sampled point of an input box may fall outside its bounds.

For every scalar nonlinearity, the product of two bounded tensors, the matrix product and the softmax: random
boxes (narrow, wide, degenerate, straddling the kinks), dense grids plus random points plus the corners, and the
checks ``f(t) in slope t + [mid - err, mid + err]`` (the relaxation), ``f(t) in ibp`` (the interval image) and
``|f'(t) - slope| <= dslope`` (the local-Jacobian bound the Lipschitz bound uses).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from robustbench_filters.crown import scalar as S
from robustbench_filters.crown.bilinear import MatMul, Product
from robustbench_filters.crown.elementwise import KINDS, Elementwise
from robustbench_filters.crown.interval import Interval
from robustbench_filters.crown.softmax import Softmax

DT = torch.float64
GRID = 401


def _boxes(kind: str, n: int = 300, seed: int = 0) -> Interval:
    """Random intervals for ``kind``: centres over the interesting range, widths from 0 to large."""
    g = torch.Generator().manual_seed(seed)
    if kind in ("rsqrt", "reciprocal"):
        lo = 10 ** (torch.rand(n, generator=g, dtype=DT) * 6 - 5)  # 1e-5 .. 10
        hi = lo * (1 + 10 ** (torch.rand(n, generator=g, dtype=DT) * 8 - 7))
        hi[:10] = lo[:10]  # points
        return Interval(lo, hi)
    scale = {"exp": 20.0, "relu": 4.0, "gelu": 6.0, "square": 5.0}[kind]
    c = (torch.rand(n, generator=g, dtype=DT) * 2 - 1) * scale
    w = 10 ** (torch.rand(n, generator=g, dtype=DT) * 7 - 6) * scale
    w[:10] = 0.0
    lo, hi = c - w, c + w
    if kind == "gelu":  # straddle the minimum and the inflection points +-sqrt(2)
        lo[10:20], hi[10:20] = S.GELU_ARGMIN - 1e-3, S.GELU_ARGMIN + 1e-3
        lo[20:30], hi[20:30] = -1.5, 1.5
        lo[30:40], hi[30:40] = -40.0, 40.0
    if kind == "relu":
        lo[10:20], hi[10:20] = -1e-9, 1.0
    return Interval(lo, hi)


def _points(b: Interval, n: int = GRID, seed: int = 1) -> torch.Tensor:
    """(n + random + 2 corners, B): a dense grid, random points and both endpoints of each interval."""
    g = torch.Generator().manual_seed(seed)
    u = torch.cat([torch.linspace(0, 1, n, dtype=DT), torch.rand(n, generator=g, dtype=DT)])[:, None]
    return torch.minimum(torch.maximum(b.lo + u * (b.hi - b.lo), b.lo), b.hi)  # rounding stays inside


DERIV = {"relu": lambda t: (t > 0).to(DT), "gelu": S.gelu_d, "exp": torch.exp, "square": lambda t: 2 * t,
         "rsqrt": S.rsqrt_d, "reciprocal": lambda t: -1 / (t * t)}  # fmt: skip


@pytest.mark.parametrize("kind", list(KINDS))
def test_scalar_relaxations_contain_every_sampled_point(kind: str) -> None:
    f, relax, ibp, _ = KINDS[kind]
    b = _boxes(kind)
    rel = relax(b)
    t = _points(b)
    ft = f(t)
    line = rel.slope * t
    assert torch.all(ft >= line + rel.mid - rel.err), kind
    assert torch.all(ft <= line + rel.mid + rel.err), kind
    box = ibp(b)
    assert torch.all(ft >= box.lo) and torch.all(ft <= box.hi), kind
    d = DERIV[kind](t)
    inner = (t > b.lo) & (t < b.hi) if kind == "relu" else torch.ones_like(t, dtype=torch.bool)
    assert torch.all(((d - rel.slope).abs() <= rel.dslope) | ~inner), kind
    assert torch.all(rel.err >= 0)


@pytest.mark.parametrize("kind", ["exp", "square", "rsqrt", "reciprocal", "gelu"])
def test_relaxations_are_tight_on_narrow_intervals(kind: str) -> None:
    """A relaxation that is sound but vacuous would pass the containment test; on a narrow interval the error must
    be second order (below width^2 times the curvature, plus the rounding slack)."""
    lo = torch.tensor([0.3, 0.7, 1.1], dtype=DT)
    hi = lo + 1e-3
    rel = KINDS[kind][1](Interval(lo, hi))
    assert torch.all(rel.err < 1e-5), (kind, rel.err)


def test_relu_is_the_deepz_parallelogram() -> None:
    rel = S.relax_relu(Interval(torch.tensor([-1.0, 0.5, -2.0], dtype=DT), torch.tensor([3.0, 2.0, -1.0], dtype=DT)))
    assert torch.allclose(rel.slope, torch.tensor([0.75, 1.0, 0.0], dtype=DT))
    assert torch.allclose(rel.mid - rel.err, torch.zeros(3, dtype=DT), atol=1e-9)
    assert torch.allclose(rel.mid + rel.err, torch.tensor([0.75, 0.0, 0.0], dtype=DT), atol=1e-9)


def _box_tensor(shape, seed, scale=1.0, width=0.3) -> Interval:
    g = torch.Generator().manual_seed(seed)
    c = (torch.rand(shape, generator=g, dtype=DT) * 2 - 1) * scale
    w = torch.rand(shape, generator=g, dtype=DT) * width * scale
    return Interval(c - w, c + w)


def _samples(b: Interval, n: int, seed: int) -> torch.Tensor:
    """Random points and random corners of the box, (n, *shape)."""
    g = torch.Generator().manual_seed(seed)
    u = torch.rand((n, *b.lo.shape), generator=g, dtype=DT)
    u[: n // 2] = u[: n // 2].round()  # corners
    return torch.minimum(torch.maximum(b.lo + u * (b.hi - b.lo), b.lo), b.hi)


def _check_op(op, boxes, samples, values, grads=None) -> None:
    """``values``: the op's output at each sample; the relaxation (applied to the sample itself, as a tangent) and
    the IBP interval must contain it."""
    rel = op.relax(boxes, [None] * len(boxes), None)
    out_ibp = op.ibp(*boxes)
    lin = op.lin(rel, [s.unsqueeze(1) for s in samples], "c").squeeze(1)
    mid, err = op.const(rel)
    assert torch.all(values >= lin + mid - err - 1e-12)
    assert torch.all(values <= lin + mid + err + 1e-12)
    assert torch.all(values >= out_ibp.lo) and torch.all(values <= out_ibp.hi)
    return rel, out_ibp


@pytest.mark.parametrize("seed", range(3))
def test_elementwise_product_contains_samples(seed: int) -> None:
    bx, by = _box_tensor((4, 5, 6), seed, 2.0), _box_tensor((4, 5, 1), seed + 10, 3.0)
    op = Product(0, 1, (5, 6), "p")
    for s in range(8):
        x, y = _samples(bx, 1, 100 * seed + s)[0], _samples(by, 1, 100 * seed + s + 50)[0]
        _check_op(op, [bx, by], [x, y], x * y)


@pytest.mark.parametrize("transpose", [False, True])
def test_matmul_contains_samples_and_its_jacobian_bound(transpose: bool) -> None:
    bx = _box_tensor((3, 2, 5, 4), 1, 1.5)
    by = _box_tensor((3, 2, 5, 4) if transpose else (3, 2, 4, 5), 2, 1.5)
    bias = torch.randn(2, 5, 5, dtype=DT)
    op = MatMul(0, 1, (2, 5, 5), "mm", transpose_y=transpose, bias=bias, inner=4)
    for s in range(16):
        x, y = _samples(bx, 1, s)[0], _samples(by, 1, s + 99)[0]
        rel, _ = _check_op(op, [bx, by], [x, y], op.forward(x, y))
        # the real Jacobian at (x, y) applied to tangents stays within dm of the linearised one
        tx, ty = torch.randn_like(x).unsqueeze(1), torch.randn_like(y).unsqueeze(1)
        yy = y.transpose(-2, -1) if transpose else y
        real = tx.squeeze(1) @ yy + x @ (ty.squeeze(1).transpose(-2, -1) if transpose else ty.squeeze(1))
        centre = op.lin(rel, [tx, ty], "c").squeeze(1)
        bound = op.lin(rel, [tx.abs(), ty.abs()], "dm").squeeze(1)
        assert torch.all((real - centre).abs() <= bound + 1e-12)


def test_lin_t_is_the_transpose_of_lin() -> None:
    """Back-substitution relies on lin_t being lin's adjoint: <lam, lin(t)> = <lin_t(lam), t> for every op kind."""
    bx, by = _box_tensor((2, 3, 4, 4), 3), _box_tensor((2, 3, 4, 4), 4)
    ops = [
        (MatMul(0, 1, (3, 4, 4), "mm", transpose_y=True, inner=4), [bx, by], [(3, 4, 4), (3, 4, 4)]),
        (Product(0, 1, (3, 4, 4), "p"), [bx, by], [(3, 4, 4), (3, 4, 4)]),
        (Elementwise(0, "gelu", (3, 4, 4), "g"), [bx], [(3, 4, 4)]),
        (Softmax(0, (3, 4, 4), "s"), [bx], [(3, 4, 4)]),
    ]
    g = torch.Generator().manual_seed(0)
    for op, boxes, shapes in ops:
        rel = op.relax(boxes, [None] * len(boxes), None)
        if isinstance(op, Softmax):
            op.finish(rel, op.ibp(*boxes))
        for mode in ("c", "abs", "dm"):
            ts = [torch.randn((2, 3, *s), generator=g, dtype=DT) for s in shapes]
            lam = torch.randn((2, 3, *op.shape), generator=g, dtype=DT)
            out = op.lin(rel, ts, mode)
            back = op.lin_t(rel, lam, mode, shapes)
            lhs = (lam * out).sum()
            rhs = sum((b * t).sum() for b, t in zip(back, ts, strict=True))
            assert torch.allclose(lhs, rhs, rtol=1e-10), (type(op).__name__, mode)


@pytest.mark.parametrize(("seed", "scale", "width"), [(0, 1.0, 0.05), (1, 4.0, 0.3), (2, 10.0, 0.01), (3, 2.0, 2.0)])
def test_softmax_contains_samples_and_its_jacobian_bound(seed: int, scale: float, width: float) -> None:
    bz = _box_tensor((3, 2, 4, 6), seed, scale, width)
    op = Softmax(0, (2, 4, 6), "s")
    rel = op.relax([bz], [None], None)
    out = op.ibp(bz)
    op.finish(rel, out)
    for s in range(40):
        z = _samples(bz, 1, 1000 * seed + s)[0]
        _check_op(op, [bz], [z], z.softmax(-1))
        p = z.softmax(-1)
        jac = (torch.diag_embed(p) - p[..., :, None] * p[..., None, :]).reshape(rel.c.shape)  # [j, k]
        assert torch.all((jac - rel.c).abs() <= rel.dm + 1e-12)


def test_softmax_uses_the_shift_invariance() -> None:
    """All logits moving together do not move the softmax: with equal boxes shifted by a common offset, the
    relaxation from the logits' form must stay narrow where the interval image (IBP) does not."""
    from robustbench_filters.crown.domain import Domain
    from robustbench_filters.crown.form import LinearForm

    b, k = 1, 1
    base = torch.tensor([[[0.0, 1.0, 2.0]]], dtype=DT)  # (B, L, M)
    a = torch.ones((b, k, 1, 3), dtype=DT)  # every logit = base + x, x in [-1, 1]
    dom = Domain(torch.full((b, k), -1.0, dtype=DT), torch.ones((b, k), dtype=DT))
    form = LinearForm(a, base, torch.zeros_like(base))
    bz = form.bounds(dom)
    op = Softmax(0, (1, 3), "s")
    rel = op.relax([bz], [form], dom)
    s_form = LinearForm(op.lin(rel, [a], "c"), op.lin(rel, [base.unsqueeze(1)], "c").squeeze(1) + rel.mid, rel.err)
    tight = s_form.bounds(dom)
    loose = op.ibp(bz)
    assert float((tight.hi - tight.lo).max()) < 1e-6
    assert float((loose.hi - loose.lo).min()) > 0.1
    want = base.softmax(-1)
    assert torch.all(tight.lo <= want) and torch.all(want <= tight.hi)


def test_gelu_relaxation_on_every_region_combination() -> None:
    """Intervals from every pair of breakpoints of GELU' (-inf, -sqrt2, argmin, 0, sqrt2, inf) and beyond."""
    pts = [-30.0, -3.0, -1.5, -S.SQRT2, -1.0, S.GELU_ARGMIN, -0.5, 0.0, 0.7, S.SQRT2, 2.0, 5.0, 30.0]
    pairs = [(a, b) for a, b in itertools.combinations(pts, 2)]
    lo = torch.tensor([p[0] for p in pairs], dtype=DT)
    hi = torch.tensor([p[1] for p in pairs], dtype=DT)
    b = Interval(lo, hi)
    rel = S.relax_gelu(b)
    t = _points(b, 2001)
    ft = S.gelu(t)
    assert torch.all(ft >= rel.slope * t + rel.mid - rel.err)
    assert torch.all(ft <= rel.slope * t + rel.mid + rel.err)
    assert torch.all((S.gelu_d(t) - rel.slope).abs() <= rel.dslope)


@pytest.mark.parametrize("which", ["deit-bsa-grc-avg", "conv"])
def test_every_op_of_a_graph_has_lin_t_as_the_adjoint_of_lin(which: str) -> None:
    """Every op in a tiny DeiT (BSA, GRC, LayerScale, mean pooling) and a conv Sequential: the explicit transposes
    the backward pass uses are exact adjoints of the forward maps, in all three modes."""
    import timm
    from torch import nn

    from robustbench_filters.crown import build_graph
    from robustbench_filters.crown.domain import linf_domain
    from robustbench_filters.crown.propagate import ibp_pass, linear_pass

    torch.manual_seed(0)
    if which == "conv":
        model = nn.Sequential(nn.Conv2d(1, 3, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(48, 4))
        shape = (1, 8, 8)
    else:
        from robustbench_filters.models.bsa import bsa_layer
        from robustbench_filters.models.grc import BlockStack

        model = timm.create_model("vit_tiny_patch16_224", img_size=8, patch_size=4, in_chans=1, num_classes=3,
                                  embed_dim=8, depth=2, num_heads=2, init_values=0.5, global_pool="avg",
                                  attn_layer=bsa_layer()).eval()  # fmt: skip
        from robustbench_filters.models.bsa import BilateralAttention

        for m in model.modules():
            if isinstance(m, BilateralAttention):
                m.configure(grid=(2, 2), num_prefix_tokens=1)
        model.blocks = BlockStack(list(model.blocks), grc=True, grc_lambda=0.2)
        shape = (1, 8, 8)
    g = build_graph(model, shape)
    x = torch.rand(2, *shape, dtype=DT)
    dom = linf_domain(x, 0.05)
    prop = linear_pass(g, dom, ibp_pass(g, dom))
    gen = torch.Generator().manual_seed(1)
    for i, op in enumerate(g.ops[1 : g.output + 1], start=1):
        shapes = [g.shape(j) for j in op.inputs]
        for mode in ("c", "abs", "dm"):
            ts = [torch.randn((2, 3, *s), generator=gen, dtype=DT) for s in shapes]
            out = op.lin(prop.rels[i], ts, mode)
            back = op.lin_t(prop.rels[i], torch.randn((2, 3, *op.shape), generator=gen, dtype=DT), mode, shapes)
            if out is None:
                assert all(b is None for b in back), (op.name, mode)
                continue
            lam = torch.randn((2, 3, *op.shape), generator=gen, dtype=DT)
            back = op.lin_t(prop.rels[i], lam, mode, shapes)
            rhs = sum((b * t).sum() for b, t in zip(back, ts, strict=True) if b is not None)
            assert torch.allclose((lam * out).sum(), rhs, rtol=1e-9, atol=1e-9), (op.name, mode)
