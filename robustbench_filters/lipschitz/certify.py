"""Certified upper bounds: the global constant and the local constant on a ball B(x0, rho) (notes §1.1, §1.5).

One walk of the model's :class:`.chain.Chain` per batch does three things at once, so they cannot drift apart:

1. it recomputes the model's forward stage by stage (the ball centres h_l(x0)), and checks the result against
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

The local constant reported is the minimum of this layer-by-layer propagation and the stage-wise bound of
:mod:`.local_bound` (per-token variance bounds, localised attention, the input box), each certified on the ball.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ..core.errors import RobfiltError
from .attention_bound import attention_lipschitz
from .chain import Chain, Stage, build_chain
from .compose import residual_step
from .constants import check_layernorm, layernorm_lipschitz, layernorm_output_radius, mean_pool_lipschitz
from .coverage import generic_layer_lipschitz
from .layers import _mlp_lipschitz
from .local_bound import LocalBounds, check_forward, first_norm_floor, stagewise_bounds
from .spectral import linear_lipschitz
from .target import Target

#: the stage-wise local bound merged into the trace: (target, x, rhos, chain, first-LayerNorm floor) -> bounds
LocalFn = Callable[[Target, torch.Tensor, torch.Tensor, Chain, torch.Tensor | None], LocalBounds]


@dataclass
class BlockRecord:
    """One transformer block as the trace saw it: enough to re-run the block map for the profile."""

    index: int
    name: str
    stages: tuple[Stage, Stage]  # the attention and MLP sublayers of the chain
    hidden: torch.Tensor  # block input h_l(x0), (B, N, D)
    y0: torch.Tensor | None  # Y_0 for boosting blocks (held fixed in the block map)
    global_upper: float  # constant of x -> block(x) on all inputs
    local_upper: torch.Tensor  # (B,) constant of the block map on B(h_l(x0), r_l), r_l = L_{0->l}(x0, rho) rho

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """The block map h -> block(h) with Y_0 held fixed."""
        attn, mlp = self.stages
        return mlp.forward(attn.forward(h, self.y0), self.y0)


@dataclass
class BoundTrace:
    """Certified constants for one batch. ``local_upper[:, k]`` is valid on B(x0, rhos[k])."""

    output: torch.Tensor  # (B, m) the model's output
    global_upper: float
    rhos: torch.Tensor  # (K,)
    local_upper: torch.Tensor  # (B, K) float64
    blocks: list[BlockRecord] = field(default_factory=list)
    factors: list[dict] = field(default_factory=list)  # per-layer global constants, in order
    local_detail: LocalBounds | None = None  # the stage-wise bounds behind local_upper (None: not covered)


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


def _blocks(chain: Chain, hs: list[torch.Tensor], y0: torch.Tensor | None, prop: _Propagator) -> list[BlockRecord]:
    """Propagate through the (boosting) blocks, two stages (attention, MLP) per block; returns the block records."""
    first = chain.y0_stage
    e_glob, e_loc = prop.glob, prop.loc.clone()  # L_E: the constant of the map input -> Y_0
    records: list[BlockRecord] = []
    n = hs[first].shape[1]
    for k in range(first, len(chain.stages), 2):
        attn, mlp = chain.stages[k], chain.stages[k + 1]
        where = f"blocks.{attn.block}"
        t, mid = hs[k], hs[k + 1]
        r1 = layernorm_output_radius(attn.norm)
        bound = attention_lipschitz(attn.inner, n, r1, f"{where}.attn")
        ls1, ls2 = attn.ls, mlp.ls
        mlp_c, mlp_detail = _mlp_lipschitz(mlp.inner, f"{where}.mlp")
        a_lam, m_lam = attn.lam, mlp.lam
        r_in = prop.radius()  # (B, K): the block input lies in B(h_l(x0), r_in) for x in B(x0, rho)
        # attention sublayer
        ln1_g, ln1_l = prop.layernorm(attn.norm, t, r_in, f"{where}.norm1")
        fa_g, fa_l = ls1 * bound.value * ln1_g, ls1 * bound.value * ln1_l
        prop.record(f"{where}.norm1", "layernorm", ln1_g, prop.ln_detail)
        prop.record(
            f"{where}.attn", "attention", bound.value,
            f"notes 1.4(f) on ||x_t|| <= R={r1:.4g}, n={n}, combine={bound.combine}"
            + (f", castin={bound.castin:.4g}" if bound.castin is not None else ""),
        )  # fmt: skip
        prop.glob = residual_step(prop.glob, fa_g, a_lam, e_glob)
        prop.loc = residual_step(prop.loc, fa_l, a_lam, e_loc)
        prop.record(f"{where}.attn_residual", "residual", 1.0 - a_lam + fa_g,
                    f"(1 - lambda) + L_F, lambda={a_lam:.4g}", cumulative=True)  # fmt: skip
        # MLP sublayer
        ln2_g, ln2_l = prop.layernorm(mlp.norm, mid, prop.radius(), f"{where}.norm2")
        fm_g, fm_l = ls2 * mlp_c * ln2_g, ls2 * mlp_c * ln2_l
        prop.record(f"{where}.norm2", "layernorm", ln2_g, prop.ln_detail)
        prop.record(f"{where}.mlp", "mlp", mlp_c, mlp_detail)
        # the block in isolation (Y_0 fixed) on B(h_l(x0), r_in): its midpoint moves by at most
        # (1 - lambda + L_F) r_in, which sets the second LayerNorm's local ball
        _, ln2_iso = prop.layernorm(mlp.norm, mid, (1.0 - a_lam + fa_l) * r_in, f"{where}.norm2")
        block_loc = (1.0 - a_lam + fa_l) * (1.0 - m_lam + ls2 * mlp_c * ln2_iso)
        block_glob = (1.0 - a_lam + fa_g) * (1.0 - m_lam + fm_g)
        prop.glob = residual_step(prop.glob, fm_g, m_lam, e_glob)
        prop.loc = residual_step(prop.loc, fm_l, m_lam, e_loc)
        prop.record(f"{where}.mlp_residual", "residual", 1.0 - m_lam + fm_g,
                    f"(1 - lambda) + L_F, lambda={m_lam:.4g}", cumulative=True)  # fmt: skip
        prop.record(where, "block", block_glob, "block map with Y_0 fixed (profile constant)")
        records.append(BlockRecord(index=attn.block, name=where, stages=(attn, mlp), hidden=t.detach(), y0=y0,
                                   global_upper=block_glob, local_upper=block_loc[:, 0]))  # fmt: skip
    return records


def _readout(chain: Chain, h: torch.Tensor, prop: _Propagator) -> None:
    """ViT: norm -> pool -> fc_norm -> head; LM: norm -> tied head -> last position."""
    ro = chain.readout
    if ro.norm is not None:
        prop.apply_layernorm(ro.norm, h, "norm")
    if chain.kind == "lm":
        prop.scale(linear_lipschitz(ro.head), "lm_head", "linear", "||W_te||_2 (tied)")
        prop.scale(1.0, "last_position", "select", "next-token logits at the last position")
        return
    t = ro.norm(h) if ro.norm is not None else h
    if ro.pool == "token":
        prop.scale(1.0, "pool", "pool", "CLS token selection")
        pooled = t[:, ro.index]
    elif ro.pool == "avg":
        n = t.shape[1] - ro.start
        prop.scale(mean_pool_lipschitz(n), "pool", "pool", f"mean over {n} tokens: 1/sqrt(n)")
        pooled = t[:, ro.start :].mean(dim=1)
    else:
        prop.scale(1.0, "pool", "pool", "max over tokens (1-Lipschitz per feature)")
        pooled = t[:, ro.start :].amax(dim=1)
    if ro.fc_norm is not None:
        prop.apply_layernorm(ro.fc_norm, pooled[:, None, :], "fc_norm")
    if ro.head is not None:
        prop.scale(linear_lipschitz(ro.head), "head", "linear", "||W_head||_2")


def _walk(chain: Chain, hs: list[torch.Tensor], y0: torch.Tensor | None, prop: _Propagator) -> list[BlockRecord]:
    """Every factor of the global and layer-by-layer local constants, in the order of the chain."""
    if not chain.transformer:  # a plain Sequential: the product rule, layer by layer
        for k, stage in enumerate(chain.stages):
            constant = generic_layer_lipschitz(stage.inner, hs[k], stage.name)
            if constant is None:
                prop.apply_layernorm(stage.inner, hs[k], stage.name)
            elif constant[1] != "reshape":
                prop.scale(constant[0], stage.name, constant[1], constant[2])
        return []
    for layer, kind, value, detail in chain.embedding.factors:  # prefix tokens and positions: constants
        prop.scale(value, layer, kind, detail)
    for k in range(chain.y0_stage):  # norm_pre
        prop.apply_layernorm(chain.stages[k].norm, hs[k], chain.stages[k].name)
    records = _blocks(chain, hs, y0, prop)
    _readout(chain, hs[-1], prop)
    return records


def trace_bounds(
    target: Target,
    x: torch.Tensor,
    rhos: torch.Tensor | list[float],
    *,
    improved: bool = True,
    local: LocalFn | None = None,
) -> BoundTrace:
    """Global and local certified constants for the batch ``x`` (already in the target's input space).

    With ``improved`` (default) the first LayerNorm of an image model uses its minimum variance over the input
    box (globally and locally), and the local constants are the minimum of this layer-by-layer trace and the
    stage-wise bound ``local`` (default :func:`.local_bound.stagewise_bounds`; the research passes its own).
    Every candidate is certified on B(x0, rho) (intersected with the [0, 1] box for images), so their minimum
    is. ``improved=False`` is the plain layer-by-layer trace the gap analysis starts from.

    Raises :class:`RobfiltError` naming the first layer the bounds do not cover, or when the recomputed forward
    does not reproduce the model's output.
    """
    rhos = torch.as_tensor(rhos, dtype=torch.float64, device=x.device).reshape(-1)
    if target.model.training:
        raise RobfiltError(f"{target.name} is in training mode (dropout on); call model.eval() or use make_target().")
    chain = build_chain(target, x)
    with torch.no_grad():
        states = chain.states(x)
        expected = check_forward(target, x, states[2])
    hs, y0, _ = states
    refine = improved and chain.transformer
    floor = first_norm_floor(chain, x, target.box) if refine else None
    prop = _Propagator(x.shape[0], rhos, first_floor=floor)
    with torch.no_grad():
        records = _walk(chain, hs, y0, prop)
    local_upper, detail = prop.loc, None
    if refine:
        if local is None:
            detail = stagewise_bounds(chain, x, rhos, floor, states)
        else:
            detail = local(target, x, rhos, chain, floor)
        local_upper = torch.minimum(local_upper, detail.local)
        per_block = detail.block_local()
        for rec in records:
            if rec.index in per_block:
                rec.local_upper = torch.minimum(rec.local_upper, per_block[rec.index][:, 0])
    local_upper = local_upper.clamp_max(prop.glob)
    for rec in records:
        rec.local_upper = rec.local_upper.clamp_max(rec.global_upper)
    return BoundTrace(
        output=expected, global_upper=prop.glob, rhos=rhos, local_upper=local_upper,
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
