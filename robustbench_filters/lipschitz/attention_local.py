"""Attention bounds on the actual ball around each input, not on the whole LayerNorm-output ball.

The global lemma (notes §1.4(f), :mod:`.attention_bound`) bounds every attention quantity by its worst case on
``{||z_j|| <= R}``: ``||P||_2 <= sqrt(n)``, ``std_P(v) <= ||W_V|| R``, ``||grad s|| <= ||A|| R + ||c||``. Around a
real input Z0 the tokens can only move by ``||z_j - z0_j|| <= rho_j`` (per-token radii of the LayerNorm output),
so each of those quantities has a much smaller certified range:

- logits: ``s_ij(Z) - s_ij(Z0) = e_i^T A z0_j + g0_i.e_j + e_i^T A e_j`` (g_i = A^T z_i + c), so
  ``|ds_ij| <= delta_ij = rho_i ||A z0_j|| + ||g0_i|| rho_j + ||A|| rho_i rho_j`` and the softmax ratio gives
  ``P_ij <= P0_ij exp(delta_ij + max_k delta_ik)`` (entries masked at Z0 stay masked);
- spreads: ``std_P(v)^2 <= sum_j P_ij ||v_j - vbar0_i||^2 <= sum_j Pup_ij (||v0_j - vbar0_i|| + ||W_V|| rho_j)^2``,
  and the same for the tokens themselves (std_P(z)) and ``max_j ||v_j - vbar_i||`` (at most twice the largest
  such distance).

The lemma's proof then goes through unchanged with these ranges (per head, query i; u_j = ||e_j||):

    ||(J E)_i|| <= ||W_V|| sum_j P_ij u_j + sigma_i (alpha_i u_i + beta_i (sum_j P_ij u_j^2)^(1/2)),
    alpha_i = ||A|| std_P(z),  beta_i = ||g_i||,  sigma_i = std_P(v),

which gives the Jacobian bound (:func:`local_attention`, ``lip``), the per-token output radius (``token_out``)
and, differentiating once more, the Lipschitz constant of the Jacobian on the ball (``curvature``), used by the
second-order bound of :mod:`.research.taylor`:

    d^2 f_i[E, E'] = Cov_P(a', W_V e) + Cov_P(W_V e', a) + sum_j P_ij (a'_j - abar')(a_j - abar)(v_j - vbar)
                     + Cov_P(v, da),      a_j = ds_ij[E],  da_j = e_i^T A e'_j + e'_i^T A e_j,

    kappa_head <= max_i mu_i alpha_i^2 + 2 max_i (||W_V|| alpha_i + mu_i alpha_i beta_i + sigma_i ||A||)
                  + sqrt(C) max_i (2 ||W_V|| beta_i + mu_i beta_i^2),    C = max_j sum_i P_ij,  mu_i = max_j ||v_j - vbar_i||.

Heads combine as in :mod:`.attention_bound` (concatenation through ``||W_O||`` or the sum with ``W_O^h W_V^h``),
whichever is smaller. Input-independent logit biases (causal mask, BSA position kernels) enter P0 and nothing
else. Optional per-token input gains ``g_j`` (a LayerNorm in front, :mod:`.layernorm_bound`) are merged into the
first-order bound: the sublayer Jacobian ``J_A diag(J_LN,t)`` is bounded with ``u_j -> g_j u_j``, so a token
whose LayerNorm is tame does not pay for the worst one.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from timm.layers import Attention

from ..models.bsa import BilateralAttention, causal_bias
from .attention_bound import check_attention, head_matrices
from .spectral import spectral_norm

_EXP_CAP = 600.0  # exp() argument cap: beyond it the bound is vacuous anyway (probabilities are capped at 1)


@dataclass(frozen=True)
class HeadWeights:
    """Float64 weights of all heads, stacked: (H, d_h, D) for q/k/v, (H, D, d_h) for the out projection."""

    w_q: torch.Tensor
    w_k: torch.Tensor
    w_v: torch.Tensor
    b_q: torch.Tensor
    b_k: torch.Tensor
    b_v: torch.Tensor
    w_o: torch.Tensor
    scale: float
    norm_a: torch.Tensor  # (H,) ||A_h||
    norm_v: torch.Tensor  # (H,) ||W_V^h||
    norm_ov: torch.Tensor  # (H,) ||W_O^h W_V^h||
    norm_o: float


@lru_cache(maxsize=64)
def _weights_cached(module: Attention, version: int) -> HeadWeights:
    del version  # part of the cache key only
    h, dh, ad = module.num_heads, module.head_dim, module.attn_dim
    w = module.qkv.weight.detach().double().cpu()
    b = module.qkv.bias.detach().double().cpu() if module.qkv.bias is not None else torch.zeros(3 * ad).double()
    w_o = module.proj.weight.detach().double().cpu()
    heads = head_matrices(module)
    return HeadWeights(
        w_q=w[:ad].reshape(h, dh, -1), w_k=w[ad : 2 * ad].reshape(h, dh, -1), w_v=w[2 * ad :].reshape(h, dh, -1),
        b_q=b[:ad].reshape(h, dh), b_k=b[ad : 2 * ad].reshape(h, dh), b_v=b[2 * ad :].reshape(h, dh),
        w_o=w_o.reshape(w_o.shape[0], h, dh).permute(1, 0, 2), scale=float(module.scale),
        norm_a=torch.tensor([spectral_norm(hm.a.cpu()) for hm in heads], dtype=torch.float64),
        norm_v=torch.tensor([spectral_norm(hm.w_v.cpu()) for hm in heads], dtype=torch.float64),
        norm_ov=torch.tensor([spectral_norm(hm.w_ov.cpu()) for hm in heads], dtype=torch.float64),
        norm_o=spectral_norm(module.proj.weight.cpu()),
    )  # fmt: skip


def head_weights(module: Attention) -> HeadWeights:
    """Stacked per-head weights (cached per module and weight version)."""
    check_attention(module)
    return _weights_cached(module, module.qkv.weight._version + module.proj.weight._version)


def logit_bias(module: Attention, n: int, is_causal: bool, device: torch.device) -> torch.Tensor | None:
    """The input-independent part of the logits (H or 1, N, N), float64, or None."""
    if isinstance(module, BilateralAttention):
        dtype = module.qkv.weight.dtype
        return module.full_bias(n, device, dtype, None, is_causal).detach().double()
    return causal_bias(n, device, torch.float64)[None] if is_causal else None


@dataclass
class AttentionLocal:
    """Certified local attention quantities for every (example, radius); all float64."""

    lip: torch.Tensor  # (B, K) Jacobian bound on the ball, with the per-token input gains merged in
    lip_plain: torch.Tensor  # (B, K) the same without gains (for the curvature composition)
    curvature: torch.Tensor  # (B, K) Lipschitz constant of the Jacobian on the ball
    token_out: torch.Tensor  # (B, K, N) per-token output radius for per-token input radii rho


def _masked_max(x: torch.Tensor, support: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.where(support, x, torch.zeros((), dtype=x.dtype, device=x.device)).amax(dim=dim)


def local_attention(
    module: Attention, z0: torch.Tensor, rho: torch.Tensor, is_causal: bool = False, gains: torch.Tensor | None = None
) -> AttentionLocal:
    """Bounds for ``module`` on ``{Z : ||z_j - z0_j|| <= rho_j}`` (a convex set, so Jacobian bounds are Lipschitz).

    ``z0`` (B, N, D) is the attention input at the centre (the LayerNorm output), ``rho`` (B, K, N) per-token radii,
    ``gains`` (B, K, N) optional per-token gains of the map in front (see the module docstring).
    """
    w = head_weights(module)
    dev = z0.device
    z = z0.detach().double()
    b, n, _ = z.shape
    rho = rho.double()
    g_in = torch.ones_like(rho) if gains is None else gains.double()
    wq, wk, wv, wo = (t.to(dev) for t in (w.w_q, w.w_k, w.w_v, w.w_o))
    q = torch.einsum("bnd,hed->bhne", z, wq) + w.b_q.to(dev)[None, :, None]
    k = torch.einsum("bnd,hed->bhne", z, wk) + w.b_k.to(dev)[None, :, None]
    v = torch.einsum("bnd,hed->bhne", z, wv) + w.b_v.to(dev)[None, :, None]
    logits = w.scale * q @ k.transpose(-1, -2)
    bias = logit_bias(module, n, is_causal, dev)
    if bias is not None:
        logits = logits + bias[None]
    p0 = logits.softmax(-1)  # (B, H, N, N)
    support = (p0 > 0)[:, None]  # (B, 1, H, N, N)
    norm_a, norm_v, norm_ov = (t.to(dev)[None, None, :, None] for t in (w.norm_a, w.norm_v, w.norm_ov))
    # ||A z0_j|| = scale ||W_Q^T W_K z0_j|| and g0_i = A^T z0_i + c = scale W_K^T q0_i
    az = (w.scale * torch.einsum("bhne,hed->bhnd", k - w.b_k.to(dev)[None, :, None], wq)).norm(dim=-1)
    g0 = (w.scale * torch.einsum("bhne,hed->bhnd", q, wk)).norm(dim=-1)  # (B, H, N)
    r = rho[:, :, None, :]  # (B, K, 1, N)
    delta = r[..., :, None] * az[:, None, :, None, :] + g0[:, None, :, :, None] * r[..., None, :]
    delta = delta + norm_a[..., None] * r[..., :, None] * r[..., None, :]  # (B, K, H, N, N)
    big = _masked_max(delta, support, -1)  # (B, K, H, N)
    ratio = torch.exp((delta + big[..., None]).clamp_max(_EXP_CAP))
    p_up = torch.where(support, (p0[:, None] * ratio).clamp_max(1.0), torch.zeros((), dtype=z.dtype, device=dev))
    colsum = p_up.sum(-2).clamp_max(n)  # (B, K, H, N) over queries i, per key j
    c_max = colsum.amax(-1)  # (B, K, H)

    def spread(x: torch.Tensor, lip_x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(std_P upper, max distance upper) of the rows of x (B, H, N, e) around the centre's P-mean."""
        mean = p0 @ x
        dist = torch.cdist(mean, x)[:, None] + lip_x[..., None] * r[..., None, :]  # (B, K, H, N, N)
        far = _masked_max(dist, support, -1)
        std = torch.minimum((p_up * dist.pow(2)).sum(-1).sqrt(), far)
        return std, far

    std_z, _ = spread(z[:, None].expand(-1, wq.shape[0], -1, -1), torch.ones_like(norm_a))
    alpha = norm_a * std_z  # (B, K, H, N)
    beta = g0[:, None] + norm_a * r
    u = torch.einsum("bhne,hde->bhnd", v, wo)  # values through the head's out projection
    results = {}
    for key, vals, lv in (("concat", v, norm_v), ("sum", u, norm_ov)):
        sigma, far = spread(vals, lv)
        mu = 2.0 * far
        results[key] = _combine_head_terms(p_up, colsum, c_max, alpha, beta, sigma, mu, lv, norm_a, r, g_in)
    lips = {}
    for key in ("lip", "lip_plain", "curvature", "token_out"):
        cat, summed = results["concat"][key], results["sum"][key]
        cat = w.norm_o * cat.pow(2).sum(2).sqrt()  # heads on dim 2
        lips[key] = torch.minimum(cat, summed.sum(2))
    return AttentionLocal(**lips)


def _combine_head_terms(p_up, colsum, c_max, alpha, beta, sigma, mu, lv, norm_a, r, g_in) -> dict[str, torch.Tensor]:
    """Per-head first-order bound (with and without gains), curvature and per-token output radius."""
    g = g_in[:, :, None, :]  # (B, K, 1, N)
    out = {}
    for key, gain in (("lip", g), ("lip_plain", torch.ones_like(g))):
        col = (gain * colsum).amax(-1)
        row = torch.minimum((p_up * gain[..., None, :]).sum(-1), gain.amax(-1, keepdim=True)).amax(-1)
        t1 = lv[..., 0] * torch.sqrt(col * row)
        t2a = (sigma * alpha * gain).amax(-1)
        t2b = ((gain.pow(2) * (p_up * (sigma * beta).pow(2)[..., :, None]).sum(-2)).amax(-1)).sqrt()
        out[key] = t1 + t2a + t2b  # (B, K, H)
    lv_i = lv  # (1, 1, H, 1)
    na = norm_a
    kappa = (mu * alpha.pow(2)).amax(-1) + 2.0 * (lv_i * alpha + mu * alpha * beta + sigma * na).amax(-1)
    kappa = kappa + c_max.sqrt() * (2.0 * lv_i * beta + mu * beta.pow(2)).amax(-1)
    out["curvature"] = kappa
    rmax = r.amax(-1, keepdim=True)
    mean_r = torch.minimum((p_up * r[..., None, :]).sum(-1), rmax)
    rms_r = torch.minimum((p_up * r[..., None, :].pow(2)).sum(-1).sqrt(), rmax)
    out["token_out"] = lv_i * mean_r + sigma * (alpha * r + beta * rms_r)  # (B, K, H, N)
    return out
