"""Input normalisation inside the model, for any image model.

Every image model takes inputs in [0, 1]; mean/std normalisation is part of the model (as in RobustBench), so
attack budgets are always on the [0, 1] scale. The normaliser is a child ``input_norm`` of the model's root with
non-persistent buffers, run by a forward pre-hook on the root: it works for every architecture (ViT, ResNet,
ConvNeXt, a user's module), the model keeps its class and attributes, and the state-dict keys stay exactly the
model's own, so timm, RobustBench and user checkpoints load unchanged.

Calling ``model(x)`` normalises; calling a submethod such as ``model.forward_features(x)`` directly does not
(hooks run on ``__call__``), so code that walks the layers itself applies ``model.input_norm`` first.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..core.errors import RobfiltError


class InputNormalize(nn.Module):
    """(x - mean) / std per channel, with no state-dict entries."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]) -> None:
        super().__init__()
        mean, std = [float(m) for m in mean], [float(s) for s in std]
        if len(mean) != len(std) or not mean:
            raise RobfiltError(f"mean and std need one value per channel, got {len(mean)} and {len(std)} values.")
        if any(not s > 0 for s in std):
            raise RobfiltError(f"std values must be positive, got {std}.")
        self.register_buffer("mean", torch.tensor(mean).view(1, -1, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std).view(1, -1, 1, 1), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean.to(x.dtype)) / self.std.to(x.dtype)

    def extra_repr(self) -> str:
        return f"mean={self.mean.flatten().tolist()}, std={self.std.flatten().tolist()}"


def _normalize_hook(module: nn.Module, args: tuple) -> tuple:
    # The name is part of the contract: the Lipschitz bound code accepts this one hook and no other.
    return (module.input_norm(args[0]), *args[1:])


def attach_normalizer(model: nn.Module, mean: Sequence[float], std: Sequence[float]) -> nn.Module:
    """Make ``model`` accept [0, 1] images: ``model(x)`` computes ``model((x - mean) / std)``.

    Calling it again replaces the mean/std (the hook is registered once).
    """
    if isinstance(model, (nn.Sequential, nn.ModuleList, nn.ModuleDict)):
        # a container runs every child in order: a child normaliser would run twice
        raise RobfiltError(f"cannot attach a normaliser to a bare {type(model).__name__}; wrap it in a module first.")
    existing = getattr(model, "input_norm", None)
    if existing is not None and not isinstance(existing, InputNormalize):
        raise RobfiltError(
            f"{type(model).__name__} already has an attribute 'input_norm'; cannot attach the normaliser."
        )
    norm = InputNormalize(mean, std)
    ref = next(iter(model.parameters()), None)
    if ref is not None:
        norm = norm.to(ref.device)
    model.input_norm = norm
    if existing is None:
        model.register_forward_pre_hook(_normalize_hook)
    return model


def get_normalizer(model: nn.Module) -> InputNormalize | None:
    """The normaliser attached to ``model``, if any."""
    norm = getattr(model, "input_norm", None)
    return norm if isinstance(norm, InputNormalize) else None


def normalize_input(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """What ``model``'s first layer sees for the [0, 1] input ``x`` (for code that bypasses ``model(x)``)."""
    norm = get_normalizer(model)
    return x if norm is None else norm(x)


def channel_stats(
    mean: float | Sequence[float], std: float | Sequence[float], in_chans: int
) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean/std with one value per input channel.

    One value is repeated; RGB statistics for a 1-channel model are averaged (a grey image is the mean of its
    channels to first order, e.g. ImageNet's (0.485, 0.456, 0.406) -> 0.449). Anything else needs explicit values.
    """

    def fit(values: float | Sequence[float], what: str) -> tuple[float, ...]:
        vals = tuple(float(v) for v in values) if isinstance(values, list | tuple) else (float(values),)
        if len(vals) == in_chans:
            return vals
        if len(vals) == 1:
            return vals * in_chans
        if in_chans == 1:
            return (sum(vals) / len(vals),)
        raise RobfiltError(
            f"{what} has {len(vals)} values but the model takes {in_chans} channels; "
            f"give {what}=[...] with {in_chans} values."
        )

    return fit(mean, "mean"), fit(std, "std")
