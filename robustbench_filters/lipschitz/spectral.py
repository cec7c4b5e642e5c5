"""Exact spectral norms of the linear pieces, in float64 (notes/lipschitz.md §1.2, §1.3).

Power iteration only ever gives a *lower* estimate of sigma_max, so certified bounds use the full singular
value decomposition (``torch.linalg.svdvals``) in float64. The matrices of a transformer are small enough
(d x 4d) that this costs milliseconds.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .constants import uncovered


def spectral_norm(weight: torch.Tensor) -> float:
    """sigma_max of a matrix, exactly (float64 SVD). A bias never changes a Lipschitz constant."""
    w = weight.detach().double()
    if w.ndim != 2:
        raise ValueError(f"spectral_norm needs a matrix, got shape {tuple(w.shape)}")
    if w.numel() == 0:
        return 0.0
    return torch.linalg.svdvals(w)[0].item()


def linear_lipschitz(module: nn.Linear) -> float:
    """x -> W x + b is exactly ||W||_2-Lipschitz; applied token-wise (I_n kron W) the norm is the same."""
    return spectral_norm(module.weight)


def conv_lipschitz(conv: nn.Conv2d, where: str = "") -> float:
    """An upper bound on the operator norm of a 2D convolution (exact for a ViT patch embedding).

    With kernel == stride the patches do not overlap: the operator is block diagonal with one copy of the
    (C_out, C_in k_h k_w) matrix per patch, so its norm *equals* that matrix's norm (or is below it when the image
    does not tile exactly). Overlapping kernels repeat each pixel in at most ceil(k_h/s_h) ceil(k_w/s_w) patches,
    so sqrt of that count times the matrix norm bounds them (zero padding only drops terms). Groups are
    independent blocks: the maximum over groups. Dilation is not covered (notes §1.2).
    """
    if not isinstance(conv, nn.Conv2d) or tuple(conv.dilation) != (1, 1) or conv.padding_mode != "zeros":
        raise uncovered(conv, where)
    kh, kw = conv.kernel_size
    sh, sw = conv.stride
    overlap = math.ceil(kh / sh) * math.ceil(kw / sw)
    weight = conv.weight.detach()
    per_group = weight.shape[0] // conv.groups
    norms = [
        spectral_norm(weight[g * per_group : (g + 1) * per_group].reshape(per_group, -1)) for g in range(conv.groups)
    ]
    return math.sqrt(overlap) * max(norms)
