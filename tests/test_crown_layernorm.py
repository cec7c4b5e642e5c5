"""LayerNorm's variance bound (crown/layernorm.py): sound on sampled points, and tighter than the square's chain.

The variance's lower bound decides how loose 1/sqrt(var) is; the norm bound ``mean(c^2) >= <u, c>^2 / D`` must
hold at every sampled point (random points and corners of the box), never be looser than the square's relaxation
alone, and lift the lower bound off the floor where the chain leaves it there (a test that could not fail would
otherwise pass on a vacuous bound).
"""

from __future__ import annotations

import torch
from torch import nn

from robustbench_filters.crown.domain import linf_domain
from robustbench_filters.crown.elementwise import Elementwise
from robustbench_filters.crown.graph import Graph
from robustbench_filters.crown.layernorm import Variance, layer_norm
from robustbench_filters.crown.ops import Center, Linear, MeanLast
from robustbench_filters.crown.propagate import linear_pass

DT = torch.float64
N, D, K = 3, 8, 6


def _graph(norm_bound: bool) -> tuple[Graph, int, int]:
    """Input (K,) -> a linear map to (N, D) tokens -> LayerNorm; (graph, variance node, output node)."""
    torch.manual_seed(0)
    g = Graph.start((K,))
    w = torch.randn(N * D, K, dtype=DT)
    x = g.add(Linear(0, w, torch.randn(N * D, dtype=DT) * 2, (N * D,), "lift"))
    from robustbench_filters.crown.ops import Reshape

    x = g.add(Reshape(x, lambda t: t.reshape(*t.shape[:-1], N, D), (N, D), "tokens",
                      lambda t: t.reshape(*t.shape[:-2], N * D)))  # fmt: skip
    ln = nn.LayerNorm(D).double()
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    if norm_bound:
        out = layer_norm(g, x, ln, "ln", DT, torch.device("cpu"))
        var = next(i for i, op in enumerate(g.ops) if isinstance(op, Variance))
    else:  # the chain without the norm bound: the square's relaxation alone bounds the variance
        c = g.add(Center(x, (N, D), "ln.centre"))
        q = g.add(Elementwise(c, "square", (N, D), "ln.square"))
        var = g.add(MeanLast(q, ln.eps, (N, 1), "ln.var", floor=ln.eps))
        out = var
    g.output = out
    return g, var, out


def test_variance_bound_holds_on_samples_and_beats_the_square_chain() -> None:
    new, v_new, out = _graph(True)
    old, v_old, _ = _graph(False)
    gen = torch.Generator().manual_seed(1)
    x0 = torch.rand(4, K, generator=gen, dtype=DT) * 2 - 1
    dom = linf_domain(x0, 0.3, box=(-10.0, 10.0))
    p_new, p_old = linear_pass(new, dom), linear_pass(old, dom)
    b_new, b_old = p_new.bounds[v_new], p_old.bounds[v_old]
    pts = dom.sample(400, gen)
    pts[:200] = torch.where(torch.rand(pts[:200].shape, generator=gen, dtype=DT) < 0.5, dom.lo, dom.hi)  # corners
    for x in pts:
        vals = new.evaluate(x)
        assert torch.all(vals[v_new] >= b_new.lo) and torch.all(vals[v_new] <= b_new.hi)
        assert torch.all(vals[out] >= p_new.bounds[out].lo) and torch.all(vals[out] <= p_new.bounds[out].hi)
        assert torch.all(old.evaluate(x)[v_old] >= b_old.lo)
    assert torch.all(b_new.lo >= b_old.lo)
    # the chain leaves some token's variance at its floor (1/sqrt: 1/sqrt(eps) ~ 316); the norm bound does not
    floor = 1e-5 * (1 + 1e-9)
    assert (b_old.lo <= floor).any() and (b_new.lo > 10 * floor).all(), (b_old.lo.flatten(), b_new.lo.flatten())


def test_variance_bound_is_exact_on_a_point() -> None:
    """On a zero-width box the bound is the variance itself (up to the rounding margin)."""
    g, v, _ = _graph(True)
    x0 = torch.rand(2, K, dtype=DT)
    dom = linf_domain(x0, 0.0, box=(-10.0, 10.0))
    b = linear_pass(g, dom).bounds[v]
    want = g.evaluate(x0)[v]
    assert torch.allclose(b.lo, want, rtol=1e-9) and torch.allclose(b.hi, want, rtol=1e-9)
