"""Pair-ratio ascent: max ||f(x) - f(x')|| / ||x - x'|| over x' near x (notes/lipschitz.md §3.3).

For any two points of a domain D the ratio is <= Lip_D(f), with no differentiability assumption and no
linearisation, so the best ratio found is a rigorous lower bound (E2). We keep x fixed and move x' = x + delta
with normalised-gradient ascent on log ||f(x + delta) - f(x)|| - log ||delta||, projecting delta onto the ball
||delta|| <= radius and x' onto the input box ([0, 1] for pixels). Both points then lie in B(x, radius), which is
the ball the local certified bound covers, so ratio <= local upper bound holds by construction.

Starting along the top right singular vector of J(x) (a few power iterations) makes the first ratio close to
||J(x)||, and ascent can only improve on the best value kept.
"""

from __future__ import annotations

import torch

from .jacobian import Fn, _per_sample, batch_norms, normalize


def project(
    x: torch.Tensor, delta: torch.Tensor, radius: float, box: tuple[float, float] | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clip delta to the l2 ball, then x + delta to the box; returns (x', the actual delta)."""
    norms = batch_norms(delta)
    scale = torch.where(norms > radius, radius / norms.clamp_min(1e-300), torch.ones_like(norms))
    delta = delta * _per_sample(scale, delta)
    xp = x + delta
    if box is not None:
        xp = xp.clamp(*box)
    return xp, xp - x


def pair_ratio_ascent(
    fn: Fn,
    x: torch.Tensor,
    radius: float,
    steps: int = 20,
    step_size: float = 0.5,
    *,
    direction: torch.Tensor | None = None,
    init_scale: float = 0.1,
    box: tuple[float, float] | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Best ratio ||f(x') - f(x)|| / ||x' - x|| per sample (float64), with ||x' - x|| <= radius.

    ``step_size`` is relative to the current ||delta|| (the objective is scale-invariant for small delta, so
    the step must be too). ``direction`` is the starting direction (e.g. from power iteration); random if None.
    """
    x = x.detach()
    if direction is None:
        direction = torch.randn(x.shape, generator=generator, dtype=x.dtype, device="cpu").to(x.device)
    delta = normalize(direction.to(x.dtype)) * (init_scale * radius)
    with torch.no_grad():
        fx = fn(x)
    best = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    for step in range(steps + 1):
        delta = delta.detach().requires_grad_(True)
        xp, actual = project(x, delta, radius, box)
        num = batch_norms(fn(xp) - fx)
        den = batch_norms(actual)
        ratio = num / den.clamp_min(torch.finfo(x.dtype).tiny)
        valid = (den > 0) & torch.isfinite(ratio)
        best = torch.where(valid, torch.maximum(best, ratio.detach().double()), best)
        if step == steps:
            break
        objective = (torch.log(num.clamp_min(1e-300)) - torch.log(den.clamp_min(1e-300)))[valid].sum()
        if not objective.requires_grad:
            break
        (grad,) = torch.autograd.grad(objective, delta)
        with torch.no_grad():
            size = batch_norms(delta).clamp_min(1e-12 * radius)
            delta = delta + step_size * _per_sample(size, delta) * normalize(grad)
            _, delta = project(x, delta, radius, box)
    return best
