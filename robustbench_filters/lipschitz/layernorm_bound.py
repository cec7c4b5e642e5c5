"""LayerNorm on a ball: per-token variance lower bounds, local gain, curvature, and the box minimum variance.

LayerNorm's Jacobian is ``diag(gamma) (1/s) (I - w w^T) C`` with ``s = sqrt(sigma^2 + eps)``, ``|w| < 1`` and
``C`` the centring projection (notes/lipschitz.md §1.2), so everything about it is controlled by a lower bound on
the per-token standard deviation sigma of its input. Globally that bound is 0 and the constant is the eps floor
``max|gamma| / sqrt(eps)``, which alone is ~27 of the ~43 decades of the zoo DeiT's global bound. This module
provides the lower bounds that remove that floor where it soundly can:

- on a ball: ``sigma_t(h) = ||C h_t|| / sqrt(d)`` is ``1/sqrt(d)``-Lipschitz in token t, so on
  ``{h : ||h_t - c_t|| <= r_t}`` the std is at least ``sigma_t(c) - r_t / sqrt(d)`` (:func:`std_lower`);
- over the input box: the first LayerNorm's input is affine in the pixels, so its minimum variance over
  ``[0, 1]^d`` is a box-constrained least-squares problem, solved by ``scipy.optimize.lsq_linear`` and
  certified from below by the convexity (Frank-Wolfe) gap, so solver tolerance can never make it unsound
  (:func:`box_min_variance`).

It also gives the Lipschitz constant of the LayerNorm *Jacobian* (:func:`layernorm_curvature`), which the
second-order (Taylor) local bound needs: ``||dJ[u]|| <= 3 max|gamma| |u| / (sqrt(d) s^2)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from .constants import check_layernorm


def gamma_max(norm: nn.LayerNorm) -> float:
    """max |gamma| (1 without an affine weight)."""
    return norm.weight.detach().double().abs().max().item() if norm.weight is not None else 1.0


def token_std(h: torch.Tensor) -> torch.Tensor:
    """Per-token standard deviation (biased, as LayerNorm uses) in float64: (..., N, D) -> (..., N)."""
    return h.detach().double().var(dim=-1, unbiased=False).sqrt()


def std_lower(centre_std: torch.Tensor, radius: torch.Tensor, d: int, floor: torch.Tensor | None = None):
    """Lower bound on each token's std on the ball ``||h_t - c_t|| <= r_t``.

    ``centre_std`` is (B, N), ``radius`` (B, K, N) per token; returns (B, K, N). ``floor`` (N,) or (B, N) is an
    independent lower bound valid on the same domain (the box minimum of the first LayerNorm); the larger of the
    two is used.
    """
    lo = (centre_std[:, None, :] - radius / math.sqrt(d)).clamp_min(0.0)
    if floor is not None:
        f = floor.double().to(lo.device)
        lo = torch.maximum(lo, f[:, None, :] if f.ndim == 2 else f[None, None, :])
    return lo


def layernorm_gain(norm: nn.LayerNorm, std_lo: torch.Tensor) -> torch.Tensor:
    """Per-token Jacobian bound ``max|gamma| / sqrt(std_lo^2 + eps)`` (same shape as ``std_lo``)."""
    check_layernorm(norm)
    return gamma_max(norm) / torch.sqrt(std_lo.double().pow(2) + norm.eps)


def layernorm_curvature(norm: nn.LayerNorm, std_lo: torch.Tensor) -> torch.Tensor:
    """Per-token Lipschitz constant of the LayerNorm Jacobian where the std is >= ``std_lo``.

    With y = C x, s = sqrt(|y|^2/d + eps) and w = y / (sqrt(d) s): J = (1/s)(I - w w^T), ds[u] = w.u / sqrt(d)
    and dw[u] = (I - w w^T) u / (sqrt(d) s), so ||dJ[u]|| <= |u| / (sqrt(d) s^2) + 2 |w| |dw| <= 3 |u| /
    (sqrt(d) s^2). diag(gamma) adds max|gamma|, C has norm 1. The set where std >= std_lo must be convex along
    the segment used (it is: a ball on which :func:`std_lower` holds).
    """
    check_layernorm(norm)
    d = norm.normalized_shape[-1]
    return 3.0 * gamma_max(norm) / (math.sqrt(d) * (std_lo.double().pow(2) + norm.eps))


def layernorm_jacobians(norm: nn.LayerNorm, h: torch.Tensor) -> torch.Tensor:
    """The exact per-token Jacobians of LayerNorm at ``h`` (..., D) -> (..., D, D), float64."""
    check_layernorm(norm)
    x = h.detach().double()
    d = x.shape[-1]
    y = x - x.mean(dim=-1, keepdim=True)
    s = torch.sqrt(y.pow(2).mean(dim=-1, keepdim=True) + norm.eps)  # (..., 1)
    w = y / (math.sqrt(d) * s)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    centre = eye - 1.0 / d
    core = (eye - w[..., :, None] * w[..., None, :]) / s[..., None]
    jac = core @ centre
    if norm.weight is not None:
        jac = norm.weight.detach().double()[:, None] * jac
    return jac


def box_min_variance(m: torch.Tensor, c: torch.Tensor, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    """Certified lower bound on ``min_{lo <= x <= hi} var(M x + c)`` for each token.

    ``m`` is (D, p) (one affine map shared by all tokens, e.g. a patch embedding) and ``c`` (N, D) the per-token
    offsets; returns (N,) float64. var(v) = ||C v||^2 / D with C the centring projection, so each token is
    ``min ||A x - b||^2 / D`` with A = C M, b = -C c_t over the box: a convex box-constrained least-squares
    problem. ``lsq_linear`` finds x_hat; convexity gives f(x) >= f(x_hat) + g.(x - x_hat) with g = grad f(x_hat),
    and minimising the right side over the box (coordinate-wise) is a lower bound that does not depend on how
    accurately the solver converged (it equals the minimum at the optimum).
    """
    from scipy.optimize import lsq_linear

    a_t = m.detach().double()
    d = a_t.shape[0]
    centre = torch.eye(d, dtype=torch.float64) - 1.0 / d
    a = (centre @ a_t).cpu().numpy()
    b_all = (-(c.detach().double().cpu()) @ centre.T).numpy()
    out = np.empty(b_all.shape[0])
    for t, b in enumerate(b_all):
        if not np.any(a):
            out[t] = float(b @ b)
            continue
        res = lsq_linear(a, b, bounds=(lo, hi), method="bvls", tol=1e-14, lsq_solver="exact")
        x = np.clip(res.x, lo, hi)
        r = a @ x - b
        g = 2.0 * a.T @ r
        gap = np.minimum(g * (lo - x), g * (hi - x)).sum()  # <= 0
        out[t] = max(0.0, float(r @ r) + float(gap))
    return torch.from_numpy(out / d)
