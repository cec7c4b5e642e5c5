"""Certified local Lipschitz bounds on B(x0, rho), propagated per token through a :class:`.chain.Chain`.

What is propagated, stage by stage, for every example and radius rho:

- the reachable set of the stage input, as per-token radii r_t and a total radius R around the real hidden state
  (``||h_t(x) - h_t(x0)|| <= r_t``, ``||h(x) - h(x0)|| <= R`` for every x in the ball);
- a bound L on the prefix Jacobian ``sup ||dh/dx||`` over the ball (first order: ``L_k <= sup_k L_{k-1} +
  lambda L_0``).

Each stage's constants come from :mod:`.stage_bounds` on exactly that set: LayerNorm with per-token variance
lower bounds, attention localised to the tokens reachable around the real LayerNorm output, MLPs exact at the
centre plus curvature times radius. For images the first LayerNorm also gets the box minimum variance of
:func:`.layernorm_bound.box_min_variance` (the ball is intersected with [0, 1]^d, the domain of images).

:func:`stagewise_bounds` is what ``robfilt lipschitz`` uses (every refinement on). :func:`sweep` takes the
switches the research ablations need and a :class:`Refinement`, an object that may tighten the reachable radii
after each stage (the second-order bound of :mod:`.research.taylor` does); every combination is certified.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ..core.errors import RobfiltError
from .chain import Chain, Stage
from .layernorm_bound import box_min_variance, token_std
from .stage_bounds import ReadoutLocal, StageLocal, readout_local, stage_local
from .target import Target

#: exact Jacobian norm of an attention stage at its centre (B,), from (stage, h0, y0); research only (slow)
CentreFn = Callable[[Stage, torch.Tensor, torch.Tensor | None], torch.Tensor]


@dataclass
class StageRecord:
    """One stage of the sweep: its name, block and bounds, and the ball it was evaluated on."""

    name: str
    kind: str
    block: int
    local: StageLocal
    token_r: torch.Tensor  # (B, K, N)
    total_r: torch.Tensor  # (B, K)


@dataclass
class LocalBounds:
    """Certified local constants for a batch; ``[:, k]`` holds on B(x0, rhos[k]) (intersected with the box)."""

    rhos: torch.Tensor  # (K,)
    output: torch.Tensor  # (B, m) the model output at x0
    first_order: torch.Tensor  # (B, K)
    local: torch.Tensor  # (B, K) the minimum of the applicable bounds
    stages: list[StageRecord] = field(default_factory=list)
    readout: ReadoutLocal | None = None
    hidden: list[torch.Tensor] = field(default_factory=list)  # stage inputs at x0
    y0: torch.Tensor | None = None

    def block_local(self) -> dict[int, torch.Tensor]:
        """Per block: the product of its stages' sup bounds, a constant of the block map (Y_0 fixed) on the set of
        block inputs reachable from the ball."""
        out: dict[int, torch.Tensor] = {}
        for rec in self.stages:
            if rec.block >= 0:
                out[rec.block] = out.get(rec.block, 1.0) * rec.local.sup
        return out


class Refinement(Protocol):
    """Tightens the reachable radii: ``(a, per-token a)`` bound ``||dh_k/dx||`` so that ``r_k <= rho a``."""

    def start(self) -> tuple[torch.Tensor, torch.Tensor]: ...

    def step(
        self, k: int, h: torch.Tensor, y0: torch.Tensor | None, local: StageLocal, total_r: torch.Tensor,
        token_r: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]: ...  # fmt: skip


@dataclass
class Sweep:
    """What one pass over the chain leaves: the output at x0, the first-order bound, every stage's record, the
    readout's bounds, the hidden states and the final reachable radii (a refinement's last step needs them)."""

    output: torch.Tensor
    first_order: torch.Tensor  # (B, K)
    stages: list[StageRecord]
    readout: ReadoutLocal
    hidden: list[torch.Tensor]
    y0: torch.Tensor | None
    token_r: torch.Tensor
    total_r: torch.Tensor


def first_norm_floor(chain: Chain, x: torch.Tensor, box: tuple[float, float] | None) -> torch.Tensor | None:
    """Per-token lower bound (N,) on the std of the first LayerNorm's input over the input box, or None.

    Valid when the first stage's LayerNorm sees the embedding directly and the embedding is a non-overlapping
    patch map: each patch token is M x_patch + c_t with x_patch ranging over the whole box, prefix tokens are
    constant (their std is exact).
    """
    emb = chain.embedding
    if box is None or emb.patch_map is None or not chain.stages:
        return None
    with torch.no_grad():
        offsets = emb.fn(torch.full_like(x[:1], box[0]))[0].double().cpu()  # h_t at the box corner x = lo
    lo, hi = box
    # h_t(x) = M (x - lo) + c_t with x - lo in [0, hi - lo]
    var = box_min_variance(emb.patch_map.cpu(), offsets[emb.num_prefix :], 0.0, hi - lo)
    if emb.num_prefix:
        var = torch.cat([token_std(offsets[: emb.num_prefix]).pow(2), var])
    return var.clamp_min(0.0).sqrt().to(x.device)


def check_forward(target: Target, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The model's own output at x, after checking that the chain's forward reproduces it (else a certified bound
    of the chain would not be one of the model)."""
    expected = target(x)
    tol = 1e-4 if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
    if out.shape != expected.shape or not torch.allclose(
        out, expected, rtol=tol, atol=tol * (1 + expected.abs().max().item())
    ):
        raise RobfiltError(
            f"{target.name}: the layer-by-layer forward used for the bound does not reproduce the model output "
            "(patched forward or unsupported wiring); the certified bound would be wrong, so none is given."
        )
    return expected


def sweep(
    chain: Chain,
    x: torch.Tensor,
    rhos: torch.Tensor,
    floor: torch.Tensor | None,
    *,
    states: tuple[list[torch.Tensor], torch.Tensor | None, torch.Tensor] | None = None,
    token_radii: bool = True,
    localize: bool = True,
    centre_fn: CentreFn | None = None,
    refine: Refinement | None = None,
) -> Sweep:
    """One pass over the stages of a transformer chain (call under ``torch.no_grad``).

    ``states``: :meth:`.chain.Chain.states` at x when the caller has them. ``token_radii=False`` lets every token
    move by the total radius, ``localize=False`` uses the global attention lemma, ``centre_fn`` adds the exact
    attention Jacobian norm at the centre (ablations and the research's dense pass; all certified).
    """
    hs, y0, out = states if states is not None else chain.states(x)
    emb = chain.embedding
    gain = emb.token_gain.to(x.device)
    if not token_radii:
        gain = torch.full_like(gain, emb.lipschitz)
    b = x.shape[0]
    rho = rhos[None, :].expand(b, -1)
    token_r = rho[..., None] * gain[None, None, :]
    total_r = rho * emb.lipschitz
    lip = torch.full_like(total_r, emb.lipschitz)
    if refine is not None:
        a0, tok0 = refine.start()
        total_r, lip = torch.minimum(total_r, rho * a0), torch.minimum(lip, a0)
        token_r = torch.minimum(token_r, rho[..., None] * tok0)
    y_ball = (token_r, total_r, lip)
    records = []
    for k, stage in enumerate(chain.stages):
        if k == chain.y0_stage:
            y_ball = (token_r, total_r, lip)
        centre = centre_fn(stage, hs[k], y0) if centre_fn is not None and stage.kind == "attn" else None
        loc = stage_local(stage, hs[k], token_r, total_r, floor if k == 0 else None, centre=centre,
                          localize=localize)  # fmt: skip
        records.append(StageRecord(stage.name, stage.kind, stage.block, loc, token_r, total_r))
        lam = stage.lam if chain.grc and stage.kind != "norm" else 0.0
        new_tok = loc.out_token + lam * y_ball[0]
        new_total = loc.sup * total_r + lam * y_ball[1]
        new_lip = loc.sup * lip + lam * y_ball[2]
        if refine is not None:
            a, tok = refine.step(k, hs[k], y0, loc, total_r, token_r)
            new_total, new_lip = torch.minimum(new_total, rho * a), torch.minimum(new_lip, a)
            new_tok = torch.minimum(new_tok, rho[..., None] * tok)
        token_r, total_r, lip = torch.minimum(new_tok, new_total[..., None]), new_total, new_lip
        if not token_radii:
            token_r = total_r[..., None].expand_as(token_r)
    ro = readout_local(chain.readout, hs[-1], token_r, total_r)
    return Sweep(out, ro.sup * lip, records, ro, hs, y0, token_r, total_r)


def stagewise_bounds(
    chain: Chain,
    x: torch.Tensor,
    rhos: torch.Tensor,
    floor: torch.Tensor | None,
    states: tuple[list[torch.Tensor], torch.Tensor | None, torch.Tensor] | None = None,
) -> LocalBounds:
    """The first-order stage-wise bound with every refinement on: what :func:`.certify.trace_bounds` merges."""
    with torch.no_grad():
        s = sweep(chain, x, rhos, floor, states=states)
    return LocalBounds(rhos, s.output, s.first_order, s.first_order, s.stages, s.readout, s.hidden, s.y0)
