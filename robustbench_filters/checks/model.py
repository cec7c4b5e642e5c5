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


# --- refusals before a run: a model that cannot be measured at all -----------------------------------------------

#: why no attack, resumed or not, can help: the fix is in the model
MODEL_MUST_CHANGE = "the model must change (resuming cannot help)"


def model_device(model: nn.Module) -> torch.device | None:
    """The one device a model's weights live on (None: it has none)."""
    devices = {t.device for t in (*model.parameters(), *model.buffers())}
    return next(iter(devices)) if len(devices) == 1 else None


def require_model_device(model: nn.Module, label: str, device: torch.device | str) -> None:
    """Refuse a model robfilt cannot run on the run's ``device``: weights on the meta device (no values), on several
    devices, or on another accelerator than the run's (a CPU model is moved to the run's device)."""
    from ..core.errors import RobfiltError
    from ..core.surface import flag

    run_device = torch.device(device)
    devices = sorted({str(t.device) for t in (*model.parameters(), *model.buffers())})
    if "meta" in devices:
        raise RobfiltError(
            f"model {label} has weights on the meta device, which holds no values (built under torch.device('meta') "
            "or with empty weights); load its weights first (model.to_empty(device='cpu'), then load_state_dict)."
        )
    if len(devices) > 1:
        raise RobfiltError(
            f"model {label} has weights on several devices ({', '.join(devices)}); robfilt runs a model on one "
            f"device: move it to one (model.to('cpu')) and pick that device with {flag('device')}."
        )
    if devices and devices[0] != "cpu" and torch.device(devices[0]) != run_device:
        raise RobfiltError(
            f"model {label} is on {devices[0]} but the run's device is {run_device}; pass {flag('device')} "
            f"{devices[0]} or move the model (model.to('{run_device}'))."
        )


def require_input_dependence(model: nn.Module, label: str, x: torch.Tensor) -> None:
    """Refuse, before a gradient attack starts, a model no gradient attack can measure: no gradient reaches the
    input (its forward detaches the images, computes without them or ignores them: ``x.detach()``, ``.item()``,
    numpy, ``argmax``, a constant), or its logits do not depend on it (zero gradients and the same logits for other
    images). Either way the fix is in the model, so the message says so; a model whose gradient is zero but whose
    logits change with the input (quantised inputs: gradient masking) is left to the sanity checks.
    """
    from ..core.errors import RobfiltError, UserCodeError

    x = x.detach().clone()
    other = (x + 0.5) % 1.0  # other images: every pixel differs
    try:
        with torch.enable_grad():
            xg = x.clone().requires_grad_(True)
            out = model(xg)
            if not isinstance(out, torch.Tensor) or not out.is_floating_point():
                return  # not logits: the logits check refuses it by name
            grad = None
            if out.requires_grad:
                (grad,) = torch.autograd.grad(out.float().sum(), xg, allow_unused=True)
        with torch.no_grad():
            again = model(other)  # anything but same-shaped logits differs: the output checks judge the rest
            constant = isinstance(again, torch.Tensor) and torch.equal(out.detach(), again)
    except Exception as exc:  # noqa: BLE001 - the user's forward may raise anything
        raise UserCodeError.wrap(label, "a gradient pass on its first examples", exc, "fix it, then rerun") from None
    if grad is None:
        raise RobfiltError(
            f"no gradient reaches model {label}'s input: its forward detaches the images, computes the logits "
            f"without them or ignores them (x.detach(), .item(), numpy, argmax, a constant), so gradient attacks "
            f"cannot run; {MODEL_MUST_CHANGE}."
        )
    if constant and not bool(grad.any()):
        raise RobfiltError(
            f"model {label}'s output does not depend on its input (the same logits for other images, and zero "
            f"input gradients), so no attack or accuracy measures it; {MODEL_MUST_CHANGE}."
        )
