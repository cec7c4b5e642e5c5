"""Which models the bounds cover, and the graph of one, checked against the model before it is used."""

from __future__ import annotations

import copy

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..core.errors import RobfiltError
from .graph import Graph
from .support import unsupported


def _check_hooks(model: nn.Module) -> None:
    """A forward hook changes what a module computes behind the graph's back; only robfilt's normaliser is known."""
    for name, module in model.named_modules():
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]:
            if getattr(hook, "__name__", "") != "_normalize_hook":
                what = getattr(hook, "__name__", type(hook).__name__)
                raise unsupported(f"forward hook {what}", name or "the model")


def build_graph(
    model: nn.Module,
    input_shape: tuple[int, ...],
    *,
    dtype: torch.dtype = torch.float64,
    device: torch.device | str | None = None,
    name: str | None = None,
    check: bool = True,
) -> Graph:
    """The graph of ``model`` on inputs of shape ``input_shape`` (without batch), weights cast to ``dtype``.

    Raises :class:`RobfiltError` naming the first layer it does not cover. With ``check`` the graph's output on a
    seeded random input is compared with the model's own (run in float64 on a copy), so a patched forward or
    unknown wiring is refused instead of bounded.
    """
    param = next(model.parameters(), None)
    device = torch.device(device) if device is not None else param.device if param is not None else torch.device("cpu")
    label = name or type(model).__name__
    _check_hooks(model)
    if isinstance(model, VisionTransformer):
        from .deit import vit_graph

        graph = vit_graph(model, label, dtype, device)
        if tuple(input_shape) != graph.input_shape:
            raise RobfiltError(f"{label} takes images of shape {graph.input_shape}, got {tuple(input_shape)}.")
    elif type(model) is nn.Sequential:
        from .sequential import sequential_graph

        graph = sequential_graph(model, tuple(input_shape), label, dtype, device)
    else:
        raise unsupported(model, "the model's root")
    graph.dtype = dtype
    if check:
        check_graph(model, graph, device)
    return graph


def check_graph(model: nn.Module, graph: Graph, device: torch.device) -> None:
    """Refuse a graph whose output differs from the model's (float64 copy of the model, seeded input)."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand((2, *graph.input_shape), generator=gen, dtype=torch.float64).to(device)
    ref = copy.deepcopy(model).to(device=device, dtype=torch.float64).eval()
    for m in ref.modules():  # the manual attention path computes the same function in float64 on every device
        if hasattr(m, "fused_attn"):
            m.fused_attn = False
    with torch.no_grad():
        want = ref(x).reshape(2, -1)
        got = graph(x.to(graph.dtype)).reshape(2, -1).to(want.dtype)
    tol = 1e-7 if graph.dtype == torch.float64 else 1e-3
    if want.shape != got.shape or not torch.allclose(got, want, rtol=tol, atol=tol):
        diff = (got - want).abs().max().item() if want.shape == got.shape else float("nan")
        raise RobfiltError(
            f"{graph.name}: the bound graph does not reproduce the model's output (max difference {diff:.3g}); "
            "a patched forward or unsupported wiring, so no bound is given."
        )
