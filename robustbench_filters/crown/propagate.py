"""The passes over a graph: interval bounds (IBP), the forward linear pass and back-substitution.

- :func:`ibp_pass`: every node's interval from its inputs' intervals. Cheap (a few model passes) and loose.
- :func:`linear_pass`: every node's :class:`~.form.LinearForm` over the input, carried forward op by op (the
  linear part is the network linearised at the relaxation slopes, K = input size columns; the error intervals
  go through each op's entrywise absolute value). Concretising a form bounds its node; the relaxation of a
  nonlinear op is built on its inputs' bounds (intersected with the IBP ones when given).
- :func:`backsub`: CROWN's backward pass: a linear function ``Lambda . node`` pushed back through the relaxations
  to the input (or to ``stop`` nodes whose forms are known), adding each relaxation's constant weighted by
  ``Lambda`` (its error by ``|Lambda|``). Unlike the forward pass, the weights of every error are the exact
  products of the maps after it, with their cancellations, which is why the final margins are bounded this way.
  ``refresh`` applies it to intermediate nodes (the residual stream) so the errors reaching later relaxations
  are re-weighted too; every result is intersected with the forward one (same linear part, :mod:`.form`).

Costs are charged to a :class:`Cost` in multiply-adds; ``passes`` divides by one forward pass of the model.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from .domain import Domain
from .form import LinearForm, input_form
from .graph import Graph
from .interval import Interval
from .ops import LinComb


@dataclass
class Cost:
    """Multiply-adds spent, in units of one example's forward pass (``model_macs``)."""

    model_macs: int
    macs: float = 0.0

    def charge(self, macs: float) -> None:
        self.macs += float(macs)

    @property
    def passes(self) -> float:
        return self.macs / self.model_macs


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _clamp(op, b: Interval) -> Interval:
    """A node's bounds: NaN (from an overflow upstream) means unbounded, and the op's known range applies."""
    b = Interval(torch.nan_to_num(b.lo, nan=-torch.inf), torch.nan_to_num(b.hi, nan=torch.inf))
    lo, hi = op.value_range
    return b.clamp(lo, hi) if lo is not None or hi is not None else b


def ibp_pass(graph: Graph, domain: Domain, cost: Cost | None = None) -> list[Interval]:
    """Interval bounds of every node up to the output."""
    b0 = domain.interval()
    shape = (b0.lo.shape[0], *graph.input_shape)
    out = [Interval(b0.lo.reshape(shape), b0.hi.reshape(shape))]
    for op in graph.ops[1 : graph.output + 1]:
        b = op.ibp(*[out[j] for j in op.inputs])
        out.append(_clamp(op, b))
        if cost is not None:
            cost.charge(2 * op.macs() * b.lo.shape[0])
    return out


@dataclass
class Propagation:
    """What a pass over the graph leaves: the relaxations, every needed node's bounds, every node's constant
    interval (mid, err) and the output's form."""

    graph: Graph
    domain: Domain
    rels: list
    bounds: list[Interval | None]
    consts: list[tuple[torch.Tensor, torch.Tensor] | None]
    output: LinearForm | None = None
    forms: dict[int, LinearForm] = field(default_factory=dict)  # kept linear parts (``keep``)


def _dot(lam: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """<Lambda_r, v> per example and row: lam (B, R, *s), v broadcastable to (B, *s) -> (B, R)."""
    b, r = lam.shape[:2]
    v = torch.broadcast_to(v.to(device=lam.device, dtype=lam.dtype), (b, *lam.shape[2:]))
    return torch.einsum("brn,bn->br", lam.reshape(b, r, -1), v.reshape(b, -1))


def _token_view(rel, b: int, n: int):
    """A relaxation seen per token: every tensor field of shape (B, N, ...) as (B * N, ...)."""
    if rel is None or not dataclasses.is_dataclass(rel):
        return rel
    view = {}
    for f in dataclasses.fields(rel):
        t = getattr(rel, f.name)
        if isinstance(t, torch.Tensor) and t.dim() >= 2 and tuple(t.shape[:2]) == (b, n):
            t = t.reshape(b * n, *t.shape[2:])
        view[f.name] = t
    return type(rel)(**view)


def _tokens(t: torch.Tensor, b: int, n: int) -> torch.Tensor:
    if t.dim() >= 2 and tuple(t.shape[:2]) == (b, n):
        return t.reshape(b * n, *t.shape[2:])
    return t


def backsub(
    graph: Graph,
    rels: list,
    target: int,
    lam: torch.Tensor,
    cost: Cost | None = None,
    stop: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None,
    tokens: tuple[int, int] | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """Back-substitute ``lam . node[target]`` (lam: (B, R, *shape)) through the relaxations.

    Returns ``(Lambda at the input or None, mid, err)``: ``lam . node in Lambda_in . x + [mid - err, mid + err]``
    (B, R). Nodes in ``stop`` (below ``target``) contribute their constant interval (mid, err) and stop the pass;
    their linear parts then add up to ``lam . A_target``, which the caller knows. ``tokens=(B, N)``: every node
    on the way is token-local (:func:`token_local`), and ``lam`` is (B * N, R, *shape[1:]): one token per row
    of the batch, so a token's rows never carry the other tokens' zeros.
    """
    b, r = lam.shape[:2]
    lams: dict[int, torch.Tensor] = {target: lam}
    mid = lam.new_zeros(b, r)
    err = lam.new_zeros(b, r)
    lam_in = None
    for i in range(target, -1, -1):
        cur = lams.pop(i, None)
        if cur is None:
            continue
        if stop is not None and i != target and i in stop:
            m, e = stop[i]
            if tokens is not None:
                m, e = _tokens(m, *tokens), _tokens(e, *tokens)
            mid += _dot(cur, m)
            err += _dot(cur.abs(), e)
            continue
        if i == 0:
            lam_in = cur
            continue
        op = graph.ops[i]
        rel = rels[i] if tokens is None else _token_view(rels[i], *tokens)
        c = op.const(rel)
        if c is not None:
            m, e = c if tokens is None else (_tokens(c[0], *tokens), None if c[1] is None else _tokens(c[1], *tokens))
            mid += _dot(cur, m)
            if e is not None:
                err += _dot(cur.abs(), e)
        shapes = [graph.shape(j) if tokens is None else graph.shape(j)[1:] for j in op.inputs]
        grads = op.lin_t(rel, cur, "c", shapes)
        if cost is not None:
            per = max(op.macs(), _numel(op.shape)) // (1 if tokens is None else graph.shape(i)[0])
            cost.charge(r * b * per)
        for j, g in zip(op.inputs, grads, strict=True):
            if g is not None:
                lams[j] = lams[j] + g if j in lams else g
    return lam_in, mid, err


def residual_nodes(graph: Graph) -> list[int]:
    """The residual stream after each sublayer."""
    return [i for i, op in enumerate(graph.ops) if isinstance(op, LinComb) and op.name.endswith(".residual")]


REFRESH_SUFFIXES = {
    "none": (),
    "residual": (".residual",),
    "inner": (".residual", ".qkv", ".fc1"),
    "deep": (".residual", ".qkv", ".fc1"),
    "full": (".residual", ".qkv", ".fc1", ".var"),
    "all": (".residual", ".qkv", ".fc1", ".var", ".centre", ".logits", ".softmax"),
}
DEEP = ".attn.residual"  # ``deep``: these anchors back-substitute to the input
FULL = (".var",)  # ``full``: every anchor and these nodes back-substitute to the input


def refresh_plan(graph: Graph, refresh: str) -> tuple[list[int], list[int]]:
    """(nodes to refresh, anchors): ``residual`` refreshes the residual stream, ``inner`` also the attention's
    q/k/v and the MLP's hidden pre-activations, ``deep`` as ``inner`` with the residual stream after each
    attention sublayer back-substituted all the way to the input, ``full`` with every residual and every
    LayerNorm's variance back-substituted to the input (the variance decides how loose 1/sqrt is, and it is one
    row per token: cheap; the final LayerNorm's input is the residual after the last MLP, which ``deep`` boxes),
    ``all`` with every node whose bounds a relaxation reads (q/k/v, the attention logits and softmax, the MLP's
    hidden layer, LayerNorm's centred value and variance) back-substituted to the input. ``all`` is what stops
    the runaway on normally trained DeiTs at eps 1e-3: a box on a softmax's interval error is multiplied by the
    values |v| summed over the tokens in the next product, and the next logits' relaxation is built on that.
    Anchors (where back-substitutions stop) are the residual stream and the first block's input (the affine
    embedding: exact)."""
    suffixes = REFRESH_SUFFIXES[refresh]
    nodes = [i for i, op in enumerate(graph.ops) if suffixes and op.name.endswith(suffixes)]
    anchors = sorted({*residual_nodes(graph), *([graph.notes["y0"]] if "y0" in graph.notes else [])})
    return nodes, anchors


def token_local(graph: Graph, target: int, stops: set[int]) -> bool:
    """Whether every op between ``stops`` and ``target`` acts per token on (N, D) values."""
    shape = graph.shape(target)
    if len(shape) != 2:
        return False
    n = shape[0]
    todo, seen = [target], set()
    while todo:
        i = todo.pop()
        if i in seen or i in stops:
            continue
        seen.add(i)
        op = graph.ops[i]
        if i == 0 or not op.token_local or len(op.shape) != 2 or op.shape[0] != n:
            return False
        todo.extend(op.inputs)
    return True


def _refresh(graph, rels, i, form, consts, stops, cost, chunk) -> LinearForm:
    """Back-substitute node i's own coordinates down to the stop nodes; meet the constants with ``form``'s."""
    shape = graph.shape(i)
    b = form.mid.shape[0]
    stop = {j: consts[j] for j in stops}
    dt, dev = form.mid.dtype, form.mid.device
    if token_local(graph, i, set(stops)):
        n, d = shape
        lam = torch.eye(d, dtype=dt, device=dev).expand(b * n, d, d)
        _, mid, err = backsub(graph, rels, i, lam, cost, stop, tokens=(b, n))
        return form.meet(mid.reshape(b, n, d), err.reshape(b, n, d))
    total = _numel(shape)
    eye = torch.eye(total, dtype=dt, device=dev)
    mids, errs = [], []
    for start in range(0, total, chunk):
        rows = eye[start : start + chunk]
        lam = rows.reshape(1, rows.shape[0], *shape).expand(b, -1, *shape)
        _, m, e = backsub(graph, rels, i, lam, cost, stop)
        mids.append(m)
        errs.append(e)
    return form.meet(torch.cat(mids, 1).reshape(b, *shape), torch.cat(errs, 1).reshape(b, *shape))


def linear_pass(
    graph: Graph,
    domain: Domain,
    ibp: list[Interval] | None = None,
    cost: Cost | None = None,
    *,
    refresh: str = "none",
    window: int = 0,
    keep: set[int] | None = None,
    chunk: int = 512,
) -> Propagation:
    """Forward linear bounds of every node; relaxations built on them (met with ``ibp`` where given).

    ``refresh`` (:func:`refresh_plan`): nodes whose constants are recomputed by back-substitution. The residual
    stream goes through the ``window`` most recent anchors before it and stops at the older ones (``window``
    large: to the input, i.e. CROWN's own intermediate bounds); inner nodes stop at their sublayer's input. With
    ``deep`` the anchors after attention go to the input, so an interval error is boxed at most once (at the
    anchor after an MLP, whose own back-substitution is per token) before an exact re-weighting; with ``full``
    every anchor and every LayerNorm variance goes to the input, with ``all`` every refreshed node does. Every
    nonlinear node's bounds are also met with what its relaxation implies (:meth:`.ops.Op.implied`) and with IBP
    redone on its inputs' bounds from this pass. ``keep``: nodes whose linear part is kept (the Lipschitz bound
    reads them).
    """
    ops = graph.ops
    n = graph.output + 1
    b = domain.lo.shape[0]
    k = domain.size
    need = graph.needs_bounds()
    for i, op in enumerate(ops[:n]):
        if not op.affine:
            need[i] = True
    consumers = graph.consumers()
    last_use = [max([c for c in consumers[i] if c < n], default=i) for i in range(n)]
    nodes, anchors = refresh_plan(graph, refresh)
    refresh_set = set(nodes)
    forms: dict[int, LinearForm] = {0: input_form(domain, graph.input_shape)}
    bounds: list[Interval | None] = [None] * n
    b0 = domain.interval()
    bounds[0] = Interval(b0.lo.reshape(b, *graph.input_shape), b0.hi.reshape(b, *graph.input_shape))
    consts: list = [None] * n
    consts[0] = (forms[0].mid, forms[0].err)
    rels: list = [None] * n
    kept: dict[int, LinearForm] = {}
    for i in range(1, n):
        op = ops[i]
        ins = [forms[j] for j in op.inputs]
        if not op.affine:
            rels[i] = op.relax([bounds[j] for j in op.inputs], ins, domain)
        a = op.lin(rels[i], [f.a for f in ins], "c")
        mid = op.lin(rels[i], [f.mid.unsqueeze(1) for f in ins], "c").squeeze(1)
        err = op.lin(rels[i], [f.err.unsqueeze(1) for f in ins], "abs").squeeze(1)
        c = op.const(rels[i])
        if c is not None:
            mid = mid + c[0]
            err = err if c[1] is None else err + c[1]
        mid = torch.broadcast_to(mid, (b, *op.shape))
        err = torch.broadcast_to(err, (b, *op.shape))
        form = LinearForm(a, mid, err)
        if cost is not None:
            cost.charge(k * b * max(op.macs(), _numel(op.shape)))
        if i in refresh_set:
            prior = [j for j in anchors if j < i]
            w = window if i in anchors else 0  # inner nodes: back to their sublayer's input (token-local, cheap)
            if refresh == "deep" and ops[i].name.endswith(DEEP):
                w = len(prior)  # every error since the input weighted exactly: no boxing compounds
            if refresh == "all" or (refresh == "full" and (i in anchors or ops[i].name.endswith(FULL))):
                w = len(prior)
            stops = prior[: max(0, len(prior) - w)]
            form = _refresh(graph, rels, i, form, consts, stops, cost, chunk)
        forms[i] = form
        consts[i] = (form.mid, form.err)
        if need[i]:
            bd = form.bounds(domain)
            if cost is not None:
                cost.charge(k * b * _numel(op.shape))
            if ibp is not None:
                bd = bd.meet(ibp[i])
            if not op.affine:
                bd = bd.meet(op.implied(rels[i]))
                if all(bounds[j] is not None for j in op.inputs):  # IBP again, on the inputs' tighter bounds
                    bd = bd.meet(_clamp(op, op.ibp(*[bounds[j] for j in op.inputs])))
            bounds[i] = _clamp(op, op.refine(bd, forms, domain, cost))
            if not op.affine:
                op.finish(rels[i], bounds[i])
        if keep is not None and i in keep:
            kept[i] = form
        for j in op.inputs:  # free linear parts no later op reads
            if last_use[j] <= i and j in forms and j != 0 and (keep is None or j not in keep):
                forms.pop(j)
    return Propagation(graph, domain, rels, bounds, consts, forms.get(graph.output), kept)


def relax_on(graph: Graph, domain: Domain, bounds: list[Interval]) -> Propagation:
    """Relaxations built on given bounds (CROWN-IBP: the IBP intervals), without forms."""
    rels: list = [None] * (graph.output + 1)
    for i, op in enumerate(graph.ops[: graph.output + 1]):
        if i and not op.affine:
            rels[i] = op.relax([bounds[j] for j in op.inputs], [None] * len(op.inputs), domain)
            op.finish(rels[i], bounds[i])
    return Propagation(graph, domain, rels, list(bounds), [None] * len(rels))
