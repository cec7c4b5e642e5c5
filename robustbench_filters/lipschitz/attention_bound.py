"""Certified Lipschitz bound of multi-head attention on a bounded domain (notes/lipschitz.md §1.4(f), (g)).

Dot-product attention is *not* globally Lipschitz (Kim et al. 2021, Thm 3.1), so any bound needs a domain. We
use D_R = {X : ||x_j||_2 <= R for every token j}. In a pre-LN transformer the attention input is a LayerNorm
output, and every LN output token satisfies ||LN(x)_t|| <= max|gamma| sqrt(d) + ||beta|| for *all* x, so taking
R from the LN parameters makes the bound hold for every model input. D_R is convex, so a Jacobian bound on it is
a Lipschitz bound on it.

Per head, with s(x_i, x_j) = (W_Q x_i + b_Q).(W_K x_j + b_K) * scale, A = scale W_Q^T W_K and
c = scale W_K^T b_Q, the lemma of §1.4(f) gives (G_1 = ||A|| R, G_2 = ||A|| R + ||c||)

    Lip_{D_R}(head) <= ||W_V||_2 (sqrt(n) + R sqrt(2 (G_1^2 + n G_2^2))).

The same bound covers BSA: its Gaussian (or untied) position bias b_h(p_i, p_j) and the causal mask are added
to the logits but do not depend on X, so they change P and nothing the proof uses (see :func:`dp_head_bound`).

Multi-head (rule C3 or C2): min(||W_O|| sqrt(sum_h L_h^2), sum_h L~_h) where L~_h uses ||W_O^h W_V^h||. The
recalled Castin et al. (ICML 2024) bound sqrt(3) ||W_V|| (||A||^2 R^4 (4n+1) + n)^(1/2) is always >= the lemma
without query bias and is provided only as a cross-check (§1.4(e), [P]).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from timm.layers import Attention
from torch import nn

from ..models.bsa import BilateralAttention
from .constants import uncovered
from .spectral import spectral_norm


def dp_head_bound(n: int, radius: float, norm_a: float, norm_c: float, norm_v: float) -> float:
    """The §1.4(f) bound of one softmax head with query bias on D_R (any input-independent logit bias).

    The proof splits dF = P E W_V + Cov_P(v, ds). ||P||_2 <= sqrt(max column sum) <= sqrt(n) bounds the first
    term; std_P(v) <= ||W_V|| R and std_P(ds_i) <= G_1 ||e_i|| + G_2 (sum_j P_ij ||e_j||^2)^(1/2) bound the
    second. Nothing in it depends on an additive bias B_ij that does not depend on X (a causal -inf mask, a
    relative-position bias, BSA's Gaussian position kernel): such B changes P but not the facts used (unit row
    sums, column sums <= n, the gradients of the input-dependent score).
    """
    g1 = norm_a * radius
    g2 = norm_a * radius + norm_c
    return norm_v * (math.sqrt(n) + radius * math.sqrt(2.0 * (g1 * g1 + n * g2 * g2)))


def castin_bound(n: int, radius: float, norm_a: float, norm_v: float) -> float:
    """sqrt(3) ||W_V|| (||A||^2 R^4 (4n + 1) + n)^(1/2): Castin, Ablin, Peyre 2024, as recalled ([P], unverified).

    Valid without query bias; always >= :func:`dp_head_bound` with ``norm_c = 0`` (notes §1.4(f)).
    """
    return math.sqrt(3.0) * norm_v * math.sqrt(norm_a**2 * radius**4 * (4 * n + 1) + n)


@dataclass(frozen=True)
class HeadMatrices:
    """One head in the lemma's notation: score matrix A (d x d), query-bias vector c, value and out maps."""

    a: torch.Tensor
    c: torch.Tensor
    w_v: torch.Tensor
    w_ov: torch.Tensor  # W_O^h W_V^h, the head's value path through the output projection


@dataclass(frozen=True)
class AttentionBound:
    """The certified constant of one attention layer on D_R, with the pieces for the factor table."""

    value: float
    n: int
    radius: float
    per_head: tuple[float, ...]
    combine: str  # "concat" (||W_O|| sqrt(sum L_h^2)) or "sum" (sum_h L~_h), whichever is smaller
    norm_a: tuple[float, ...]
    norm_wv: tuple[float, ...]
    norm_wo: float
    castin: float | None  # cross-check, only when there is no query bias


def check_attention(module: nn.Module, where: str = "") -> None:
    """Covered: timm ``Attention`` and robfilt ``BilateralAttention`` without qk-norm, scale-norm or gating.

    Subclasses that override ``forward`` are rejected: their computation is unknown to the bound.
    """
    known = (Attention.forward, BilateralAttention.forward)
    if not isinstance(module, Attention) or type(module).forward not in known:
        raise uncovered(module, where)
    for part in ("q_norm", "k_norm", "norm"):
        sub = getattr(module, part)
        if not isinstance(sub, nn.Identity):
            raise uncovered(f"{type(module).__name__} with {part}={type(sub).__name__}", where)
    if getattr(module, "gate", None) is not None:
        raise uncovered(f"gated {type(module).__name__}", where)


def head_matrices(module: Attention) -> list[HeadMatrices]:
    """Slice timm's fused ``qkv`` (rows [q; k; v], head h at rows h*d_h:(h+1)*d_h of each) and ``proj``."""
    h, dh, attn_dim = module.num_heads, module.head_dim, module.attn_dim
    w = module.qkv.weight.detach().double()
    b = module.qkv.bias.detach().double() if module.qkv.bias is not None else torch.zeros(3 * attn_dim).double()
    w_o = module.proj.weight.detach().double()
    out = []
    for i in range(h):
        rows = slice(i * dh, (i + 1) * dh)
        w_q, w_k = w[:attn_dim][rows], w[attn_dim : 2 * attn_dim][rows]
        w_v = w[2 * attn_dim :][rows]
        b_q = b[:attn_dim][rows]
        a = module.scale * (w_q.T @ w_k)
        c = module.scale * (w_k.T @ b_q)
        out.append(HeadMatrices(a=a, c=c, w_v=w_v, w_ov=w_o[:, rows] @ w_v))
    return out


def attention_lipschitz(module: nn.Module, n: int, radius: float, where: str = "") -> AttentionBound:
    """Certified Lipschitz constant of ``module`` on sequences of n tokens with every token norm <= ``radius``."""
    check_attention(module, where)
    heads = head_matrices(module)
    norm_a = [spectral_norm(hm.a) for hm in heads]
    norm_c = [hm.c.norm().item() for hm in heads]
    norm_v = [spectral_norm(hm.w_v) for hm in heads]
    norm_o = spectral_norm(module.proj.weight)
    per_head = [dp_head_bound(n, radius, a, c, v) for a, c, v in zip(norm_a, norm_c, norm_v, strict=True)]
    concat = norm_o * math.sqrt(sum(x * x for x in per_head))
    summed = sum(
        dp_head_bound(n, radius, a, c, spectral_norm(hm.w_ov)) for a, c, hm in zip(norm_a, norm_c, heads, strict=True)
    )
    castin = None
    if max(norm_c) == 0.0:
        castin = norm_o * math.sqrt(
            sum(castin_bound(n, radius, a, v) ** 2 for a, v in zip(norm_a, norm_v, strict=True))
        )
    return AttentionBound(
        value=min(concat, summed),
        n=n,
        radius=radius,
        per_head=tuple(per_head),
        combine="concat" if concat <= summed else "sum",
        norm_a=tuple(norm_a),
        norm_wv=tuple(norm_v),
        norm_wo=norm_o,
        castin=castin,
    )
