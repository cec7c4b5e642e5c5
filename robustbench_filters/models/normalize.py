"""Input normalisation inside the model.

Every image model takes inputs in [0, 1]; mean/std normalisation is part of the model (as in RobustBench),
so attack budgets are always on the [0, 1] scale. The normaliser holds non-persistent buffers and runs as a
forward pre-hook on the patch embedding, so the state-dict keys stay exactly timm's and timm/RobustBench
checkpoints load unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class InputNormalize(nn.Module):
    """(x - mean) / std per channel, with no state-dict entries."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(list(mean)).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(list(std)).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"


def _normalize_hook(module: nn.Module, args: tuple) -> tuple:
    return (module.input_norm(args[0]), *args[1:])


def attach_normalizer(model: nn.Module, mean: Sequence[float], std: Sequence[float]) -> nn.Module:
    """Make ``model`` accept [0, 1] images by normalising before its patch embedding."""
    model.patch_embed.input_norm = InputNormalize(mean, std)
    model.patch_embed.register_forward_pre_hook(_normalize_hook)
    return model
