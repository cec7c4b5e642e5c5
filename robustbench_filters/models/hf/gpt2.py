"""BSA and GRC for Hugging Face GPT-2 (``GPT2LMHeadModel``), with this project's formulation (docs/design.md).

GPT-2 adds learned absolute positions to the tokens (``x_i = e_i + p_i``, ``wpe``), so its attention logits hold
the content-position cross terms e_i.p_j and p_i.e_j that BSA removes. The converted model

- stops adding ``wpe`` to the tokens (:class:`NoAdditivePositions` keeps the table, so state dicts keep their keys
  and the ``untied`` kernel can read it);
- computes, per head h, ``logit_ij = q_i.k_j * scaling + b_h(i, j)`` with q, k from content only
  (:class:`BSAGPT2Attention`), under the causal mask:
  ``gaussian``: ``b = -(i - j)^2 / (2 sigma_h^2)``, ``sigma_h = softplus(theta_h)`` learnable, initial widths
  spread over ``bsa_sigma``; ``untied``: ``b = (p_i U_Q^h).(p_j U_K^h) / sqrt(d_h)`` with p the ``wpe`` rows and
  U_Q, U_K initialised to the layer's own query and key projections, so the first bias is exactly the pretrained
  position-position term and only the cross terms are gone;
- with GRC, boosts every residual sublayer (:class:`GRCGPT2Block`, :mod:`.boost`).

The modules keep GPT-2's parameter names (``c_attn``, ``c_proj``, ``ln_1`` ...); conversion swaps the classes of
the existing modules in place (as ``torch.nn.utils.parametrize`` does) and adds ``sigma_theta`` or
``pos_q``/``pos_k`` and ``grc_lambda``/``grc_logit``. Attention runs on SDPA (fused) unless the model's config says
``eager``, which is the manual path the Lipschitz estimators need. Cross-attention configs are refused.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2Block

from ...core.errors import RobfiltError
from ..bsa import PosKernel, initial_sigmas
from ..config import FilterConfig
from ..grc import boost
from .boost import Y0, BoostedBlock


class NoAdditivePositions(nn.Embedding):
    """GPT-2's position table, no longer added to the tokens: its forward returns zeros of the right shape."""

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.weight.new_zeros(*position_ids.shape, self.embedding_dim)


def _additive(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, float("-inf"))
    return mask.to(dtype)


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor, scaling: float, fused: bool, dropout: float
) -> torch.Tensor:
    """softmax(q k^T * scaling + bias) v on SDPA (fused) or the manual path; both compute the same function."""
    if fused:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, scale=scaling)
    weights = ((q @ k.transpose(-2, -1)) * scaling + bias).softmax(dim=-1)
    return F.dropout(weights, p=dropout) @ v


class BSAGPT2Attention(GPT2Attention):
    """GPT-2 self-attention with a bilateral kernel: content logits plus a position-only bias (no cross terms)."""

    pos_kernel: PosKernel
    _positions: list[nn.Embedding]

    def setup_bsa(self, settings: FilterConfig, positions: nn.Embedding) -> None:
        """Add the kernel's parameters to a converted layer (same dtype and device as its weights)."""
        w = self.c_attn.weight
        self.pos_kernel = PosKernel(settings.pos_kernel)
        self._positions = [positions]  # a list, so the table is not registered twice
        if self.pos_kernel is PosKernel.GAUSSIAN:
            sigma = initial_sigmas(settings.bsa_sigma, self.num_heads).to(device=w.device, dtype=w.dtype)
            self.sigma_theta = nn.Parameter(sigma + torch.log(-torch.expm1(-sigma)))  # inverse softplus
        else:
            c = self.embed_dim
            self.pos_q = nn.Linear(c, c, bias=False, device=w.device, dtype=w.dtype)
            self.pos_k = nn.Linear(c, c, bias=False, device=w.device, dtype=w.dtype)
            with torch.no_grad():  # Conv1D computes x @ W: columns [0, C) are the queries, [C, 2C) the keys
                self.pos_q.weight.copy_(w[:, :c].T)
                self.pos_k.weight.copy_(w[:, c : 2 * c].T)

    @property
    def sigma(self) -> torch.Tensor:
        """Per-head Gaussian widths sigma_h = softplus(theta_h) > 0."""
        return F.softplus(self.sigma_theta)

    def position_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """b_h(i, j) for query positions (B, Tq) and key positions (Tk,): shape (B, H, Tq, Tk)."""
        if self.pos_kernel is PosKernel.GAUSSIAN:
            d2 = (q_pos[:, :, None] - k_pos[None, None, :]).to(torch.float32).pow(2)
            return (-d2[:, None] / (2 * self.sigma.float().pow(2))[None, :, None, None]).to(dtype)
        table = self._positions[0].weight
        b, tq = q_pos.shape
        pq = self.pos_q(table[q_pos]).view(b, tq, self.num_heads, self.head_dim).transpose(1, 2)
        pk = self.pos_k(table[k_pos]).view(len(k_pos), self.num_heads, self.head_dim).transpose(0, 1)
        return ((pq * self.head_dim**-0.5) @ pk.transpose(-2, -1)).to(dtype)

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        cache: object | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        output_attentions: bool | None = False,
        **kwargs: object,
    ) -> tuple[torch.Tensor, None]:
        if encoder_hidden_states is not None:
            raise RobfiltError("BSA GPT-2 attention has no cross-attention; convert decoder-only GPT-2 models.")
        q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (*q.shape[:-1], -1, self.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx, kwargs=kwargs)  # type: ignore[attr-defined]
        tq, tk = q.shape[-2], k.shape[-2]
        k_pos = torch.arange(tk, device=q.device)
        q_pos = kwargs.get("position_ids")
        q_pos = k_pos[tk - tq :][None] if q_pos is None else q_pos.to(q.device)  # type: ignore[union-attr]
        bias = self.position_bias(q_pos, k_pos, q.dtype)
        bias = bias.masked_fill(k_pos[None, None, None, :] > q_pos[:, None, :, None], float("-inf"))
        if attention_mask is not None:
            bias = bias + _additive(attention_mask, q.dtype)
        fused = self.config._attn_implementation != "eager"
        out = attend(q, k, v, bias, self.scaling, fused, self.attn_dropout.p if self.training else 0.0)
        out = out.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.resid_dropout(self.c_proj(out)), None


class GRCGPT2Block(BoostedBlock, GPT2Block):
    """A GPT-2 block with the boosting residual on attention (and MLP): Y + F(LN(Y)) + lambda (Y_0 - Y)."""

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        cache: object | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        use_cache: bool | None = False,
        **kwargs: object,
    ) -> torch.Tensor:
        if encoder_hidden_states is not None:
            raise RobfiltError("GRC GPT-2 blocks have no cross-attention; convert decoder-only GPT-2 models.")
        y0 = self.grc_y0(hidden_states)
        lam = self.grc_lambdas().to(hidden_states.dtype)
        attn_out, _ = self.attn(
            self.ln_1(hidden_states), cache=cache, attention_mask=attention_mask, use_cache=use_cache, **kwargs
        )
        x = boost(hidden_states, attn_out, y0, lam[0])
        mlp_out = self.mlp(self.ln_2(x))
        return boost(x, mlp_out, y0, lam[1]) if lam.numel() == 2 else x + mlp_out


def _swap(module: nn.Module, base: type, cls: type, what: str) -> None:
    if type(module) is not base:
        raise RobfiltError(f"{what} is a {type(module).__name__}, not a stock {base.__name__}; cannot convert it.")
    module.__class__ = cls


def convert_gpt2(model: nn.Module, settings: FilterConfig) -> None:
    """Convert a ``GPT2LMHeadModel`` in place to BSA and/or GRC (see the module docstring)."""
    if getattr(model.config, "add_cross_attention", False):
        raise RobfiltError("GPT-2 models with cross-attention cannot be converted; convert decoder-only GPT-2.")
    body = model.transformer
    if settings.bsa:
        wpe = body.wpe
        _swap(wpe, nn.Embedding, NoAdditivePositions, "transformer.wpe")
        for i, block in enumerate(body.h):
            _swap(block.attn, GPT2Attention, BSAGPT2Attention, f"transformer.h.{i}.attn")
            block.attn.setup_bsa(settings, wpe)
    if settings.grc:
        y0 = Y0()
        for i, block in enumerate(body.h):
            _swap(block, GPT2Block, GRCGPT2Block, f"transformer.h.{i}")
            block.setup_grc(i, settings, y0, body.wte.weight)


__all__ = ["BSAGPT2Attention", "GRCGPT2Block", "NoAdditivePositions", "attend", "convert_gpt2"]
