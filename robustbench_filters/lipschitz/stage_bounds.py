"""Certified bounds for one stage of a :class:`.chain.Chain` on the ball its input can reach.

For a stage map ``g`` (a residual sublayer with Y_0 fixed, or a LayerNorm) and the set
``{h : ||h_t - h0_t|| <= r_t for every token t, ||h - h0|| <= R}`` around the real hidden state h0, this module
returns

- ``sup``: a bound on ||Dg(h)|| over the set (so a Lipschitz constant there: the set is convex);
- ``curvature``: a Lipschitz constant of h -> Dg(h) on the set (``inf`` when g is not C^1, e.g. ReLU), with
  per-token values for block-diagonal stages (LayerNorm, MLP);
- ``out_token``: the per-token radius of ``(1 - lambda)(h - h0) + F(h) - F(h0)`` (the caller adds lambda r_0);
- ``centre``: the exact ||Dg(h0)|| when it is cheap (block-diagonal stages), else None.

Block-diagonal stages (MLP sublayer, LayerNorm) are per-token maps, so their exact Jacobian at h0 is a stack of
D x D matrices: ``sup <= max_t (||Dg_t(h0)|| + kappa_t r_t)``, which is the exact local constant up to a term
linear in the radius. The attention sublayer is dense across tokens and uses :mod:`.attention_local`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from timm.layers import Mlp

from .attention_bound import attention_lipschitz
from .attention_local import AttentionLocal, local_attention
from .chain import Readout, Stage
from .constants import activation_curvature, activation_lipschitz, layernorm_output_radius, uncovered
from .layernorm_bound import layernorm_curvature, layernorm_gain, layernorm_jacobians, std_lower, token_std
from .spectral import linear_lipschitz, spectral_norm


@dataclass
class StageLocal:
    sup: torch.Tensor  # (B, K)
    curvature: torch.Tensor  # (B, K)
    token_curvature: torch.Tensor | None  # (B, K, N) block-diagonal stages only
    out_token: torch.Tensor  # (B, K, N)
    centre: torch.Tensor | None  # (B,)
    ln_gain: torch.Tensor  # (B, K, N) the stage's LayerNorm gains (for the factor table)
    std_lo: torch.Tensor  # (B, K, N) the variance lower bound used (as a std)
    ln_curvature: torch.Tensor  # (B, K, N) per-token curvature of the LayerNorm
    inner_lip: torch.Tensor | None = None  # (B, K) attention alone (LayerNorm-output space), attention stages
    inner_curvature: torch.Tensor | None = None  # (B, K) its Jacobian's Lipschitz constant there


def _ln_ball(stage_norm, h0, token_r, floor):
    d = stage_norm.normalized_shape[-1]
    std_lo = std_lower(token_std(h0), token_r, d, floor)
    return std_lo, layernorm_gain(stage_norm, std_lo), layernorm_curvature(stage_norm, std_lo)


def _ls_vector(stage: Stage, d: int, like: torch.Tensor) -> torch.Tensor:
    gamma = getattr(stage.ls_module, "gamma", None)
    if gamma is None:
        return torch.ones(d, dtype=torch.float64, device=like.device)
    return gamma.detach().double().to(like.device)


def _activation_derivative(act: torch.nn.Module, u: torch.Tensor) -> torch.Tensor:
    with torch.enable_grad():
        u = u.detach().clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(act(u).sum(), u)
    return grad.detach()


def _mlp_parts(mlp: Mlp, where: str) -> tuple[float, float, float, float]:
    """(||W2|| c1 ||W1||, ||W1||, ||W2||, c2 * row-spread of W1) for the MLP's curvature (see stage_local)."""
    if not isinstance(mlp, Mlp) or type(mlp).forward is not Mlp.forward:
        raise uncovered(mlp, where)
    w1 = mlp.fc1.weight.detach().double()
    n1, n2 = linear_lipschitz(mlp.fc1), linear_lipschitz(mlp.fc2)
    c1 = activation_lipschitz(mlp.act, f"{where}.act")
    c2 = activation_curvature(mlp.act)
    rows = w1.norm(dim=1)
    spread = min(rows.max().item() * n1, rows.pow(4).sum().sqrt().item())
    return n2 * c1 * n1, n1, n2, c2 * spread


def _mlp_local(stage: Stage, h0, token_r, std_lo, gain, kappa_ln) -> StageLocal:
    """Per-token: D_t = (1 - lam) I + diag(ls) W2 diag(phi'(u_t)) W1 J_LN(h_t), exact at h0."""
    mlp = stage.inner
    inner_lip, _, n2, curv_w = _mlp_parts(mlp, stage.name)
    h = h0.detach()
    z = stage.norm(h)
    u = mlp.fc1(z)
    dphi = _activation_derivative(mlp.act, u).double()  # (B, N, H)
    w1, w2 = mlp.fc1.weight.detach().double(), mlp.fc2.weight.detach().double()
    d = h.shape[-1]
    ls = _ls_vector(stage, d, dphi)
    jln = layernorm_jacobians(stage.norm, h)  # (B, N, D, D)
    inner = torch.einsum("oh,bnh,hi->bnoi", w2, dphi, w1)
    jac = ls[:, None] * (inner @ jln) + (1.0 - stage.lam) * torch.eye(d, dtype=torch.float64, device=h.device)
    centre_t = torch.linalg.matrix_norm(jac, 2)  # (B, N)
    ls_max = stage.ls
    # ||D_t(h) - D_t(h')|| <= ls (||W2|| c2 spread(W1) g_t^2 + ||W2|| c1 ||W1|| kappa_LN,t) ||h_t - h'_t||
    kappa_t = ls_max * (n2 * curv_w * gain.pow(2) + inner_lip * kappa_ln)
    first = (1.0 - stage.lam) + ls_max * inner_lip * gain
    sup_t = torch.minimum(first, centre_t[:, None, :] + kappa_t * token_r)
    return StageLocal(sup=sup_t.amax(-1), curvature=kappa_t.amax(-1), token_curvature=kappa_t,
                      out_token=sup_t * token_r, centre=centre_t.amax(-1), ln_gain=gain, std_lo=std_lo,
                      ln_curvature=kappa_ln)  # fmt: skip


def _norm_local(stage: Stage, h0, token_r, std_lo, gain, kappa_ln) -> StageLocal:
    centre_t = torch.linalg.matrix_norm(layernorm_jacobians(stage.norm, h0), 2)  # (B, N)
    sup_t = torch.minimum(gain, centre_t[:, None, :] + kappa_ln * token_r)
    return StageLocal(sup=sup_t.amax(-1), curvature=kappa_ln.amax(-1), token_curvature=kappa_ln,
                      out_token=sup_t * token_r, centre=centre_t.amax(-1), ln_gain=gain, std_lo=std_lo,
                      ln_curvature=kappa_ln)  # fmt: skip


def _global_attention(stage: Stage, n: int, gain: torch.Tensor):
    """The global lemma on the LayerNorm-output ball, shaped like :func:`local_attention`'s result."""
    glob = attention_lipschitz(stage.inner, n, layernorm_output_radius(stage.norm), stage.name).value
    full = torch.full_like(gain[..., 0], glob)
    inf = torch.full_like(full, math.inf)
    return AttentionLocal(lip=full * gain.amax(-1), lip_plain=full, curvature=inf, token_out=inf[..., None] * gain)


def _attn_local(stage: Stage, h0, token_r, total_r, std_lo, gain, kappa_ln, centre, localize) -> StageLocal:
    z0 = stage.norm(h0.detach())
    n = h0.shape[1]
    glob = attention_lipschitz(stage.inner, n, layernorm_output_radius(stage.norm), stage.name).value
    if localize:
        loc = local_attention(stage.inner, z0, gain * token_r, stage.is_causal, gains=gain)
    else:
        loc = _global_attention(stage, n, gain)
    g_max = gain.amax(-1)
    lip_f = stage.ls * torch.minimum(loc.lip, glob * g_max)
    plain = torch.clamp(loc.lip_plain, max=glob)
    curvature = stage.ls * (loc.curvature * g_max.pow(2) + plain * kappa_ln.amax(-1))
    sup = (1.0 - stage.lam) + lip_f
    if centre is not None:  # the exact ||Dg(h0)||: sup <= ||Dg(h0)|| + curvature * radius
        sup = torch.minimum(sup, (centre[:, None] + curvature * total_r).nan_to_num(nan=math.inf))
        lip_f = torch.minimum(lip_f, sup + (1.0 - stage.lam))  # ||ls J_F|| <= ||D|| + (1 - lambda)
    branch = torch.minimum(stage.ls * loc.token_out, (lip_f * total_r)[..., None])
    return StageLocal(sup=sup, curvature=curvature, token_curvature=None,
                      out_token=(1.0 - stage.lam) * token_r + branch, centre=centre, ln_gain=gain, std_lo=std_lo,
                      ln_curvature=kappa_ln, inner_lip=plain, inner_curvature=loc.curvature)  # fmt: skip


def stage_local(
    stage: Stage,
    h0: torch.Tensor,
    token_r: torch.Tensor,
    total_r: torch.Tensor,
    floor: torch.Tensor | None = None,
    *,
    centre: torch.Tensor | None = None,
    localize: bool = True,
) -> StageLocal:
    """Bounds of ``stage`` on the ball around h0 (B, N, D) with per-token radii (B, K, N) and total (B, K).

    ``floor`` is an independent per-token lower bound on the std of the stage's LayerNorm input (the box
    minimum for the first LayerNorm of an image model), valid on the same domain. ``centre`` is the exact
    Jacobian norm of an attention stage at h0 (B,) when the caller computed it (the research's dense pass);
    ``localize=False`` uses the global attention lemma instead of :mod:`.attention_local` (for ablations).
    """
    with torch.no_grad():
        token_r = torch.minimum(token_r.double(), total_r.double()[..., None])
        std_lo, gain, kappa_ln = _ln_ball(stage.norm, h0, token_r, floor)
        if stage.kind == "norm":
            return _norm_local(stage, h0, token_r, std_lo, gain, kappa_ln)
        if stage.kind == "mlp":
            return _mlp_local(stage, h0, token_r, std_lo, gain, kappa_ln)
        return _attn_local(stage, h0, token_r, total_r.double(), std_lo, gain, kappa_ln, centre, localize)


@dataclass
class ReadoutLocal:
    sup: torch.Tensor  # (B, K)
    curvature: torch.Tensor  # (B, K)


def _compose(lip_a, curv_a, lip_b, curv_b):
    """b o a: Lip = Lb La; Lip of the Jacobian <= kappa_b La^2 + Lb kappa_a."""
    return lip_b * lip_a, curv_b * lip_a.pow(2) + lip_b * curv_a


def w_norm(readout: Readout) -> float:
    return spectral_norm(readout.head.weight) if readout.head is not None else 1.0


def readout_local(readout: Readout, h0: torch.Tensor, token_r: torch.Tensor, total_r: torch.Tensor) -> ReadoutLocal:
    """Bounds of the readout (LayerNorm -> pool -> fc_norm -> head) on the ball around h0."""
    with torch.no_grad():
        token_r = torch.minimum(token_r.double(), total_r.double()[..., None])
        b, k = total_r.shape
        one = torch.ones(b, k, dtype=torch.float64, device=h0.device)
        lip, curv = one, torch.zeros_like(one)
        if readout.pool == "token":
            idx = readout.index % h0.shape[1]
            h, r = h0[:, idx : idx + 1], token_r[..., idx : idx + 1]
            r_in = r[..., 0]
            if readout.norm is not None:
                std_lo, gain, kap = _ln_ball(readout.norm, h, r, None)
                lip, curv, r = gain[..., 0], kap[..., 0], (gain * r)[..., 0]
                t = readout.norm(h[:, 0])
                if readout.fc_norm is None and readout.head is not None:
                    # exact Jacobian W J_LN(h0) at the centre, plus the curvature times the radius
                    w = readout.head.weight.detach().double()
                    centre = torch.linalg.matrix_norm(w @ layernorm_jacobians(readout.norm, h[:, 0]), 2)
                    both = torch.minimum(
                        lip * spectral_norm(readout.head.weight), centre[:, None] + w_norm(readout) * curv * r_in
                    )
                    return ReadoutLocal(sup=both, curvature=curv * w_norm(readout))
            else:
                t, r = h[:, 0], r_in
        elif readout.pool == "max":  # |max_t a_t - max_t b_t| <= max_t |a_t - b_t| per feature: 1-Lipschitz, not C^1
            h, r = h0[:, readout.start :], token_r[..., readout.start :]
            gain = torch.ones_like(r)
            if readout.norm is not None:
                _, gain, _ = _ln_ball(readout.norm, h, r, None)
                h = readout.norm(h)
            lip, curv = gain.amax(-1), torch.full_like(one, math.inf)
            r = torch.minimum((gain * r).pow(2).sum(-1).sqrt(), lip * total_r)
            t = h.amax(1)
        else:
            h = h0[:, readout.start :]
            r = token_r[..., readout.start :]
            n = h.shape[1]
            if readout.norm is not None:
                std_lo, gain, kap = _ln_ball(readout.norm, h, r, None)
                lip, curv = gain.pow(2).sum(-1).sqrt() / n, kap.amax(-1) / n
                r = (gain * r).sum(-1) / n
                h = readout.norm(h)
            else:
                lip, curv, r = one / math.sqrt(n), torch.zeros_like(one), r.sum(-1) / n
            t = h.mean(1)
        if readout.fc_norm is not None:
            std_lo, gain, kap = _ln_ball(readout.fc_norm, t[:, None], r[..., None], None)
            lip, curv = _compose(lip, curv, gain[..., 0], kap[..., 0])
        if readout.head is not None:
            w = spectral_norm(readout.head.weight)
            lip, curv = lip * w, curv * w
        return ReadoutLocal(sup=lip, curvature=curv)
