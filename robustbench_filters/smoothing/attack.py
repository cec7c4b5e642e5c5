"""An L2 PGD attack on the Monte-Carlo smoothed classifier (SmoothAdv; Salman et al., NeurIPS 2019).

The smoothed classifier's decision is not differentiable, so the attack targets its soft version
G(x) = E_eta[softmax(f(x + eta))] and maximises the cross-entropy -log G(x)_y, estimated with ``m`` noise draws
per step (Salman et al., Eq. 4-5). Each step takes fresh draws (the attack must beat the smoothed classifier,
not one fixed Monte-Carlo sample of it), moves along the L2-normalised gradient, projects back onto the L2 ball
of radius eps and clips to the [0, 1] image domain. The noise is seeded per example like the sampler's, so the
attack is deterministic and does not depend on how examples are batched.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ..checks.logits import guard_logits
from ..core.errors import RobfiltError
from .sampler import example_noise, model_device
from .settings import Sampling


def _project(x: torch.Tensor, delta: torch.Tensor, eps: float) -> torch.Tensor:
    """Project onto the L2 ball of radius eps, then into [0, 1] (coordinate clipping cannot leave the ball)."""
    norms = delta.flatten(1).norm(dim=1).clamp_min(1e-12)
    delta = delta * (eps / norms).clamp(max=1.0).view(-1, *[1] * (delta.ndim - 1))
    return (x + delta).clamp(0.0, 1.0) - x


def _step_noise(
    shape: Sequence[int], sigma: float, ids: Sequence[int], draws: int, step: int, seed: int
) -> torch.Tensor:
    """Fresh draws for one attack step: draws ``step*m .. step*m+m-1`` of each example's "attack" stream."""
    return torch.stack(
        [example_noise(shape, sigma, draws, seed=seed, example_id=i, phase="attack", start=step * draws) for i in ids]
    )


def smooth_adv_pgd(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    example_ids: Sequence[int],
    sigma: float,
    eps: float,
    s: Sampling,
    step_size: float | None = None,
) -> torch.Tensor:
    """Adversarial inputs within L2 distance ``eps`` of ``x`` (and in [0, 1]) against the smoothed classifier.

    ``s.attack_steps`` steps of ``s.attack_draws`` noise draws each (Salman et al. use 1-8 draws when training and
    more to evaluate); ``step_size`` defaults to 2.5 eps / steps (Madry et al.'s rule: enough to cross the ball and
    come back). ``s.batch`` bounds examples x draws per forward/backward pass. With ``s.num_classes``, outputs that
    are not finite (batch, classes) logits become NaN rows (:func:`..checks.logits.guard_logits`); they add no
    gradient.
    """
    steps, draws, seed, num_classes = s.attack_steps, s.attack_draws, s.seed, s.num_classes
    if not (math.isfinite(eps) and eps >= 0):
        raise RobfiltError(f"attack radius must be a finite number >= 0, got {eps}.")
    if steps < 1 or draws < 1:
        raise RobfiltError(f"the attack needs at least 1 step and 1 noise draw, got {steps} and {draws}.")
    ids = [int(i) for i in example_ids]
    device = model_device(model)
    x, y = x.to(device), y.to(device)
    if eps == 0:
        return x.clone()
    alpha = step_size if step_size is not None else 2.5 * eps / steps
    chunk = max(1, s.batch // draws)
    out = []
    for lo in range(0, len(ids), chunk):
        xs, ys, chunk_ids = x[lo : lo + chunk], y[lo : lo + chunk], ids[lo : lo + chunk]
        delta = torch.zeros_like(xs)
        for t in range(steps):
            noise = _step_noise(xs.shape[1:], sigma, chunk_ids, draws, t, seed).to(device, xs.dtype)
            delta.requires_grad_(True)
            with torch.enable_grad():
                noisy = (xs + delta).unsqueeze(1) + noise  # (k, m, C, H, W)
                inputs = noisy.flatten(0, 1)
                raw = model(inputs)
                if num_classes is not None:
                    raw = guard_logits(raw, len(inputs), num_classes, inputs.device)
                logits = raw.view(len(chunk_ids), draws, -1)
                soft = logits.softmax(-1).mean(1)  # the Monte-Carlo soft smoothed classifier
                loss = F.nll_loss(soft.clamp_min(1e-12).log(), ys, reduction="sum")
                (grad,) = torch.autograd.grad(loss, delta)
            grad_norm = grad.flatten(1).norm(dim=1).view(-1, *[1] * (grad.ndim - 1))
            step = torch.where(grad_norm > 0, grad / grad_norm.clamp_min(1e-12), torch.zeros_like(grad))
            delta = _project(xs, delta.detach() + alpha * step, eps)
        out.append((xs + delta).detach())
    return torch.cat(out)


__all__ = ["smooth_adv_pgd"]
