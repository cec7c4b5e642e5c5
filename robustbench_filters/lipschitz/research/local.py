"""The research local bound: the stage-wise sweep with its ablation switches, exact attention norms at the centre
and the second-order (Taylor) bound.

``robfilt lipschitz --gap`` and ``scripts/lipschitz_gap.py`` use it to show what each refinement buys; the default
path runs :func:`..local_bound.stagewise_bounds` (every refinement on, first order only). Every combination of
:class:`LocalOptions` is certified on B(x0, rho); the reported local bound is the minimum of the bounds that apply.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from torch.func import vjp, vmap

from ...core.errors import RobfiltError
from ..chain import Chain, Stage, build_chain
from ..local_bound import LocalBounds, StageRecord, check_forward, first_norm_floor, sweep
from ..stage_bounds import ReadoutLocal, StageLocal
from ..target import Target
from .taylor import TaylorState, supported

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LocalOptions:
    """Which refinements the local bound uses; every combination is certified (the switches exist for ablations).

    - ``token_radii``: per-token radii of the reachable set (else every token may move by the total radius), so
      each LayerNorm gets its own per-token variance lower bound;
    - ``localize_attention``: attention bounded on the reachable tokens (:mod:`..attention_local`) instead of the
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
class TaylorBounds(LocalBounds):
    """:class:`..local_bound.LocalBounds` plus the second-order bound and the exact ||J(x0)|| it computes."""

    taylor: torch.Tensor | None = None  # (B, K) second-order bound, None when not applicable
    centre: torch.Tensor | None = None  # (B,) exact ||J(x0)|| (from the Taylor pass)
    taylor_note: str | None = None  # why the Taylor bound is absent


def dense_centre_norm(stage: Stage, h0: torch.Tensor, y0: torch.Tensor | None = None) -> torch.Tensor:
    """Exact ||Dg(h0)|| per example from the dense stage Jacobian (N D vjps and a Gram eigenvalue), (B,).

    O((N D)^3) per example: for small models (the micro DeiT: about 30 s per stage on one CPU core).
    """
    out = []
    for i in range(h0.shape[0]):
        h = h0[i : i + 1].detach()
        y = y0[i : i + 1].detach() if y0 is not None else None
        res, back = vjp(lambda t, y=y: stage.forward(t, y), h)
        n = res.numel()
        eye = torch.eye(n, dtype=h.dtype, device=h.device).reshape(n, *res.shape)
        jac = vmap(back, chunk_size=256)(eye)[0].reshape(n, -1).double()
        out.append(torch.linalg.eigvalsh(jac @ jac.T)[-1].clamp_min(0.0).sqrt())
    return torch.stack(out)


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
) -> TaylorBounds:
    """Certified local constants of ``target`` on B(x0, rho) for each row x0 of ``x`` and each rho.

    ``options.taylor``: True forces the second-order bound (raises when it cannot apply), False skips it, None
    uses it when the dense prefix Jacobians fit (:data:`.taylor.MAX_ENTRIES`). ``options.dense`` computes the
    exact Jacobian norm of every attention stage at the centre (:func:`dense_centre_norm`: about 30 s per stage
    and example on one CPU core for the micro DeiT; tightens the bounds for small rho). Raises
    :class:`RobfiltError` naming the first uncovered layer before computing anything.
    """
    chain = chain or build_chain(target, x)
    if not chain.transformer:
        raise RobfiltError(f"{target.name}: stage-wise local bounds exist for transformers only (a ViT or robfilt LM).")
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
    switches = {"token_radii": opts.token_radii, "localize": opts.localize_attention,
                "centre_fn": dense_centre_norm if opts.dense else None}  # fmt: skip
    if not use_taylor:
        with torch.no_grad():
            s = sweep(chain, x, rhos, floor, **switches)
        check_forward(target, x, s.output)
        return TaylorBounds(rhos, s.output, s.first_order, s.first_order, s.stages, s.readout, s.hidden, s.y0,
                            taylor_note=reason or "switched off")  # fmt: skip
    parts = []
    for i in range(x.shape[0]):
        xi = x[i : i + 1]
        state = TaylorState(chain, xi, rhos)
        with torch.no_grad():
            s = sweep(chain, xi, rhos, floor, refine=state, **switches)
            tay, j0 = state.finish(s.hidden[-1], s.y0, s.hidden, s.readout, s.total_r, s.token_r)
        parts.append((s, tay, torch.tensor([j0], dtype=torch.float64, device=x.device)))
    out = torch.cat([p[0].output for p in parts])
    check_forward(target, x, out)
    first = torch.cat([p[0].first_order for p in parts])
    tay = torch.cat([p[1] for p in parts])
    centre = torch.cat([p[2] for p in parts])
    ro = ReadoutLocal(sup=torch.cat([p[0].readout.sup for p in parts]),
                      curvature=torch.cat([p[0].readout.curvature for p in parts]))  # fmt: skip
    hs = [torch.cat([p[0].hidden[k] for p in parts]) for k in range(len(parts[0][0].hidden))]
    y0 = torch.cat([p[0].y0 for p in parts]) if parts[0][0].y0 is not None else None
    local = torch.minimum(first, tay)
    if not bool(torch.isfinite(local).all()):
        log.warning("%s: some local bounds are infinite (an uncovered smooth layer or overflow)", target.name)
    return TaylorBounds(rhos, out, first, local, _cat_records([p[0].stages for p in parts]), ro, hs, y0, tay, centre)
