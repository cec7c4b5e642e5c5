"""Where a CROWN bound is loose: per node, the bound's width against the network's Jacobian range, and per op,
the share of the margin bound lost to its own relaxation error.

Why: a margin bound that fails to verify says nothing about which relaxation to improve. Two views do:

1. ``nodes``: for every node with bounds, the half-width of the bound, the half-width of its linear part
   (``sum |A| r``, r the box's radius) and of its interval error, and the Jacobian range ``sum |J(x0)| r`` of
   the real network (forward-mode, exact). A linear part equal to the Jacobian range with a large error means
   the relaxations' errors, not the linearisation, make the bound loose; the node where the error overtakes the
   linear part is where the runaway starts.
2. ``ops``: the backward pass from the margins, with each relaxation's own error ``|Lambda| . err`` summed per op
   (``name@block``), largest first: what each relaxation costs the margin bound.

Usage (from the repository root; float64, one thread; a ``full`` bound of the micro DeiT is about a minute)::

    OMP_NUM_THREADS=1 .venv/bin/python scripts/crown_looseness.py --model deit --eps 5e-4 --refresh full
"""

from __future__ import annotations

import collections

import torch
import typer
from torch.func import jvp, vmap

from robustbench_filters.crown import Verifier
from robustbench_filters.crown.domain import linf_domain
from robustbench_filters.crown.propagate import _dot, ibp_pass, linear_pass
from robustbench_filters.data.images import load_images
from robustbench_filters.models.loading import load_model

WATCH = ("residual", "centre", "var", "logits", "softmax", "mix", "fc1", ".q", ".k", ".v", "margin")


def _jacobian_range(g, x0: torch.Tensor, rad: torch.Tensor, nodes: list[int], chunk: int = 56) -> list[torch.Tensor]:
    """``sum_k |dnode/dx_k (x0)| rad_k`` for every node of ``nodes`` (forward mode, ``chunk`` inputs at a time)."""
    k = x0.shape[1]
    eye = torch.eye(k, dtype=x0.dtype)
    out: list = [0.0] * len(nodes)

    def fn(z: torch.Tensor):
        vals = g.evaluate(z)
        return tuple(vals[j] for j in nodes)

    for s in range(0, k, chunk):
        tangents = eye[s : s + chunk] * rad[0, s : s + chunk, None]
        for n, t in enumerate(vmap(lambda t: jvp(fn, (x0,), (t[None],))[1])(tangents)):
            out[n] = out[n] + t.abs().sum(0)
    return out


def _own_errors(g, rels) -> dict[str, torch.Tensor]:
    """Per op name (``name@block``): the sum over the backward pass of ``|Lambda| . err`` (B, classes)."""
    c = g.shape(g.output)[-1]
    lams = {g.output: torch.eye(c, dtype=torch.float64).expand(1, c, c)}
    got: dict[str, torch.Tensor] = collections.defaultdict(lambda: torch.zeros(1, c, dtype=torch.float64))
    for i in range(g.output, 0, -1):
        cur = lams.pop(i, None)
        if cur is None:
            continue
        op = g.ops[i]
        const = op.const(rels[i])
        if const is not None and const[1] is not None:
            parts = op.name.split(".")
            key = parts[-1] + (f"@{parts[1]}" if parts[0] == "blocks" else "")
            got[key] += _dot(cur.abs(), const[1])
        for j, grad in zip(op.inputs, op.lin_t(rels[i], cur, "c", [g.shape(j) for j in op.inputs]), strict=True):
            if grad is not None:
                lams[j] = lams[j] + grad if j in lams else grad
    return got


def main(
    model: str = typer.Option("deit", help="A zoo model."),
    eps: float = typer.Option(5e-4, help="Linf radius on the [0, 1] scale."),
    image: int = typer.Option(0, help="Test image index (Fashion-MNIST, the loader's order)."),
    refresh: str = typer.Option("full", help="CROWN's refresh (full, deep, inner, residual, none)."),
) -> None:
    torch.set_num_threads(1)
    net = load_model(model).module.eval()
    x, y = load_images("fashion-mnist", split="test").take(torch.tensor([image]))
    graph = Verifier(net, tuple(x.shape[1:])).graph
    g = graph.with_margin(y)
    x0 = x.to(torch.float64).reshape(1, -1)
    dom = linf_domain(x0, eps)
    nodes = [j for j, op in enumerate(g.ops) if j and op.name.endswith(WATCH)]
    prop = linear_pass(g, dom, ibp_pass(g, dom), refresh=refresh, keep=set(nodes))
    jac = _jacobian_range(g, x0, dom.rad, nodes)
    print(f"{model} image {image} label {int(y)} eps {eps:g} refresh {refresh}: mean half-widths")
    print(f"{'node':34s} {'|J| r':>10s} {'|A| r':>10s} {'error':>10s} {'bound':>10s}")
    for n, j in enumerate(nodes):
        form = prop.forms[j]
        lin = torch.einsum("bkn,bk->bn", form.a.reshape(1, form.a.shape[1], -1).abs(), dom.rad).mean()
        b = prop.bounds[j]
        width = float(((b.hi - b.lo) / 2).mean()) if b is not None else float("nan")
        print(f"{g.ops[j].name:34s} {float(jac[n].mean()):10.3e} {float(lin):10.3e} {float(form.err.mean()):10.3e} "
              f"{width:10.3e}")  # fmt: skip
    wrong = [t for t in range(g.shape(g.output)[-1]) if t != int(y)]
    own = _own_errors(g, prop.rels)
    print("\nown relaxation error on the margin bound (largest over the wrong classes), largest first")
    for key, v in sorted(own.items(), key=lambda kv: -float(kv[1][0, wrong].max()))[:15]:
        print(f"  {key:24s} {float(v[0, wrong].max()):.4g}")


if __name__ == "__main__":
    typer.run(main)
