"""Certified local Lipschitz bounds on ``B_2(x0, rho) ∩ [0, 1]^d`` from the relaxation's own bounds.

Convention (as :mod:`robustbench_filters.lipschitz`): [0, 1] pixels -> logits, l2 on both sides; a constant on the
ball bounds ``||f(x) - f(x')|| / ||x - x'||`` for x, x' in it, and the exact ``||J(x0)||_2`` is a lower bound.

The bound is ``sup_x ||J(x)||_2 <= ||J_c||_2 + ||E||_2`` with ``J_c`` the Jacobian of the network linearised at
the relaxation slopes (the backward pass's ``Lambda`` at the input) and ``E >= |J(x) - J_c|`` entrywise for every
x in the ball. ``E`` comes from a telescoping sum over the nonlinear ops k (ops before k linearised, after k real):

    J(x) - J_c = sum_k S_k(x) (M_k(x) - M_k) P_k,      |.| <= sum_k (|Lambda_k| + dS_k) dM_k |A_k|

``P_k = A_k``: the exact linear part of op k's inputs from the forward pass (with its cancellations), ``dM_k``:
how far op k's real local Jacobian can be from the map it was linearised to, on its input bounds over the ball
(:mod:`.scalar`, :mod:`.bilinear`, :mod:`.softmax`), ``S_k(x)``: the real Jacobian of the rest of the network,
within ``dS_k`` of the backward pass's ``Lambda_k``. No per-stage norms are multiplied: the absolute values are
taken one op at a time.

``dS`` comes from a reverse sweep (``dS_in = dS_out |M| + (|Lambda_out| + dS_out) dM``), which compounds: its
first-order part passes through every later op's absolute value, about x150 per DeiT block. At the residual
stream (``exact_anchors``, the default) it is replaced by the same telescoping sum taken from that node forward,
``sum_{j > a} (|Lambda_j| + dS_j) dM_j |C_{j <- a}|`` with the exact linearised Jacobian C from the node, so the
first-order part is exact there and only the second-order part is boxed (about 13,000 more passes on a micro
DeiT). ``dS`` at the input is itself a bound on ``|J(x) - J_c|``; the entrywise minimum of the two is used.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn

from .build import build_graph
from .domain import Domain, l2_domain
from .form import input_form
from .graph import Graph
from .propagate import Cost, ibp_pass, linear_pass, residual_nodes


@dataclass(frozen=True)
class LocalLipschitz:
    """One example: the certified constant on the ball and its two parts (centre and error norms)."""

    index: int
    rho: float
    upper: float  # certified sup of ||J||_2 on B_2(x0, rho) ∩ [0, 1]^d
    centre: float  # ||J_c||_2 of the linearised network
    error: float  # ||E||_2
    first_order: float  # NOT certified: ||J_c|| + ||sum_k |Lambda_k| dM_k |A_k| || (the part without dS; diagnosis)
    passes: float
    seconds: float


def _anchor_radius(graph: Graph, rels: list, a: int, weights: dict, cost: Cost | None, chunk: int = 640):
    """A bound on |S_a(x) - Lambda_a| (B, R, *shape of a) for the suffix Jacobian at node ``a``, exact to first
    order: ``sum_{j > a} W_j dM_j |C_{j <- a}|`` with ``C_{j <- a}`` the linearised network's Jacobian from ``a``
    to op j's inputs, carried forward from ``a`` itself (``chunk`` of its coordinates at a time), so the absolute
    value is taken once per op and not compounded op after op."""
    shape = graph.shape(a)
    n = 1
    for s in shape:
        n *= s
    w0 = next(iter(weights.values()))[0]
    b, r = w0.shape[:2]
    out = w0.new_zeros(b, r, n)
    pulled: dict[int, list] = {}
    consumers = graph.consumers()
    eye = torch.eye(n, dtype=w0.dtype, device=w0.device)
    for start in range(0, n, chunk):
        cols = eye[start : start + chunk]
        t = cols.shape[0]
        tang = {a: cols.reshape(1, t, *shape).expand(b, t, *shape)}
        for i in range(a + 1, graph.output + 1):
            op = graph.ops[i]
            if not any(j in tang for j in op.inputs):
                continue
            shapes = [graph.shape(j) for j in op.inputs]
            ins = [tang[j] if j in tang else w0.new_zeros(b, t, *graph.shape(j)) for j in op.inputs]
            if i in weights:
                if i not in pulled:
                    pulled[i] = op.lin_t(rels[i], weights[i][0], "dm", shapes)
                for j, tj, g in zip(op.inputs, ins, pulled[i], strict=True):
                    if g is not None and j in tang:
                        out[:, :, start : start + t] += torch.einsum(
                            "brn,btn->brt", g.reshape(b, r, -1), tj.abs().reshape(b, t, -1)
                        )
            tang[i] = op.lin(rels[i], ins, "c")
            if cost is not None:
                cost.charge(t * b * max(op.macs(), tang[i][0, 0].numel()))
            for j in op.inputs:
                if j in tang and j != a and max(consumers[j]) <= i:
                    tang.pop(j)
    return out.reshape(b, r, *shape)


def _reverse(graph: Graph, rels: list, lam: torch.Tensor, anchors: set[int] | None = None, cost: Cost | None = None):
    """Backward sweep from the output: (Lambda, dS) at every node, and dS + |Lambda| at each nonlinear op's output.

    At each of ``anchors`` the recursion's dS (entrywise absolute values op after op: it compounds) is replaced
    by :func:`_anchor_radius` where that is smaller."""
    lams: dict[int, torch.Tensor] = {graph.output: lam}
    rads: dict[int, torch.Tensor] = {graph.output: torch.zeros_like(lam)}
    weights: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    for i in range(graph.output, 0, -1):
        if i not in lams:
            continue
        cur, rad = lams.pop(i), rads.pop(i)
        if anchors is not None and i in anchors and weights:
            rad = torch.minimum(rad, _anchor_radius(graph, rels, i, weights, cost))
        op = graph.ops[i]
        shapes = [graph.shape(j) for j in op.inputs]
        grads = op.lin_t(rels[i], cur, "c", shapes)
        grads_abs = op.lin_t(rels[i], rad, "abs", shapes)
        w = None
        if not op.affine:
            w = cur.abs() + rad
            weights[i] = (w, cur.abs())
            grads_dm = op.lin_t(rels[i], w, "dm", shapes)
        else:
            grads_dm = [None] * len(shapes)
        for j, g, ga, gd in zip(op.inputs, grads, grads_abs, grads_dm, strict=True):
            if g is None:
                continue
            lams[j] = lams[j] + g if j in lams else g
            extra = ga if gd is None else ga + gd
            rads[j] = rads[j] + extra if j in rads else extra
    return lams[0], rads[0], weights


def _replay(graph: Graph, rels: list, domain: Domain, weights: dict, cost: Cost) -> list[torch.Tensor | None]:
    """Forward linear parts A again (same relaxations) and E = sum_k W_k dM_k |A_k| (B, R, K), for the weights
    |Lambda| + dS (certified) and |Lambda| alone (the first-order part, a diagnosis)."""
    forms = {0: input_form(domain, graph.input_shape).a}
    consumers = graph.consumers()
    last_use = [max(consumers[i], default=i) for i in range(len(graph.ops))]
    b, k = domain.lo.shape
    e: list[torch.Tensor | None] = [None, None]
    for i in range(1, graph.output + 1):
        op = graph.ops[i]
        ins = [forms[j] for j in op.inputs]
        if i in weights:
            shapes = [graph.shape(j) for j in op.inputs]
            for which, w in enumerate(weights[i]):
                for a, g in zip(ins, op.lin_t(rels[i], w, "dm", shapes), strict=True):
                    if g is None:
                        continue
                    part = torch.einsum("brn,bkn->brk", g.reshape(b, g.shape[1], -1), a.abs().reshape(b, k, -1))
                    e[which] = part if e[which] is None else e[which] + part
                    cost.charge(k * b * g.shape[1] * a[0, 0].numel())
        forms[i] = op.lin(rels[i], ins, "c")
        cost.charge(k * b * max(op.macs(), forms[i][0, 0].numel()))
        for j in op.inputs:
            if last_use[j] <= i and j != 0:
                forms.pop(j, None)
    return e


def lipschitz_bounds(
    graph: Graph,
    x: torch.Tensor,
    rho: float,
    *,
    refresh: str = "deep",
    window: int = 0,
    cost: Cost | None = None,
    exact_anchors: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(upper, ||J_c||, ||E||, first-order part) per example (B,) on B_2(x, rho) ∩ [0, 1]^d."""
    domain = l2_domain(x.reshape(x.shape[0], -1), rho)
    cost = cost or Cost(graph.macs() * x.shape[0])
    ibp = ibp_pass(graph, domain, cost)
    prop = linear_pass(graph, domain, ibp, cost, refresh=refresh, window=window)
    b = x.shape[0]
    m = graph.shape(graph.output)[-1]
    lam = torch.eye(m, dtype=x.dtype, device=x.device).expand(b, m, m)
    anchors = set(residual_nodes(graph)) if exact_anchors else None
    lam_in, rad_in, weights = _reverse(graph, prop.rels, lam, anchors, cost)
    cost.charge(3 * m * b * graph.macs())
    e, e1 = _replay(graph, prop.rels, domain, weights, cost)
    jc = lam_in.reshape(b, m, -1)
    err = rad_in.reshape(b, m, -1)
    if e is not None:
        err = torch.minimum(err, e)
    inf = torch.full((b,), float("inf"), dtype=jc.dtype, device=jc.device)

    def norm(t: torch.Tensor | None) -> torch.Tensor:
        if t is None:
            return torch.zeros_like(inf)
        ok = torch.isfinite(t).flatten(1).all(1)  # else: no bound (inf)
        return torch.where(ok, torch.linalg.matrix_norm(torch.where(ok[:, None, None], t, 0.0), ord=2), inf)

    centre, error = norm(jc), norm(err)
    return (centre + error) * (1 + 1e-9), centre, error, centre + norm(e1)


def local_lipschitz(
    model: nn.Module,
    x: torch.Tensor,
    rho: float,
    *,
    device: torch.device | str | None = None,
    batch_size: int = 1,
    refresh: str = "deep",
    window: int = 0,
    exact_anchors: bool = True,
    graph: Graph | None = None,
) -> list[LocalLipschitz]:
    """The certified local Lipschitz constant (l2, pixels -> logits) of ``model`` on B_2(x_i, rho) ∩ [0, 1]^d for
    every example of ``x``; the model must be one :func:`.build.build_graph` covers."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    graph = graph or build_graph(model, tuple(x.shape[1:]), device=device)
    x = x.to(device=device, dtype=graph.dtype)
    out: list[LocalLipschitz] = []
    with torch.no_grad():
        for start in range(0, x.shape[0], batch_size):
            xb = x[start : start + batch_size]
            cost = Cost(graph.macs() * xb.shape[0])
            t0 = time.perf_counter()
            upper, centre, error, first = lipschitz_bounds(
                graph, xb, rho, refresh=refresh, window=window, cost=cost, exact_anchors=exact_anchors
            )
            seconds = (time.perf_counter() - t0) / xb.shape[0]
            for i in range(xb.shape[0]):
                out.append(LocalLipschitz(start + i, float(rho), float(upper[i]), float(centre[i]), float(error[i]),
                                          float(first[i]), cost.passes, seconds))  # fmt: skip
    return out
