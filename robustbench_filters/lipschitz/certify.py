"""Certified upper bounds: the global constant and the local constant on a ball B(x0, rho) (notes §1.1, §1.5).

One pass over a batch does three things at once, so they cannot drift apart:

1. it recomputes the model's forward layer by layer (the ball centres h_l(x0)), and checks the result against
   the model's own output: a model whose forward differs from the covered structure is refused, never
   bounded silently wrong;
2. it composes the **global** constant from exact per-layer constants (float64 SVDs, LayerNorm
   max|gamma|/sqrt(eps), GELU 1.1289..., attention on the LayerNorm ball);
3. it propagates the **local** constant L_{0->l}(x0, rho) for several radii rho at once. The image of the ball
   after layer l lies in B(h_l(x0), r_l) with r_l = L_{0->l} rho; on that convex ball every token's std is at
   least sigma_lo = max(sigma_t(h_l(x0)) - r_l / sqrt(d), 0), so LayerNorm is max|gamma|/sqrt(sigma_lo^2 + eps)-
   Lipschitz there. Every local factor is <= its global one, hence local <= global.

Residual sublayers compose with rule (C4): 1 + L_F. Boosting sublayers Y <- (1 - lambda) Y + F(LN(Y)) + lambda Y_0
compose with rule (C5), tracking the pair (L for Y_l, L_E for Y_0):

    L_{l+1} <= (1 - lambda + L_F) L_l + lambda L_E.

The c Y_0 term adds nothing to a block taken in isolation (Y_0 fixed), which is what the per-block constants
of the profile use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from ..errors import RobfiltError
from ..family import Family
from ..models.lm import CausalLM
from ..models.normalize import get_normalizer
from .attention_bound import attention_lipschitz
from .compose import residual_step
from .constants import (
    check_layernorm,
    layernorm_lipschitz,
    layernorm_output_radius,
    mean_pool_lipschitz,
    normalizer_lipschitz,
    uncovered,
)
from .layers import (
    _check_block,
    _is_identity_in_eval,
    _layerscale,
    _mlp_lipschitz,
    _stack_lambdas,
    _sublayer,
)
from .spectral import conv_lipschitz, linear_lipschitz
from .target import Target


@dataclass
class BlockRecord:
    """One transformer block as the trace saw it: enough to re-run the block map for the profile."""

    index: int
    name: str
    module: nn.Module
    hidden: torch.Tensor  # block input h_l(x0), (B, N, D)
    y0: torch.Tensor | None  # Y_0 for boosting blocks (held fixed in the block map)
    lambdas: tuple[torch.Tensor | None, torch.Tensor | None]  # (attention, MLP); None = plain residual
    is_causal: bool
    global_upper: float  # constant of x -> block(x) on all inputs
    local_upper: torch.Tensor  # (B,) constant of the block map on B(h_l(x0), r_l), r_l = L_{0->l}(x0, rho) rho


@dataclass
class BoundTrace:
    """Certified constants for one batch. ``local_upper[:, k]`` is valid on B(x0, rhos[k])."""

    output: torch.Tensor  # (B, m) the recomputed forward
    global_upper: float
    rhos: torch.Tensor  # (K,)
    local_upper: torch.Tensor  # (B, K) float64
    blocks: list[BlockRecord] = field(default_factory=list)
    factors: list[dict] = field(default_factory=list)  # per-layer global constants, in order
    local_detail: object | None = None  # the stage-wise LocalBounds behind local_upper (None: not covered)


class _Propagator:
    """Carries L_global (a float) and L_local (B, K) through the layers and records the factor table."""

    def __init__(self, batch: int, rhos: torch.Tensor, first_floor: torch.Tensor | None = None) -> None:
        self.rhos = rhos.double()
        self.glob = 1.0
        self.loc = torch.ones(batch, len(rhos), dtype=torch.float64, device=rhos.device)
        self.factors: list[dict] = []
        # per-token lower bound on the first LayerNorm's input std over the input box (images), used once
        self.first_floor = first_floor

    def record(self, layer: str, kind: str, value: float, detail: str = "", cumulative: bool = False) -> None:
        self.factors.append(
            {"layer": layer, "kind": kind, "value": float(value), "detail": detail,
             "cumulative": self.glob if cumulative else None}
        )  # fmt: skip

    def scale(self, value: float, layer: str, kind: str, detail: str = "") -> None:
        """An input-independent constant (linear map, activation, pooling, normaliser)."""
        self.glob *= value
        self.loc = self.loc * value
        self.record(layer, kind, value, detail, cumulative=True)

    def radius(self, loc: torch.Tensor | None = None) -> torch.Tensor:
        return (self.loc if loc is None else loc) * self.rhos

    def layernorm(self, norm: nn.Module, centre: torch.Tensor, radius: torch.Tensor, where: str):
        """(global, local (B, K)) constants of ``norm`` on all inputs / on B(centre, radius) per (sample, rho)."""
        check_layernorm(norm, where)
        d = norm.normalized_shape[-1]
        h = centre.detach().double().reshape(centre.shape[0], -1, d)
        sigma = h.var(dim=-1, unbiased=False).sqrt()  # (B, N)
        sigma_lo = (sigma[:, None, :] - radius[:, :, None] / math.sqrt(d)).clamp_min(0.0)  # (B, K, N)
        floor = self.first_floor
        self.ln_detail = f"max|gamma|/sqrt(eps), eps={norm.eps:g}"
        glob = float(layernorm_lipschitz(norm))
        if floor is not None and floor.shape[-1] == sigma.shape[-1]:
            self.first_floor = None  # only the first LayerNorm sees the affine embedding
            sigma_lo = torch.maximum(sigma_lo, floor.double().to(sigma_lo.device)[None, None, :])
            glob = float(layernorm_lipschitz(norm, floor.min().item()))
            self.ln_detail = f"max|gamma|/sqrt(min var over the input box + eps), min std={floor.min().item():.4g}"
        local = layernorm_lipschitz(norm, sigma_lo.amin(dim=-1))
        return glob, local

    def apply_layernorm(self, norm: nn.Module, centre: torch.Tensor, where: str) -> None:
        g, loc = self.layernorm(norm, centre, self.radius(), where)
        self.glob *= g
        self.loc = self.loc * loc
        self.record(where, "layernorm", g, self.ln_detail, cumulative=True)


def _trace_blocks(stack: nn.Module, t: torch.Tensor, prop: _Propagator, is_causal: bool, prefix: str):
    """Propagate through a (boosting) block stack; returns the output and the block records."""
    lambdas = _stack_lambdas(stack, len(stack), t.dtype)
    grc = any(lam[0] is not None for lam in lambdas)
    y0 = t if grc else None
    e_glob, e_loc = prop.glob, prop.loc.clone()  # L_E: the constant of the map input -> Y_0
    records: list[BlockRecord] = []
    n = t.shape[1]
    for i, (blk, (la, lm)) in enumerate(zip(stack, lambdas, strict=True)):
        where = f"{prefix}.{i}"
        _check_block(blk, where)
        r1 = layernorm_output_radius(blk.norm1)
        attn = attention_lipschitz(blk.attn, n, r1, f"{where}.attn")
        ls1, ls2 = _layerscale(blk.ls1, f"{where}.ls1"), _layerscale(blk.ls2, f"{where}.ls2")
        mlp, mlp_detail = _mlp_lipschitz(blk.mlp, f"{where}.mlp")
        a_lam, m_lam = (float(la) if la is not None else 0.0), (float(lm) if lm is not None else 0.0)
        records_in = t
        r_in = prop.radius()  # (B, K): the block input lies in B(h_l(x0), r_in) for x in B(x0, rho)
        # attention sublayer
        ln1_g, ln1_l = prop.layernorm(blk.norm1, t, r_in, f"{where}.norm1")
        fa_g, fa_l = ls1 * attn.value * ln1_g, ls1 * attn.value * ln1_l
        prop.record(f"{where}.norm1", "layernorm", ln1_g, prop.ln_detail)
        prop.record(
            f"{where}.attn", "attention", attn.value,
            f"notes 1.4(f) on ||x_t|| <= R={r1:.4g}, n={n}, combine={attn.combine}"
            + (f", castin={attn.castin:.4g}" if attn.castin is not None else ""),
        )  # fmt: skip
        a = blk.drop_path1(blk.ls1(blk.attn(blk.norm1(t), is_causal=is_causal)))
        mid = _sublayer(t, a, y0, la)
        prop.glob = residual_step(prop.glob, fa_g, a_lam, e_glob)
        prop.loc = residual_step(prop.loc, fa_l, a_lam, e_loc)
        prop.record(f"{where}.attn_residual", "residual", 1.0 - a_lam + fa_g,
                    f"(1 - lambda) + L_F, lambda={a_lam:.4g}", cumulative=True)  # fmt: skip
        # MLP sublayer
        ln2_g, ln2_l = prop.layernorm(blk.norm2, mid, prop.radius(), f"{where}.norm2")
        fm_g, fm_l = ls2 * mlp * ln2_g, ls2 * mlp * ln2_l
        prop.record(f"{where}.norm2", "layernorm", ln2_g, prop.ln_detail)
        prop.record(f"{where}.mlp", "mlp", mlp, mlp_detail)
        m = blk.drop_path2(blk.ls2(blk.mlp(blk.norm2(mid))))
        out = _sublayer(mid, m, y0, lm)
        # the block in isolation (Y_0 fixed) on B(h_l(x0), r_in): its midpoint moves by at most
        # (1 - lambda + L_F) r_in, which sets the second LayerNorm's local ball
        _, ln2_iso = prop.layernorm(blk.norm2, mid, (1.0 - a_lam + fa_l) * r_in, f"{where}.norm2")
        block_loc = (1.0 - a_lam + fa_l) * (1.0 - m_lam + ls2 * mlp * ln2_iso)
        block_glob = (1.0 - a_lam + fa_g) * (1.0 - m_lam + fm_g)
        prop.glob = residual_step(prop.glob, fm_g, m_lam, e_glob)
        prop.loc = residual_step(prop.loc, fm_l, m_lam, e_loc)
        prop.record(f"{where}.mlp_residual", "residual", 1.0 - m_lam + fm_g,
                    f"(1 - lambda) + L_F, lambda={m_lam:.4g}", cumulative=True)  # fmt: skip
        prop.record(where, "block", block_glob, "block map with Y_0 fixed (profile constant)")
        records.append(
            BlockRecord(
                index=i, name=where, module=blk, hidden=records_in.detach(), y0=y0, lambdas=(la, lm),
                is_causal=is_causal, global_upper=block_glob, local_upper=block_loc[:, 0],
            )
        )  # fmt: skip
        t = out
    return t, records


def _trace_vit(model: VisionTransformer, x: torch.Tensor, prop: _Propagator):
    """timm VisionTransformer (DeiT): normaliser -> patch conv -> tokens -> blocks -> norm -> pool -> head."""
    if getattr(model, "attn_pool", None) is not None:
        raise uncovered(model.attn_pool, "attn_pool")
    if getattr(model, "head_dist", None) is not None:
        raise uncovered("distilled DeiT head", "head_dist")
    if getattr(model, "dynamic_img_size", False):
        raise uncovered("VisionTransformer with dynamic_img_size", "patch_embed")
    pe = model.patch_embed
    norm = get_normalizer(model)  # the root's pre-hook normaliser: model(x) runs it before the patch embedding
    if norm is not None:
        prop.scale(normalizer_lipschitz(norm.std), "input_norm", "normalizer", "max_c 1/std_c")
        x = norm(x)
    if not isinstance(pe.norm, nn.Identity):
        raise uncovered(pe.norm, "patch_embed.norm")
    kh, kw = pe.proj.kernel_size
    exact = (kh, kw) == tuple(pe.proj.stride) and tuple(pe.proj.padding) == (0, 0)
    prop.scale(
        conv_lipschitz(pe.proj, "patch_embed.proj"), "patch_embed.proj", "patch_embed",
        "||W.reshape(C_out, C_in k k)||_2 (non-overlapping: exact)" if exact else "sqrt(overlap) ||W_mat||_2",
    )  # fmt: skip
    t = model.patch_embed(x)
    # prefix tokens are constants and positions a constant shift: both 1-Lipschitz in the input
    t = model._pos_embed(t)
    for part in ("pos_drop", "patch_drop"):
        if not _is_identity_in_eval(getattr(model, part)):
            raise uncovered(getattr(model, part), part)
    t = model.patch_drop(t)
    if not isinstance(model.norm_pre, nn.Identity):
        prop.apply_layernorm(model.norm_pre, t, "norm_pre")
    t = model.norm_pre(t)
    t, records = _trace_blocks(model.blocks, t, prop, is_causal=False, prefix="blocks")
    if not isinstance(model.norm, nn.Identity):
        prop.apply_layernorm(model.norm, t, "norm")
    t = model.norm(t)
    pool = model.global_pool
    if pool == "token":
        prop.scale(1.0, "pool", "pool", "CLS token selection")
    elif pool == "avg":
        n = t.shape[1] if model.pool_include_prefix else t.shape[1] - model.num_prefix_tokens
        prop.scale(mean_pool_lipschitz(n), "pool", "pool", f"mean over {n} tokens: 1/sqrt(n)")
    elif pool == "max":
        prop.scale(1.0, "pool", "pool", "max over tokens (1-Lipschitz per feature)")
    else:
        raise uncovered(f"global_pool={pool!r}", "pool")
    t = model.pool(t)
    if not isinstance(model.fc_norm, nn.Identity):
        prop.apply_layernorm(model.fc_norm, t[:, None, :], "fc_norm")
    t = model.head_drop(model.fc_norm(t))
    if isinstance(model.head, nn.Linear):
        prop.scale(linear_lipschitz(model.head), "head", "linear", "||W_head||_2")
    elif not isinstance(model.head, nn.Identity):
        raise uncovered(model.head, "head")
    return model.head(t), records


def _trace_lm(model: CausalLM, emb: torch.Tensor, prop: _Propagator):
    """CausalLM from token embeddings: (+ positions) -> causal blocks -> norm -> tied head -> last position."""
    t = emb
    if model.add_positions:
        t = t + model.pos_embed[:, : t.shape[1]]  # a constant shift: 1-Lipschitz
    t = model.drop(t)
    t, records = _trace_blocks(model.blocks, t, prop, is_causal=True, prefix="blocks")
    prop.apply_layernorm(model.norm, t, "norm")
    t = model.norm(t)
    prop.scale(linear_lipschitz(model.lm_head), "lm_head", "linear", "||W_te||_2 (tied)")
    prop.scale(1.0, "last_position", "select", "next-token logits at the last position")
    return model.lm_head(t)[:, -1, :], records


def _trace_generic(model: nn.Module, x: torch.Tensor, prop: _Propagator):
    """Plain Sequential stacks of the layers in :func:`.coverage.generic_layer_lipschitz` (product rule)."""
    from .coverage import flatten_sequential, generic_layer_lipschitz

    t = x
    for name, layer in flatten_sequential(model):
        where = name or type(layer).__name__
        constant = generic_layer_lipschitz(layer, t, where)
        if constant is None:
            prop.apply_layernorm(layer, t, where)
        elif constant[1] != "reshape":
            prop.scale(constant[0], where, constant[1], constant[2])
        t = layer(t)
    return t.reshape(t.shape[0], -1), []


def _check_hooks(model: nn.Module) -> None:
    """Forward hooks change what a module computes behind the bound's back; only the input normaliser is known."""
    for name, module in model.named_modules():
        for hook in [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]:
            if getattr(hook, "__name__", "") != "_normalize_hook":
                raise uncovered(f"forward hook {getattr(hook, '__name__', type(hook).__name__)}", name or "model")


def trace_bounds(
    target: Target,
    x: torch.Tensor,
    rhos: torch.Tensor | list[float],
    *,
    improved: bool = True,
    options=None,
) -> BoundTrace:
    """Global and local certified constants for the batch ``x`` (already in the target's input space).

    With ``improved`` (default) the first LayerNorm of an image model uses its minimum variance over the input
    box (globally and locally), and the local constants are the minimum of this layer-by-layer trace and the
    stage-wise bounds of :func:`.local_bound.local_bounds` (per-token variance bounds, localised attention;
    ``options`` is its :class:`.local_bound.LocalOptions`, default without the slower second-order pass). Every
    candidate is certified on B(x0, rho) (intersected with the [0, 1] box for images), so their minimum is.

    Raises :class:`RobfiltError` naming the first layer the bounds do not cover, or when the recomputed forward
    does not reproduce the model's output.
    """
    rhos = torch.as_tensor(rhos, dtype=torch.float64, device=x.device).reshape(-1)
    model = target.model
    if model.training:
        raise RobfiltError(f"{target.name} is in training mode (dropout on); call model.eval() or use make_target().")
    _check_hooks(model)
    from .coverage import check_certifiable

    check_certifiable(target, x)
    from .local_bound import chain_and_floor

    chain, floor = chain_and_floor(target, x, options) if improved else (None, None)
    prop = _Propagator(x.shape[0], rhos, first_floor=floor)
    with torch.no_grad():
        if isinstance(model, VisionTransformer):
            out, records = _trace_vit(model, x, prop)
        elif target.family is Family.LM:
            out, records = _trace_lm(model, x, prop)
        else:
            out, records = _trace_generic(model, x, prop)
        expected = target(x)
    tol = 1e-4 if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
    if out.shape != expected.shape or not torch.allclose(
        out, expected, rtol=tol, atol=tol * (1 + expected.abs().max())
    ):
        raise RobfiltError(
            f"{target.name}: the layer-by-layer forward used for the bound does not reproduce the model output "
            "(patched forward or unsupported wiring); the certified bound would be wrong, so none is given."
        )
    local, detail = prop.loc, None
    if chain is not None:
        from .local_bound import LocalOptions, local_bounds

        detail = local_bounds(target, x, rhos, options=options or LocalOptions(taylor=False), chain=chain)
        local = torch.minimum(local, detail.local)
        per_block = detail.block_local()
        for rec in records:
            if rec.index in per_block:
                rec.local_upper = torch.minimum(rec.local_upper, per_block[rec.index][:, 0])
    local = local.clamp_max(prop.glob)
    for rec in records:
        rec.local_upper = rec.local_upper.clamp_max(rec.global_upper)
    return BoundTrace(
        output=expected, global_upper=prop.glob, rhos=rhos, local_upper=local,
        blocks=records, factors=prop.factors, local_detail=detail,
    )  # fmt: skip


def margins(output: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(predicted class, top-1 minus top-2 logit) per sample."""
    top = output.detach().double().topk(2, dim=1)
    return top.indices[:, 0], top.values[:, 0] - top.values[:, 1]


def certified_radius(margin: torch.Tensor, local_upper: torch.Tensor, rhos: torch.Tensor) -> torch.Tensor:
    """Largest certified l2 radius: max_k min(rho_k, margin / (sqrt(2) L(x0, rho_k))).

    What is certified: for every delta with ||delta||_2 < radius, argmax f(x0 + delta) = argmax f(x0) (the
    predicted class, not the label). Proof: on B(x0, rho_k) the logits move by ||f(x0+delta) - f(x0)|| <= L_k
    ||delta||, and f_y - f_j changes by at most sqrt(2) times that (Tsuzuku et al. 2018 margin certificate).
    Each k gives a valid radius, so their maximum is valid too.
    """
    per_rho = torch.minimum(rhos[None, :], margin[:, None] / (math.sqrt(2.0) * local_upper))
    return per_rho.amax(dim=1)
