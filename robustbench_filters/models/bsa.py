"""Bilateral Self-Attention (BSA).

Standard attention with additive positions (x_i = e_i + p_i) mixes content and position: q_i.k_j contains the
cross terms e_i.p_j and p_i.e_j. A bilateral filter instead multiplies a content (range) kernel by a
position-only (domain) kernel, so BSA computes, per head h,

    logit_ij = q_i.k_j / sqrt(d_h) + b_h(p_i, p_j)      (q, k from content tokens only)

with the position kernel ``gaussian`` (b = -||p_i - p_j||^2 / (2 sigma_h^2), sigma_h = softplus(theta_h)) or
``untied`` (b = (p_i U_Q).(p_j U_K) / sqrt(d_h), TUPE-style). These formulas are this project's formulation of
the principles in Abdullaev, Tkachenko & Nguyen, arXiv:2506.10371; every choice is a config field.

The bias goes into ``scaled_dot_product_attention`` as ``attn_mask`` so the fused kernels stay in use. The
module subclasses timm's ``Attention`` and keeps its parameter names (``qkv``, ``proj``), so stock DeiT weights
load into it.
"""

from __future__ import annotations

import math
from enum import Enum

import torch
import torch.nn.functional as F
from timm.layers import Attention
from torch import nn

from ..core.errors import RobfiltError


class PosKernel(str, Enum):
    """Position (domain) kernels of BSA."""

    GAUSSIAN = "gaussian"
    UNTIED = "untied"


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    fused: bool = True,
    dropout_p: float = 0.0,
) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + bias) v, on the fused SDPA kernel or the manual path.

    The manual path exists because fused SDPA has no forward-mode AD and no double backward, which the
    Lipschitz estimators need. Both paths compute the same function.
    """
    if fused:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout_p)
    weights = attention_weights(q, k, bias)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v


def attention_weights(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """The attention matrix softmax(q k^T / sqrt(d) + bias), shape (..., N, N)."""
    logits = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)
    if bias is not None:
        logits = logits + bias
    return logits.softmax(dim=-1)


def causal_bias(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Additive causal mask: 0 on and below the diagonal, -inf above."""
    return torch.full((n, n), float("-inf"), device=device, dtype=dtype).triu_(1)


def squared_distances(
    n: int,
    grid: tuple[int, int] | None,
    num_prefix_tokens: int,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """||p_i - p_j||^2 for N tokens: (row, col) on a patch grid, or the token index on a 1D sequence.

    Prefix tokens (CLS, distillation) have no position: their rows and columns are 0, so the Gaussian
    kernel gives them b = 0 to and from every token.
    """
    n_pos = n - num_prefix_tokens
    if grid is not None:
        rows, cols = grid
        if rows * cols != n_pos:
            raise RobfiltError(
                f"BSA got {n_pos} patch tokens for a {rows}x{cols} grid; build the model with the image size "
                "it is fed (img_size must match the input)."
            )
        r = torch.arange(rows, device=device, dtype=dtype).repeat_interleave(cols)
        c = torch.arange(cols, device=device, dtype=dtype).repeat(rows)
        coords = torch.stack([r, c], dim=-1)
    else:
        coords = torch.arange(n_pos, device=device, dtype=dtype)[:, None]
    d2 = (coords[:, None, :] - coords[None, :, :]).pow(2).sum(-1)
    if num_prefix_tokens:
        d2 = F.pad(d2, (num_prefix_tokens, 0, num_prefix_tokens, 0))
    return d2


def _inverse_softplus(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def initial_sigmas(sigma_range: tuple[float, float], num_heads: int) -> torch.Tensor:
    """Per-head widths spread geometrically over ``sigma_range``: local heads and global heads from the start."""
    lo, hi = (float(s) for s in sigma_range)
    if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)):
        raise RobfiltError(f"BSA sigma must be positive and finite, got {sigma_range}; pass e.g. bsa_sigma=(1, 8).")
    if num_heads == 1:
        return torch.tensor([lo])
    return torch.logspace(math.log10(lo), math.log10(hi), num_heads)


class BilateralAttention(Attention):
    """Multi-head self-attention with a bilateral (content x position) kernel; a drop-in timm ``attn_layer``.

    Position context (patch grid, prefix tokens) is set after construction with :meth:`configure`, because
    timm builds attention layers before it knows the patch grid. For the ``untied`` kernel, the learned
    absolute positions come from the owning model's ``pos_embed`` (held by reference, not registered, so
    state-dict keys match timm's).
    """

    pos_kernel: PosKernel = PosKernel.GAUSSIAN
    sigma_range: tuple[float, float] = (1.0, 8.0)

    def __init__(self, dim: int, num_heads: int = 8, **kwargs) -> None:
        super().__init__(dim, num_heads=num_heads, **kwargs)
        dd = {"device": kwargs.get("device"), "dtype": kwargs.get("dtype")}
        self.pos_kernel = PosKernel(self.pos_kernel)
        if self.pos_kernel is PosKernel.GAUSSIAN:
            theta = _inverse_softplus(initial_sigmas(self.sigma_range, num_heads))
            self.sigma_theta = nn.Parameter(theta.to(**{k: v for k, v in dd.items() if v is not None}))
        else:
            self.pos_q = nn.Linear(dim, self.attn_dim, bias=False, **dd)
            self.pos_k = nn.Linear(dim, self.attn_dim, bias=False, **dd)
        self.grid: tuple[int, int] | None = None
        self.num_prefix_tokens = 0
        self._pos_owner: list[nn.Module] = []  # list, so the owner is not registered as a submodule
        self._dist_cache: dict[tuple, torch.Tensor] = {}

    def configure(
        self,
        grid: tuple[int, int] | None = None,
        num_prefix_tokens: int = 0,
        pos_owner: nn.Module | None = None,
    ) -> None:
        """Set the position layout: a patch grid with prefix tokens (images) or ``grid=None`` (1D text)."""
        self.grid = tuple(grid) if grid is not None else None
        self.num_prefix_tokens = int(num_prefix_tokens)
        self._pos_owner = [pos_owner] if pos_owner is not None else []
        self._dist_cache.clear()

    @property
    def sigma(self) -> torch.Tensor:
        """Per-head Gaussian widths sigma_h = softplus(theta_h) > 0."""
        return F.softplus(self.sigma_theta)

    def position_bias(self, n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """b_h(p_i, p_j) for all heads, shape (H, N, N)."""
        if self.pos_kernel is PosKernel.GAUSSIAN:
            key = (n, self.grid, self.num_prefix_tokens, device, dtype)
            d2 = self._dist_cache.get(key)
            if d2 is None:
                d2 = squared_distances(n, self.grid, self.num_prefix_tokens, device, dtype)
                self._dist_cache[key] = d2
            sigma = self.sigma.to(dtype)
            return -d2 / (2 * sigma.pow(2))[:, None, None]
        if not self._pos_owner:
            raise RobfiltError("untied BSA needs learned positions; build it through create_model().")
        pos = self._pos_owner[0].pos_embed  # (1, N_max, C): ViT (prefix included) or LM learned positions
        if pos.shape[1] < n:
            raise RobfiltError(f"untied BSA has {pos.shape[1]} learned positions but got {n} tokens.")
        p = pos[0, :n].to(dtype)
        pq = self.pos_q(p).view(n, self.num_heads, self.head_dim).transpose(0, 1)
        pk = self.pos_k(p).view(n, self.num_heads, self.head_dim).transpose(0, 1)
        return (pq * self.scale) @ pk.transpose(-2, -1)

    def full_bias(
        self,
        n: int,
        device: torch.device,
        dtype: torch.dtype,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        """Position bias plus the causal mask and any user mask, ready for SDPA."""
        bias = self.position_bias(n, device, dtype)
        if is_causal:
            bias = bias + causal_bias(n, device, dtype)
        if attn_mask is not None:
            if attn_mask.dtype == torch.bool:
                attn_mask = torch.zeros_like(attn_mask, dtype=dtype).masked_fill_(~attn_mask, float("-inf"))
            bias = bias + attn_mask
        return bias

    def qkv_heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Split the input into per-head q, k, v of shape (B, H, N, d_h)."""
        b, n, _ = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        return self.q_norm(q), self.k_norm(k), v

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
    ) -> torch.Tensor:
        b, n, _ = x.shape
        gate = self.gate(x).sigmoid() if self.gate is not None else None
        q, k, v = self.qkv_heads(x)
        # (1, H, N, N): the CPU fused kernel accepts only 4-D masks, and it broadcasts over the batch
        bias = self.full_bias(n, x.device, q.dtype, attn_mask, is_causal).unsqueeze(0)
        out = attention(q, k, v, bias, fused=self.fused_attn, dropout_p=self.attn_drop.p if self.training else 0.0)
        out = out.transpose(1, 2).reshape(b, n, self.attn_dim)
        out = self.norm(out)
        if gate is not None:
            out = out * gate
        return self.proj_drop(self.proj(out))


def bsa_layer(pos_kernel: str = "gaussian", sigma_range: tuple[float, float] = (1.0, 8.0)) -> type[Attention]:
    """A BSA class with its hyper-parameters bound (timm's ``attn_layer`` needs a class, not a partial)."""
    kernel = PosKernel(pos_kernel)
    initial_sigmas(sigma_range, 1)  # validate early, with a clear message
    return type(
        "BilateralAttention",
        (BilateralAttention,),
        {"pos_kernel": kernel, "sigma_range": tuple(float(s) for s in sigma_range)},
    )


def attention_probs(module: nn.Module, x: torch.Tensor, is_causal: bool = False) -> torch.Tensor:
    """The attention matrix (B, H, N, N) of a timm ``Attention`` or a BSA layer for input ``x``.

    Recomputed from the layer's weights (fused kernels never materialise it); used for attention maps.
    """
    b, n, _ = x.shape
    qkv = module.qkv(x).reshape(b, n, 3, module.num_heads, module.head_dim).permute(2, 0, 3, 1, 4)
    q, k, _ = qkv.unbind(0)
    q, k = module.q_norm(q), module.k_norm(k)
    if isinstance(module, BilateralAttention):
        bias = module.full_bias(n, x.device, q.dtype, None, is_causal)
    else:
        bias = causal_bias(n, x.device, q.dtype) if is_causal else None
    return attention_weights(q, k, bias)
