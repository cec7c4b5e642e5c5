"""Where the certified bounds lose: empirical gain, layerwise estimate, certified local and global, side by side.

:func:`gap_rows` returns one tidy row per (model, example, layer, rho) for a batch of examples:

- ``empirical``: a rigorous lower bound on the local constant. Model rows: the exact Jacobian norm ||J(x0)||
  (dense for <= 1024 outputs, else power iteration); block rows: the block map's Jacobian norm at its real hidden
  state (power iteration, as in :mod:`..profile`).
- ``layerwise_estimate``: the product of the exact per-stage Jacobian norms at x0 (embedding, each sublayer with
  Y_0 fixed, readout). **Not certified**: it is what composing perfect layer constants at rho -> 0 would give, so
  ``layerwise_estimate / empirical`` is the loss due to composition alone, and ``local_first_order /
  layerwise_estimate`` the loss due to the layer bounds themselves. Block-diagonal stages use their exact norm;
  attention stages use power iteration (a lower estimate; exact with ``LocalOptions(dense=True)``).
- ``local_upper``: the certified constant on B(x0, rho) (minimum of every certified candidate);
  ``local_first_order`` (stage-wise composition), ``local_taylor`` (second-order bound, model rows; NaN when it
  does not apply) and ``baseline_local`` (the layer-by-layer trace without any of the refinements) show what each
  route gives.
- ``local_crown``: the certified constant of linear bound propagation (:func:`...crown.local_lipschitz`: bounds on the
  network's derivative over B(x0, rho) ∩ [0, 1]^d, never a product of per-stage norms), model rows of image models
  the CROWN graph covers (robfilt's DeiTs; another image model raises), NaN on other families and with
  ``crown=None``. Kept beside ``local_upper`` rather than folded into it, so the gain of propagation over
  composition stays visible.
- ``global_upper``: the certified constant on all inputs (images: all of [0, 1]^d).

Sandwich per row: empirical <= local_upper <= global_upper.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ...core.errors import RobfiltError
from ...core.family import Family
from ...core.surface import flag
from ..certify import BoundTrace, trace_bounds
from ..chain import Chain, build_chain
from ..jacobian import jacobian_norm_exact, jacobian_norm_power
from ..profile import layer_profile
from ..target import Target
from .local import LocalOptions, TaylorBounds, local_bounds

GAP_COLUMNS = (
    "model", "example_id", "layer", "rho", "empirical", "layerwise_estimate", "local_upper", "local_first_order",
    "local_taylor", "local_crown", "baseline_local", "global_upper",
)  # fmt: skip
MODEL_LAYER = "model"


def _stage_norms(chain: Chain, detail: TaylorBounds, iters: int, tol: float, gen) -> list[torch.Tensor]:
    """Exact (or power-iteration) Jacobian norm of every stage at the real hidden states, (B,) each."""
    norms = []
    for k, (stage, rec) in enumerate(zip(chain.stages, detail.stages, strict=True)):
        if rec.local.centre is not None:
            norms.append(rec.local.centre.double())
            continue
        y0 = detail.y0

        def fn(h: torch.Tensor, stage=stage, y0=y0) -> torch.Tensor:
            return stage.forward(h, y0)

        norms.append(jacobian_norm_power(fn, detail.hidden[k], iters=iters, tol=tol, generator=gen).sigma)
    return norms


def _readout_norm(chain: Chain, h: torch.Tensor) -> torch.Tensor:
    m = chain.readout.forward(h[:1]).shape[-1]
    if m > 1024:
        return jacobian_norm_power(chain.readout.forward, h, iters=50).sigma
    return jacobian_norm_exact(chain.readout.forward, h)


def _empirical(target: Target, x: torch.Tensor, detail: TaylorBounds, iters: int, tol: float, gen) -> torch.Tensor:
    if detail.centre is not None:
        return detail.centre.double()
    if detail.output.shape[-1] <= 1024:
        return jacobian_norm_exact(target, x)
    return jacobian_norm_power(target, x, iters=iters, tol=tol, generator=gen).sigma


def _rows(base: dict, values: dict[str, np.ndarray | float], n: int) -> pd.DataFrame:
    return pd.DataFrame({**{k: [v] * n for k, v in base.items()}, **values})


def gap_rows(
    target: Target,
    x: torch.Tensor,
    example_ids: Sequence[int] | np.ndarray,
    rhos: Sequence[float],
    *,
    options: LocalOptions | None = None,
    power_iters: int = 50,
    tol: float = 1e-6,
    generator: torch.Generator | None = None,
    crown: str | None = "all",
) -> pd.DataFrame:
    """Rows (see the module docstring) for the batch ``x`` (in the target's input space), in :data:`GAP_COLUMNS`.

    ``options`` defaults to every refinement with the second-order bound where it fits
    (:class:`.local.LocalOptions`). ``crown`` is the re-tightening of the ``local_crown`` column (a
    :data:`...core.names.BOUND_REFRESH` value; ``None`` leaves the column NaN). Raises the one-line
    :class:`RobfiltError` of :func:`..certify.trace_bounds` for models the certified bounds do not cover, and that
    of :func:`require_crown` for image models the CROWN graph does not cover (unless ``crown=None``).
    """
    ids = np.asarray(example_ids, dtype=np.int64)
    rho_t = torch.as_tensor(list(rhos), dtype=torch.float64)
    opts = options or LocalOptions()

    def local(t: Target, xs: torch.Tensor, r: torch.Tensor, chain: Chain, floor) -> TaylorBounds:
        return local_bounds(t, xs, r, options=opts, chain=chain)

    trace: BoundTrace = trace_bounds(target, x, rho_t, local=local)
    baseline = trace_bounds(target, x, rho_t, improved=False)
    crowned = _crown_local(target, x, rhos, crown)
    detail = trace.local_detail
    frames = []
    if detail is None:  # covered by the layer-by-layer trace only (generic stacks): no stage-wise rows
        emp = _empirical_plain(target, x, power_iters, tol, generator)
        for k, rho in enumerate(rhos):
            frames.append(_model_frame(target.name, ids, rho, emp, np.nan, trace, baseline, None, k, crowned))
        return pd.concat(frames, ignore_index=True)[list(GAP_COLUMNS)]
    chain = build_chain(target, x)
    stage_norms = _stage_norms(chain, detail, power_iters, tol, generator)
    emb = float(chain.embedding.token_gain.max())  # exact for patch embeddings and LM positions
    layerwise = emb * torch.stack(stage_norms).prod(0) * _readout_norm(chain, detail.hidden[-1])
    empirical = _empirical(target, x, detail, power_iters, tol, generator).cpu().numpy()
    profile = layer_profile(trace, iters=power_iters, tol=tol, generator=generator)
    per_block = detail.block_local()
    for k, rho in enumerate(rhos):
        frames.append(
            _model_frame(target.name, ids, rho, empirical, layerwise.cpu().numpy(), trace, baseline, detail, k, crowned)
        )
        for rec, base_rec in zip(trace.blocks, baseline.blocks, strict=True):
            local_blocks = _block_local(trace, rec.index, k)
            block_norms = [n for n, st in zip(stage_norms, chain.stages, strict=True) if st.block == rec.index]
            emp = profile[profile["layer"] == rec.name]["lower"].to_numpy()
            frames.append(
                _rows(
                    {"model": target.name, "layer": rec.name, "rho": float(rho)},
                    {
                        "example_id": ids,
                        "empirical": emp,
                        "layerwise_estimate": torch.stack(block_norms).prod(0).cpu().numpy(),
                        "local_upper": local_blocks.cpu().numpy(),
                        "local_first_order": per_block[rec.index][:, k].cpu().numpy(),
                        "local_taylor": np.full(len(ids), np.nan),
                        "local_crown": np.full(len(ids), np.nan),
                        "baseline_local": _baseline_block(base_rec, k),
                        "global_upper": np.full(len(ids), rec.global_upper),
                    },
                    len(ids),
                )
            )
    return pd.concat(frames, ignore_index=True)[list(GAP_COLUMNS)]


def require_crown(target: Target, input_shape: tuple[int, ...]):
    """The CROWN graph of ``target``, or the one-line refusal of the option that asked for it.

    Only image models have a CROWN local bound (its ball is cut to pixels in [0, 1]), and only those the graph
    covers: anything else is refused before any work, since a NaN column would look like a measurement that failed,
    not one that was never possible.
    """
    if target.family is not Family.IMAGE:
        raise RobfiltError(
            f"{flag('gap_crown')}: {target.name} is not an image model (CROWN's local bound is over pixels in "
            f"[0, 1]); drop {flag('gap_crown')} for it."
        )
    from ...crown.build import build_graph

    try:
        return build_graph(target.model, tuple(input_shape), name=target.name)
    except RobfiltError as e:
        raise RobfiltError(f"{flag('gap_crown')}: {e} Drop {flag('gap_crown')} for this model.") from None


def _crown_local(target: Target, x: torch.Tensor, rhos: Sequence[float], refresh: str | None) -> np.ndarray:
    """(B, len(rhos)) certified local constants of linear bound propagation; NaN with ``refresh=None`` and for
    models that are not image models. An image model the CROWN graph does not cover raises
    (:func:`require_crown`)."""
    out = np.full((x.shape[0], len(rhos)), np.nan)
    if refresh is None or target.family is not Family.IMAGE:
        return out
    from ...crown import local_lipschitz

    graph = require_crown(target, tuple(x.shape[1:]))
    for k, rho in enumerate(rhos):
        found = local_lipschitz(target.model, x, float(rho), refresh=refresh, graph=graph)
        out[:, k] = [b.upper for b in found]
    return out


def _block_local(trace: BoundTrace, index: int, k: int) -> torch.Tensor:
    """The certified local constant of block ``index`` on the ball for ``rhos[k]`` (trace records hold rhos[0])."""
    rec = next(r for r in trace.blocks if r.index == index)
    if k == 0 or trace.local_detail is None:
        return rec.local_upper
    per_block = trace.local_detail.block_local()[index][:, k]
    return per_block.clamp_max(rec.global_upper)


def _baseline_block(rec, k: int) -> np.ndarray:
    """The baseline trace records block constants for the first radius only."""
    return rec.local_upper.cpu().numpy() if k == 0 else np.full(rec.local_upper.shape[0], np.nan)


def _empirical_plain(target: Target, x: torch.Tensor, iters: int, tol: float, gen) -> np.ndarray:
    with torch.no_grad():
        m = target(x[:1]).shape[-1]
    if m <= 1024:
        return jacobian_norm_exact(target, x).cpu().numpy()
    return jacobian_norm_power(target, x, iters=iters, tol=tol, generator=gen).sigma.cpu().numpy()


def _model_frame(name, ids, rho, empirical, layerwise, trace, baseline, detail, k, crowned) -> pd.DataFrame:
    n = len(ids)
    taylor = detail.taylor[:, k].cpu().numpy() if detail is not None and detail.taylor is not None else np.nan
    first = detail.first_order[:, k].cpu().numpy() if detail is not None else np.nan
    return _rows(
        {"model": name, "layer": MODEL_LAYER, "rho": float(rho)},
        {
            "example_id": ids,
            "empirical": empirical,
            "layerwise_estimate": layerwise if isinstance(layerwise, np.ndarray) else np.full(n, layerwise),
            "local_upper": trace.local_upper[:, k].cpu().numpy(),
            "local_first_order": first if isinstance(first, np.ndarray) else np.full(n, first),
            "local_taylor": taylor if isinstance(taylor, np.ndarray) else np.full(n, taylor),
            "local_crown": crowned[:, k],
            "baseline_local": baseline.local_upper[:, k].cpu().numpy(),
            "global_upper": np.full(n, trace.global_upper),
        },
        n,
    )


def gap_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Median log10 of each column per (model, layer, rho): the numbers behind the README's Lipschitz section."""
    cols = ["empirical", "layerwise_estimate", "local_upper", "local_first_order", "local_taylor", "local_crown",
            "baseline_local", "global_upper"]  # fmt: skip
    cols = [c for c in cols if c in rows]  # rows written before a column existed (local_crown: 2026-12-06)
    logs = rows[["model", "layer", "rho"]].copy()
    for c in cols:
        logs[c] = np.log10(rows[c].astype(float).where(rows[c] > 0))
    return logs.groupby(["model", "layer", "rho"], sort=False).median().reset_index()


__all__ = ["GAP_COLUMNS", "gap_rows", "gap_summary"]
