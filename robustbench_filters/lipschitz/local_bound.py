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

With ``LocalOptions.taylor`` the sweep runs one example at a time and the second-order bound of :mod:`.taylor` both
tightens the radii (``r_k = rho (||P_k(x0)|| + e_k)`` instead of rho times a product of constants) and gives its
own bound, which tends to the exact ||J(x0)|| as rho -> 0. The reported local bound is the minimum of the bounds
that apply, each of which is certified on its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import torch
from timm.models.vision_transformer import VisionTransformer

from ..errors import RobfiltError
from ..models.lm import CausalLM
from .chain import Chain, build_chain
from .layernorm_bound import box_min_variance, token_std
from .stage_bounds import ReadoutLocal, StageLocal, readout_local, stage_local
from .target import Target
from .taylor import TaylorState, supported

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalOptions:
    """Which refinements the local bound uses; every combination is certified (the switches exist for ablations).

    - ``token_radii``: per-token radii of the reachable set (else every token may move by the total radius), so
      each LayerNorm gets its own per-token variance lower bound;
    - ``localize_attention``: attention bounded on the reachable tokens (:mod:`.attention_local`) instead of the
      whole LayerNorm-output ball;
    - ``box_floor``: the first LayerNorm's minimum variance over the input box (images);
    - ``taylor``: the second-order bound (None: when the dense prefix Jacobians fit);
    - ``dense``: exact attention Jacobian norms at the centre (slow; small models).
    """

    token_radii: bool = True
    localize_attention: bool = True
    box_floor: bool = True
    taylor: bool | None = None
    dense: bool = False


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
    taylor: torch.Tensor | None  # (B, K) second-order bound, None when not applicable
    centre: torch.Tensor | None  # (B,) exact ||J(x0)|| (from the Taylor pass)
    local: torch.Tensor  # (B, K) the minimum of the applicable bounds
    stages: list[StageRecord] = field(default_factory=list)
    readout: ReadoutLocal | None = None
    hidden: list[torch.Tensor] = field(default_factory=list)  # stage inputs at x0
    y0: torch.Tensor | None = None
    taylor_note: str | None = None  # why the Taylor bound is absent

    def block_local(self) -> dict[int, torch.Tensor]:
        """Per block: the product of its stages' sup bounds, a constant of the block map (Y_0 fixed) on the set of
        block inputs reachable from the ball."""
        out: dict[int, torch.Tensor] = {}
        for rec in self.stages:
            if rec.block >= 0:
                out[rec.block] = out.get(rec.block, 1.0) * rec.local.sup
        return out


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


def chain_and_floor(target: Target, x: torch.Tensor, options: LocalOptions | None) -> tuple[Chain | None, object]:
    """(chain, first-LayerNorm box floor) for models the stage-wise bounds cover, else (None, None).

    Used by :func:`.certify.trace_bounds`, whose layer-by-layer trace also covers plain Sequential stacks (and
    raises for anything uncovered), so a chain that cannot be built just means no stage-wise refinement.
    """
    if not isinstance(target.model, (VisionTransformer, CausalLM)):
        return None, None
    try:
        chain = build_chain(target, x)
    except RobfiltError as exc:
        log.debug("stage-wise local bounds skipped for %s: %s", target.name, exc)
        return None, None
    use_floor = options is None or options.box_floor
    return chain, first_norm_floor(chain, x, target.box) if use_floor else None


def _check_forward(chain: Chain, target: Target, x: torch.Tensor, out: torch.Tensor) -> None:
    expected = target(x)
    tol = 1e-4 if x.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-9
    if out.shape != expected.shape or not torch.allclose(
        out, expected, rtol=tol, atol=tol * (1 + expected.abs().max().item())
    ):
        raise RobfiltError(
            f"{target.name}: the stage-by-stage forward used for the local bound does not reproduce the model output "
            "(patched forward or unsupported wiring); the certified bound would be wrong, so none is given."
        )


def _sweep(chain: Chain, x: torch.Tensor, rhos: torch.Tensor, floor, taylor: TaylorState | None, opts: LocalOptions):
    hs, y0, out = chain.states(x)
    emb = chain.embedding
    gain = emb.token_gain.to(x.device)
    if not opts.token_radii:
        gain = torch.full_like(gain, emb.lipschitz)
    b = x.shape[0]
    rho = rhos[None, :].expand(b, -1)
    token_r = rho[..., None] * gain[None, None, :]
    total_r = rho * emb.lipschitz
    lip = torch.full_like(total_r, emb.lipschitz)
    if taylor is not None:
        a0, tok0 = taylor.start()
        total_r, lip = torch.minimum(total_r, rho * a0), torch.minimum(lip, a0)
        token_r = torch.minimum(token_r, rho[..., None] * tok0)
    y_ball = (token_r, total_r, lip)
    records = []
    for k, stage in enumerate(chain.stages):
        if k == chain.y0_stage:
            y_ball = (token_r, total_r, lip)
        loc = stage_local(stage, hs[k], token_r, total_r, floor if k == 0 else None, dense=opts.dense, y0=y0,
                          localize=opts.localize_attention)  # fmt: skip
        records.append(StageRecord(stage.name, stage.kind, stage.block, loc, token_r, total_r))
        lam = stage.lam if chain.grc and stage.kind != "norm" else 0.0
        new_tok = loc.out_token + lam * y_ball[0]
        new_total = loc.sup * total_r + lam * y_ball[1]
        new_lip = loc.sup * lip + lam * y_ball[2]
        if taylor is not None:
            a, tok = taylor.step(k, hs[k], y0, loc, total_r, token_r)
            new_total, new_lip = torch.minimum(new_total, rho * a), torch.minimum(new_lip, a)
            new_tok = torch.minimum(new_tok, rho[..., None] * tok)
        token_r, total_r, lip = torch.minimum(new_tok, new_total[..., None]), new_total, new_lip
        if not opts.token_radii:
            token_r = total_r[..., None].expand_as(token_r)
    ro = readout_local(chain.readout, hs[-1], token_r, total_r)
    first = ro.sup * lip
    tay, centre = None, None
    if taylor is not None:
        tay, j0 = taylor.finish(hs[-1], y0, hs, ro, total_r, token_r)
        centre = torch.tensor([j0], dtype=torch.float64, device=x.device)
    return out, first, tay, centre, records, ro, hs, y0


def _cat_records(parts: list[list[StageRecord]]) -> list[StageRecord]:
    out = []
    for recs in zip(*parts, strict=True):
        loc = StageLocal(
            **{
                f: (torch.cat([getattr(r.local, f) for r in recs]) if getattr(recs[0].local, f) is not None else None)
                for f in StageLocal.__dataclass_fields__
            }
        )
        out.append(StageRecord(recs[0].name, recs[0].kind, recs[0].block, loc,
                               torch.cat([r.token_r for r in recs]), torch.cat([r.total_r for r in recs])))  # fmt: skip
    return out


def local_bounds(
    target: Target,
    x: torch.Tensor,
    rhos: torch.Tensor | list[float],
    *,
    options: LocalOptions | None = None,
    chain: Chain | None = None,
) -> LocalBounds:
    """Certified local constants of ``target`` on B(x0, rho) for each row x0 of ``x`` and each rho.

    ``options.taylor``: True forces the second-order bound (raises when it cannot apply), False skips it, None
    uses it when the dense prefix Jacobians fit (:data:`.taylor.MAX_ENTRIES`). ``options.dense`` computes the
    exact Jacobian norm of every attention stage at the centre (:func:`.stage_bounds.dense_centre_norm`: about
    30 s per stage and example on one CPU core for the micro DeiT; tightens the bounds for small rho). Raises
    :class:`RobfiltError` naming the first uncovered layer before computing anything.
    """
    chain = chain or build_chain(target, x)
    rhos = torch.as_tensor(rhos, dtype=torch.float64, device=x.device).reshape(-1)
    if target.model.training:
        raise RobfiltError(f"{target.name} is in training mode (dropout on); call model.eval() or use make_target().")
    with torch.no_grad():
        h0 = chain.embedding.fn(x[:1])
    opts = options or LocalOptions()
    taylor = opts.taylor if opts.localize_attention else False  # the curvature bounds need the local attention
    reason = supported(chain, x, h0)
    if taylor and reason is not None:
        raise RobfiltError(
            f"the second-order local bound does not apply to {target.name}: {reason}; pass taylor=False."
        )
    use_taylor = reason is None if taylor is None else bool(taylor)
    floor = first_norm_floor(chain, x, target.box) if opts.box_floor else None
    if not use_taylor:
        with torch.no_grad():
            out, first, _, _, records, ro, hs, y0 = _sweep(chain, x, rhos, floor, None, opts)
        _check_forward(chain, target, x, out)
        return LocalBounds(rhos, out, first, None, None, first, records, ro, hs, y0,
                           taylor_note=reason or "switched off")  # fmt: skip
    parts = []
    for i in range(x.shape[0]):
        xi = x[i : i + 1]
        with torch.no_grad():
            parts.append(_sweep(chain, xi, rhos, floor, TaylorState(chain, xi, rhos), opts))
    out = torch.cat([p[0] for p in parts])
    _check_forward(chain, target, x, out)
    first = torch.cat([p[1] for p in parts])
    tay = torch.cat([p[2] for p in parts])
    centre = torch.cat([p[3] for p in parts])
    ro = ReadoutLocal(sup=torch.cat([p[5].sup for p in parts]), curvature=torch.cat([p[5].curvature for p in parts]))
    hs = [torch.cat([p[6][k] for p in parts]) for k in range(len(parts[0][6]))]
    y0 = torch.cat([p[7] for p in parts]) if parts[0][7] is not None else None
    local = torch.minimum(first, tay)
    if not bool(torch.isfinite(local).all()):
        log.warning("%s: some local bounds are infinite (an uncovered smooth layer or overflow)", target.name)
    return LocalBounds(rhos, out, first, tay, centre, local, _cat_records([p[4] for p in parts]), ro, hs, y0)


__all__ = ["LocalBounds", "LocalOptions", "StageRecord", "chain_and_floor", "first_norm_floor", "local_bounds"]
