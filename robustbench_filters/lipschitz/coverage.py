"""The layers a plain ``nn.Sequential`` may hold for a certified bound, and their constants.

Certified bounds exist for timm ``VisionTransformer``, robfilt ``CausalLM`` (both walked by :mod:`.chain`) and
a plain ``nn.Sequential`` (nested Sequentials flattened) of the layers in :func:`generic_layer_lipschitz`: Linear,
Conv2d, BatchNorm (eval), LayerNorm, pooling, Flatten and pointwise activations, composed by the product rule.

Anything else (a ResNet, ConvNeXt or Swin with residual wiring inside a custom ``forward``) gets the one-line
:class:`RobfiltError` of :func:`check_sequential`, naming the first layer type that is not covered, before any
work; its lower bounds (exact / power / ratio) still run, since they only need the model as a function.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ..core.errors import RobfiltError
from .constants import activation_lipschitz, empirical_only, uncovered
from .spectral import conv_lipschitz, linear_lipschitz, spectral_norm

_POINTWISE = (nn.GELU, nn.ReLU, nn.Tanh, nn.SiLU, nn.Identity, nn.Dropout)


def flatten_sequential(module: nn.Module, prefix: str = "") -> list[tuple[str, nn.Module]]:
    """The leaves of nested ``nn.Sequential`` containers in call order; other modules are leaves themselves."""
    if type(module) is nn.Sequential:
        out = []
        for name, child in module.named_children():
            out += flatten_sequential(child, f"{prefix}.{name}" if prefix else name)
        return out
    return [(prefix, module)]


def _overlap(kernel, stride) -> int:
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    return math.ceil(kh / sh) * math.ceil(kw / sw)


def _adaptive_avg_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """The averaging matrix of AdaptiveAvgPool along one axis (PyTorch's start/end index rule)."""
    a = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        start, end = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        a[i, start:end] = 1.0 / (end - start)
    return a


def _batchnorm(layer: nn.modules.batchnorm._BatchNorm, where: str) -> float:
    if layer.training or layer.running_var is None:
        raise uncovered(f"{type(layer).__name__} in training mode or without running statistics", where)
    scale = 1.0 / torch.sqrt(layer.running_var.detach().double() + layer.eps)
    if layer.weight is not None:
        scale = scale * layer.weight.detach().double().abs()
    return scale.max().item()


def _pool(layer: nn.Module, t: torch.Tensor, where: str) -> tuple[float, str]:
    if isinstance(layer, nn.MaxPool2d):
        if layer.dilation not in (1, (1, 1)):
            raise uncovered("dilated MaxPool2d", where)
        k = _overlap(layer.kernel_size, layer.stride)
        return math.sqrt(k), f"max over windows, each input in <= {k} windows"
    if isinstance(layer, nn.AvgPool2d):
        if layer.divisor_override is not None:
            raise uncovered("AvgPool2d with divisor_override", where)
        k = _overlap(layer.kernel_size, layer.stride)
        ks = layer.kernel_size
        area = ks * ks if isinstance(ks, int) else ks[0] * ks[1]
        padded = layer.padding not in (0, (0, 0)) and not layer.count_include_pad
        return (math.sqrt(k) if padded else math.sqrt(k / area)), "mean over windows"
    out = layer.output_size
    oh, ow = (out, out) if isinstance(out, int) else out
    h, w = t.shape[-2:]
    ah = _adaptive_avg_matrix(h, oh if oh is not None else h)
    aw = _adaptive_avg_matrix(w, ow if ow is not None else w)
    return spectral_norm(ah) * spectral_norm(aw), "adaptive average: ||A_h|| ||A_w|| (exact)"


def generic_layer_lipschitz(layer: nn.Module, t: torch.Tensor, where: str) -> tuple[float, str, str] | None:
    """(constant, kind, detail) of one layer of a plain Sequential at input ``t``; None for LayerNorm (the trace
    handles it locally). Raises the one-line uncovered error for any other layer type."""
    if isinstance(layer, nn.Linear):
        return linear_lipschitz(layer), "linear", "||W||_2"
    if isinstance(layer, nn.Conv2d):
        return conv_lipschitz(layer, where), "conv", "sqrt(overlap) ||W_mat||_2 (max over groups)"
    if isinstance(layer, (nn.BatchNorm1d, nn.BatchNorm2d)):
        return _batchnorm(layer, where), "batchnorm", "max_c |gamma_c| / sqrt(running_var_c + eps)"
    if isinstance(layer, (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d)):
        value, detail = _pool(layer, t, where)
        return value, "pool", detail
    if isinstance(layer, nn.LayerNorm):
        return None
    if isinstance(layer, nn.Flatten):
        return 1.0, "reshape", "Flatten"
    return activation_lipschitz(layer, where), "activation", type(layer).__name__


def check_sequential(model: nn.Module) -> None:
    """Walk the layers without computing anything; raise for the first uncovered one."""
    for name, layer in flatten_sequential(model):
        where = name or type(layer).__name__
        if isinstance(layer, (nn.Linear, nn.Conv2d, nn.Flatten, nn.LayerNorm, nn.MaxPool2d, nn.AvgPool2d,
                              nn.AdaptiveAvgPool2d, *_POINTWISE)):  # fmt: skip
            continue
        if isinstance(layer, (nn.BatchNorm1d, nn.BatchNorm2d)):
            _batchnorm(layer, where)
            continue
        first = _first_uncovered_leaf(layer)
        if first is not None:
            raise uncovered(type(first[1]).__name__, f"{where}.{first[0]}" if name else first[0])
        raise RobfiltError(
            f"no certified Lipschitz bound for layer type {type(layer).__name__!r} at {where}: its forward wiring "
            "(e.g. residual connections) is not a covered structure (timm ViT, robfilt LM or a plain nn.Sequential); "
            f"{empirical_only()}."
        )


def _first_uncovered_leaf(module: nn.Module) -> tuple[str, nn.Module] | None:
    covered = (nn.Linear, nn.Conv2d, nn.Flatten, nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.MaxPool2d,
               nn.AvgPool2d, nn.AdaptiveAvgPool2d, *_POINTWISE)  # fmt: skip
    for name, sub in module.named_modules():
        if not any(True for _ in sub.children()) and not isinstance(sub, covered):
            return name, sub
    return None
