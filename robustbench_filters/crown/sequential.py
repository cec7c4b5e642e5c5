"""The graph of a plain ``nn.Sequential`` (nested ones flattened) of Linear, Conv2d, ReLU, GELU and Flatten layers
(Identity and Dropout are no-ops in eval mode): tiny verification targets and the tests' reference networks."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .elementwise import Elementwise
from .graph import Graph
from .ops import Conv, Linear, Reshape
from .support import unsupported


def _leaves(model: nn.Module, prefix: str = ""):
    for name, child in model.named_children():
        where = f"{prefix}{name}"
        if type(child) is nn.Sequential:
            yield from _leaves(child, where + ".")
        else:
            yield where, child


def sequential_graph(model: nn.Sequential, input_shape: tuple[int, ...], name: str, dtype, device) -> Graph:
    g = Graph.start(tuple(input_shape), name, "sequential")
    x = 0
    w = lambda t: None if t is None else t.detach().to(device=device, dtype=dtype)  # noqa: E731
    for where, layer in _leaves(model):
        shape = g.shape(x)
        if isinstance(layer, (nn.Identity, nn.Dropout)):
            continue
        if isinstance(layer, nn.Linear):
            x = g.add(Linear(x, w(layer.weight), w(layer.bias), (*shape[:-1], layer.out_features), where))
        elif isinstance(layer, nn.Conv2d) and layer.padding_mode == "zeros":
            weight = w(layer.weight)
            kw = dict(stride=layer.stride, padding=layer.padding, dilation=layer.dilation, groups=layer.groups)
            out = F.conv2d(torch.zeros(1, *shape, dtype=dtype, device=device), weight, None, **kw).shape[1:]
            x = g.add(Conv(x, layer, weight, w(layer.bias), tuple(out), where))
        elif isinstance(layer, nn.ReLU):
            x = g.add(Elementwise(x, "relu", shape, where))
        elif isinstance(layer, nn.GELU) and layer.approximate == "none":
            x = g.add(Elementwise(x, "gelu", shape, where))
        elif isinstance(layer, nn.Flatten) and layer.start_dim == 1 and layer.end_dim == -1:
            n = 1
            for s in shape:
                n *= s
            x = g.add(Reshape(x, lambda t, k=len(shape): t.flatten(-k), (n,), where,
                              lambda t, s=shape: t.reshape(*t.shape[:-1], *s)))  # fmt: skip
        else:
            raise unsupported(layer, where or "model")
    g.output = x
    return g
