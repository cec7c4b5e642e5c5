"""LayerNorm as a chain of ops the engine can relax: centring, square, mean (+ eps), 1/sqrt, product, affine.

``LN(x) = gamma * (x - mu) / sqrt(var + eps) + beta`` with ``var = mean((x - mu)^2)``:

    c = x - mean(x)          exact (affine)
    q = c^2                  convex: chord and parallel tangent
    v = mean(q) + eps        exact; v >= eps always, so its bounds are clamped there
    r = 1 / sqrt(v)          convex and decreasing on v > 0
    y = c * r                product of two bounded tensors (r broadcast over the features)
    out = gamma * y + beta   exact

Each step is sound alone, so the chain is; the loss is in the product, which only sees boxes of c and r.
"""

from __future__ import annotations

import torch
from torch import nn

from ..core.errors import RobfiltError
from .bilinear import Product
from .elementwise import Elementwise
from .graph import Graph
from .ops import Center, MeanLast, Scale


def layer_norm(g: Graph, x: int, ln: nn.LayerNorm, name: str, dtype: torch.dtype, device: torch.device) -> int:
    """Append ``ln`` applied to node ``x`` (last dimension) and return the output node."""
    shape = g.shape(x)
    if tuple(ln.normalized_shape) != (shape[-1],):
        raise RobfiltError(f"{name}: LayerNorm over {tuple(ln.normalized_shape)} is not supported (only the last dim).")
    eps = float(ln.eps)
    c = g.add(Center(x, shape, f"{name}.centre"))
    q = g.add(Elementwise(c, "square", shape, f"{name}.square"))
    v = g.add(MeanLast(q, eps, (*shape[:-1], 1), f"{name}.var", floor=eps))
    r = g.add(Elementwise(v, "rsqrt", (*shape[:-1], 1), f"{name}.rsqrt", floor=eps))
    y = g.add(Product(c, r, shape, f"{name}.normalised"))
    if ln.weight is None and ln.bias is None:
        return y
    w = ln.weight.detach().to(device, dtype) if ln.weight is not None else torch.ones(shape[-1], dtype=dtype)
    b = ln.bias.detach().to(device, dtype) if getattr(ln, "bias", None) is not None else None
    return g.add(Scale(y, w, b, shape, f"{name}.affine"))
