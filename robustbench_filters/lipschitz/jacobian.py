"""Per-example Jacobian spectral norms with ``torch.func``: rigorous *lower* bounds (notes/lipschitz.md §3.1-3.2).

For x in the interior of a domain D, ||J_f(x)||_2 <= Lip_D(f), so each value here is a lower bound on the
Lipschitz constant (up to float rounding). Both estimators use the block-diagonal trick: the models never mix
samples, so the Jacobian of the batched forward is block diagonal, one batched vjp returns every J_i^T u_i and
one batched jvp every J_i v_i. Nothing is vmapped over the model's forward.

- :func:`jacobian_norm_exact`: the full per-example Jacobian (m vjps, vmapped like ``jacrev``) and its largest
  singular value in float64. Exact; use it when the output is small (10 logits).
- :func:`jacobian_norm_power`: power iteration on J^T J with jvp/vjp. The value ||J^T u|| is a valid lower bound
  at every iteration and is nondecreasing across iterations; it converges to sigma_max.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.func import jvp, vjp, vmap

from ..core.errors import RobfiltError

log = logging.getLogger(__name__)

Fn = Callable[[torch.Tensor], torch.Tensor]


def batch_norms(t: torch.Tensor) -> torch.Tensor:
    """l2 norm of each sample (all non-batch dimensions flattened)."""
    return t.reshape(t.shape[0], -1).norm(dim=1)


def _per_sample(scale: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    return scale.reshape(-1, *([1] * (t.ndim - 1)))


def normalize(t: torch.Tensor) -> torch.Tensor:
    """Scale each sample to unit norm (zero samples stay zero)."""
    n = batch_norms(t)
    return t / _per_sample(torch.where(n > 0, n, torch.ones_like(n)), t)


def _forward_ad_guard(exc: Exception) -> Exception:
    """Turn torch's 'no forward AD for fused attention' error into a one-line user error."""
    text = str(exc)
    if "forward AD" in text or "forward-mode" in text or "not implemented" in text.lower():
        return RobfiltError(
            "the model has an op without forward-mode AD (usually fused scaled-dot-product attention in a "
            f"custom module: {text.splitlines()[0][:120]}); use method 'exact' or 'ratio', or a manual attention path."
        )
    return exc


def jacobian_norm_exact(fn: Fn, x: torch.Tensor, max_outputs: int = 1024, chunk_size: int | None = 32) -> torch.Tensor:
    """sigma_max(J_f(x_i)) for every sample, exactly: dense per-sample Jacobians + float64 ``svdvals``.

    J_i^T e_k for all samples i at once is one vjp of the batched forward with cotangent e_k in every row, and
    vmapping the vjp over the m basis vectors is what ``torch.func.jacrev`` does (``chunk_size`` basis vectors at
    a time bounds the memory for wide outputs such as an LM's vocabulary).
    """
    out, vjp_fn = vjp(fn, x)
    if out.ndim != 2:
        raise ValueError(f"the function must return (batch, outputs), got shape {tuple(out.shape)}")
    b, m = out.shape
    if m > max_outputs:
        raise RobfiltError(f"exact Jacobians need one vjp per output and this model has {m}; use method 'power'.")
    basis = torch.eye(m, dtype=out.dtype, device=out.device)[:, None, :].expand(m, b, m)
    (jac,) = vmap(vjp_fn, chunk_size=chunk_size)(basis)  # (m, B, *in): row k holds J_i^T e_k
    jac = jac.reshape(m, b, -1).transpose(0, 1)  # (B, m, n)
    return torch.linalg.svdvals(jac.detach().double())[:, 0]


@dataclass
class PowerResult:
    """Per-sample lower bounds from power iteration, the top right singular vectors and the trace."""

    sigma: torch.Tensor  # (B,) float64, ||J^T u|| at the last iteration
    v: torch.Tensor  # (B, *in) unit top right singular vector estimates (input-space direction)
    iterations: int
    history: torch.Tensor  # (iterations, B) the value after each iteration, nondecreasing


def jacobian_norm_power(
    fn: Fn,
    x: torch.Tensor,
    iters: int = 50,
    tol: float = 1e-6,
    *,
    generator: torch.Generator | None = None,
    v0: torch.Tensor | None = None,
) -> PowerResult:
    """Batched power iteration on J_i^T J_i with one jvp and one (reused) vjp per step.

    Stops when every sample's relative change is below ``tol`` or after ``iters`` steps. The vjp closure is
    built once (its graph is retained) so each step costs one forward-mode pass plus one backward.
    """
    if iters < 1:
        raise RobfiltError(f"power iterations must be >= 1, got {iters}.")
    x = x.detach()
    if v0 is None:
        v0 = torch.randn(x.shape, generator=generator, dtype=x.dtype, device="cpu").to(x.device)
    v = normalize(v0.to(x.dtype))
    try:
        _, vjp_fn = vjp(fn, x)
    except RuntimeError as exc:  # pragma: no cover - depends on the model's ops
        raise _forward_ad_guard(exc) from exc
    history = []
    prev = None
    sigma = torch.zeros(x.shape[0], dtype=torch.float64, device=x.device)
    for _ in range(iters):
        try:
            _, u = jvp(fn, (x,), (v,))
        except RuntimeError as exc:
            raise _forward_ad_guard(exc) from exc
        u = normalize(u.detach())
        (w,) = vjp_fn(u)
        w = w.detach()
        sigma = batch_norms(w).double()
        v = normalize(w)
        history.append(sigma)
        if prev is not None and tol > 0:
            change = (sigma - prev).abs() / sigma.clamp_min(torch.finfo(torch.float64).tiny)
            if bool((change < tol).all()):
                break
        prev = sigma
    return PowerResult(sigma=sigma, v=v, iterations=len(history), history=torch.stack(history))
