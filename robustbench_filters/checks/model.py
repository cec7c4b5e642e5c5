"""Checks that probe a model directly: eval mode and determinism, logits (not probabilities), input gradients."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .base import FAIL, PASS, WARN, Check


def check_gradients(model: nn.Module, label: str, x: torch.Tensor, y: torch.Tensor) -> Check:
    """Input gradients of the loss are finite and non-zero (zero gradients mean masking or quantisation)."""
    x = x.clone().requires_grad_(True)
    loss = F.cross_entropy(model(x), y, reduction="sum")
    (grad,) = torch.autograd.grad(loss, x)
    if not torch.isfinite(grad).all():
        return Check("finite, non-zero gradients", label, FAIL, "non-finite input gradients")
    per_ex = grad.flatten(1).abs().amax(1)
    zero = int((per_ex == 0).sum())
    if zero == len(y):
        return Check("finite, non-zero gradients", label, FAIL, "all input gradients are zero (gradient masking?)")
    if zero:
        return Check("finite, non-zero gradients", label, WARN, f"{zero}/{len(y)} examples have zero input gradient")
    return Check("finite, non-zero gradients", label, PASS, f"{len(y)} examples")


def check_logits(model: nn.Module, label: str, x: torch.Tensor) -> Check:
    """Outputs look like logits, not probabilities (a softmax output layer saturates the CE gradient)."""
    with torch.no_grad():
        out = model(x)
    probs_like = bool(((out >= 0) & (out <= 1)).all()) and torch.allclose(
        out.sum(-1), torch.ones(len(out), device=out.device), atol=1e-3
    )
    if probs_like:
        return Check(
            "outputs are logits", label, FAIL, "outputs are in [0,1] and sum to 1: a softmax layer masks gradients"
        )
    return Check("outputs are logits", label, PASS, "unnormalised scores")


def check_eval_deterministic(model: nn.Module, label: str, x: torch.Tensor) -> Check:
    """The model is in eval mode and two forward passes agree (no dropout, no randomness)."""
    training = [n for n, m in model.named_modules() if m.training]
    with torch.no_grad():
        a, b = model(x), model(x)
    if training:
        return Check(
            "eval mode, deterministic",
            label,
            FAIL,
            f"{len(training)} modules in training mode (e.g. {training[0] or 'root'})",
        )
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape):
        return Check("eval mode, deterministic", label, FAIL, "two passes return outputs of different types or shapes")
    if not bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all()):  # NaN is the finite-outputs check's
        diff = (a - b).abs().nan_to_num(float("inf")).max().item()
        return Check("eval mode, deterministic", label, FAIL, f"two passes differ by {diff:.2e}")
    return Check("eval mode, deterministic", label, PASS, "eval mode, identical repeated outputs")
