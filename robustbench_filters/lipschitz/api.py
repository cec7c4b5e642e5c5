"""``estimate_lipschitz``: per-example lower bounds, certified upper bounds and per-layer profiles per model.

Output rows (one table, also ``rows.parquet`` of a ``lipschitz`` run folder), column ``layer`` tells them apart:

- ``layer == "model"``: one row per (model, example). ``lower`` is the method's per-example lower bound on the
  local Lipschitz constant; ``local_upper`` the certified constant on B(x0, rho); ``global_upper`` the
  certified constant on all inputs; ``radius`` the certified l2 radius of the prediction (see
  :func:`.certify.certified_radius`); ``margin`` top-1 minus top-2 logit; ``pred``/``label`` (-1: unknown).
- ``layer == "blocks.<i>"`` (``per_layer=True``): one row per (model, example, block). ``lower`` is the block
  map's Jacobian norm at the actual hidden state, ``local_upper``/``global_upper`` that block's constants.

Every row carries ``rho``, ``method`` and ``iterations``. Unused columns are NaN (floats) or -1 (ints). The
summary is recomputed from the rows (plus the per-layer factor table, which only depends on the weights).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from .. import distributed
from ..errors import RobfiltError, RunStateError
from ..models import create_model, resolve_spec
from ..parsing import positive_int
from ..progress import ProgressHook, null_progress
from ..results import RunWriter, load_run
from .certify import certified_radius, margins, trace_bounds
from .data import Inputs, load_inputs
from .jacobian import jacobian_norm_exact, jacobian_norm_power
from .methods import Method, parse_method
from .profile import layer_profile
from .ratio import pair_ratio_ascent
from .target import Kind, Target, make_target

log = logging.getLogger(__name__)

KIND = "lipschitz"
MODEL_LAYER = "model"
COLUMNS = (
    "model", "example_id", "layer", "method", "lower", "local_upper", "global_upper",
    "radius", "rho", "margin", "pred", "label", "iterations",
)  # fmt: skip
DEFINITIONS: dict[str, str] = {
    "norm": "l2 on the flattened input and on the output vector",
    "image_input": "[0, 1] pixels, flattened (the mean/std normaliser is inside the model)",
    "image_output": "the logit vector",
    "lm_input": "the token-embedding sequence (B, T, d) fed to forward_embeddings",
    "lm_output": "next-token logits at the last position",
    "lower": "rigorous lower bound on the local Lipschitz constant at x0 (Jacobian norm or pair ratio in B(x0, rho))",
    "local_upper": "certified Lipschitz constant on the ball B(x0, rho) (notes/lipschitz.md 1.5)",
    "global_upper": "certified Lipschitz constant on all inputs of the evaluated sequence length (LayerNorm eps > 0 "
    "makes it finite; it grows with the token count n through the attention factor)",
    "radius": "certified l2 radius (<= rho): no perturbation with ||delta|| < radius changes argmax f(x0)",
    "blocks.<i>": "block map h -> block(h) with Y_0 fixed, at the block's actual input h_l(x0)",
}
SANDWICH_RTOL = 1e-9  # float rounding when a bound is tight (a linear map: lower == upper == sigma_max)
RHO_GRID_DECADES = 6  # the certified radius also tries rho * 10^(-k/2), k = 1..12 (each radius is valid)


@dataclass
class LipschitzResult:
    """Per-example rows, per-block rows, the summary and the run folder (if written)."""

    examples: pd.DataFrame
    layers: pd.DataFrame
    summary: dict[str, Any]
    path: Path | None = None

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([self.examples, self.layers], ignore_index=True)


@dataclass
class _Settings:
    method: Method
    bounds: bool
    per_layer: bool
    rho: float
    power_iters: int
    tol: float
    ratio_steps: int
    batch_size: int
    seed: int
    rhos: list[float] = field(default_factory=list)


def _validate(
    n_examples: int, method: str | Method, rho: float, batch_size: int, power_iters: int, ratio_steps: int, tol: float
) -> Method:
    positive_int(n_examples, "--n-examples")
    positive_int(batch_size, "--batch-size")
    positive_int(power_iters, "power iterations")
    if int(ratio_steps) < 0:
        raise RobfiltError(f"ratio steps must be >= 0, got {ratio_steps}.")
    if not (math.isfinite(rho) and rho > 0):
        raise RobfiltError(f"--rho must be a positive finite l2 radius, got {rho}; pass e.g. 0.1.")
    if not (math.isfinite(tol) and tol >= 0):
        raise RobfiltError(f"tolerance must be >= 0, got {tol}.")
    return parse_method(method)


def _load_model(name: str, size: str, checkpoint: str | Path | None, seed: int) -> nn.Module:
    """Build by name directly on the manual attention path (no copy needed; see :mod:`.target`).

    Untrained weights (``checkpoint`` None/"none") are drawn from a seeded, forked RNG, so the same seed gives
    the same model (and ``--resume`` finds the same run) without touching the caller's RNG state.
    """
    if checkpoint is None or str(checkpoint).lower() == "none":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            return create_model(name, size, fused_attn=False)
    return create_model(name, size, checkpoint=checkpoint, fused_attn=False)


def _weights_hash(model: nn.Module) -> str:
    """Resume safety for models passed as objects: the run fingerprint includes their weights."""
    h = hashlib.sha256()
    for key, value in sorted(model.state_dict().items()):
        h.update(key.encode())
        h.update(value.detach().cpu().contiguous().view(-1).to(torch.float64).numpy().tobytes())
    return h.hexdigest()[:16]


def _tensor_hash(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]


@contextlib.contextmanager
def _no_tf32() -> Iterator[None]:
    """Certification numbers must not come from TF32 matmuls; restore the caller's setting afterwards."""
    old = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def _lower_bounds(target: Target, x: torch.Tensor, s: _Settings, gen: torch.Generator) -> tuple[torch.Tensor, int]:
    if s.method is Method.EXACT:
        return jacobian_norm_exact(target, x), 0
    power = jacobian_norm_power(
        target, x, iters=s.power_iters if s.method is Method.POWER else min(10, s.power_iters), tol=s.tol,
        generator=gen,
    )  # fmt: skip
    if s.method is Method.POWER:
        return power.sigma, power.iterations
    ratio = pair_ratio_ascent(target, x, s.rho, steps=s.ratio_steps, direction=power.v, box=target.box, generator=gen)
    return ratio, s.ratio_steps


def _batch_rows(target: Target, inputs: Inputs, batch: slice, s: _Settings, gen: torch.Generator) -> pd.DataFrame:
    x = target.inputs(inputs.x[batch])
    ids = inputs.ids[batch].cpu().numpy()
    labels = inputs.y[batch].cpu().numpy() if inputs.y is not None else np.full(len(ids), -1)
    b = len(ids)
    nan = np.full(b, np.nan)
    trace = None
    if s.bounds or s.per_layer:
        trace = trace_bounds(target, x, s.rhos)
        output = trace.output
    else:
        with torch.no_grad():
            output = target(x)
    pred, margin = margins(output) if output.shape[1] > 1 else (torch.full((b,), -1), torch.full((b,), math.nan))
    lower, iterations = _lower_bounds(target, x, s, gen)
    frame = pd.DataFrame(
        {
            "model": target.name,
            "example_id": ids.astype(np.int64),
            "layer": MODEL_LAYER,
            "method": s.method.value,
            "lower": lower.cpu().numpy(),
            "local_upper": trace.local_upper[:, 0].cpu().numpy() if trace else nan,
            "global_upper": trace.global_upper if trace else nan,
            "radius": certified_radius(margin, trace.local_upper, trace.rhos).cpu().numpy() if trace else nan,
            "rho": s.rho,
            "margin": margin.cpu().numpy(),
            "pred": pred.cpu().numpy().astype(np.int64),
            "label": np.asarray(labels).astype(np.int64),
            "iterations": iterations,
        }
    )
    if not s.per_layer:
        return frame
    if not trace.blocks:
        log.warning("%s has no transformer blocks; no per-layer rows", target.name)
        return frame
    prof = layer_profile(trace, iters=s.power_iters, tol=s.tol, generator=gen)
    prof["model"] = target.name
    prof["example_id"] = ids[prof.pop("batch_index").to_numpy()].astype(np.int64)
    prof["method"] = Method.POWER.value
    prof["radius"], prof["margin"], prof["rho"] = np.nan, np.nan, s.rho
    prof["pred"], prof["label"] = -1, -1
    return pd.concat([frame, prof[list(COLUMNS)]], ignore_index=True)


def _finite(values: pd.Series) -> pd.Series:
    return values[np.isfinite(values.to_numpy(dtype=float))]


def _sandwich_ok(group: pd.DataFrame) -> bool:
    """lower <= local_upper <= global_upper on every row (up to float rounding when a bound is tight)."""
    slack = 1 + SANDWICH_RTOL
    ok = (group["lower"] <= group["local_upper"] * slack) & (group["local_upper"] <= group["global_upper"] * slack)
    return bool(ok.all())


def summarize(rows: pd.DataFrame, factors: dict[str, list[dict]] | None = None) -> dict[str, Any]:
    """Per-model aggregates, recomputed from the rows; ``factors`` adds each model's certified factor table."""
    out: dict[str, Any] = {}
    examples = rows[rows["layer"] == MODEL_LAYER]
    for name, group in examples.groupby("model", sort=False):
        lower, local, glob = group["lower"], _finite(group["local_upper"]), _finite(group["global_upper"])
        lower_max = float(lower.max())
        upper = float(glob.max()) if len(glob) else None
        entry: dict[str, Any] = {
            "n_examples": int(len(group)),
            "method": str(group["method"].iloc[0]),
            "lower_mean": float(lower.mean()),
            "lower_max": lower_max,
            "local_upper_median": float(local.median()) if len(local) else None,
            "global_upper": upper,
            "log10_global_upper": math.log10(upper) if upper else None,
            "ratio_upper_lower": upper / lower_max if upper and lower_max > 0 else None,
            "ratio_local_lower_median": float((group["local_upper"] / group["lower"]).median()) if len(local) else None,
            "radius_mean": float(_finite(group["radius"]).mean()) if len(_finite(group["radius"])) else None,
            "sandwich_ok": _sandwich_ok(group) if len(local) else None,
        }  # fmt: skip
        layer_rows = rows[(rows["model"] == name) & (rows["layer"] != MODEL_LAYER)]
        entry["layers"] = [
            {
                "layer": layer,
                "lower_mean": float(g["lower"].mean()),
                "lower_max": float(g["lower"].max()),
                "local_upper_median": float(g["local_upper"].median()),
                "global_upper": float(g["global_upper"].max()),
            }
            for layer, g in layer_rows.groupby("layer", sort=False)
        ]
        if factors and name in factors:
            entry["factors"] = factors[name]
        out[str(name)] = entry
    return {"models": out, "definitions": DEFINITIONS}


def estimate_lipschitz(
    models: Sequence[str] | Sequence[nn.Module],
    n_examples: int = 16,
    method: str | Method = "exact",
    bounds: bool = True,
    per_layer: bool = False,
    data: str | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    checkpoint: str | Path | None = "zoo",
    resume: bool = False,
    overwrite: bool = False,
    progress: ProgressHook | None = None,
    *,
    size: str = "micro",
    inputs: torch.Tensor | None = None,
    labels: torch.Tensor | None = None,
    rho: float = 0.1,
    batch_size: int = 16,
    power_iters: int = 50,
    tol: float = 1e-5,
    ratio_steps: int = 20,
    seq_len: int = 64,
    dtype: str | torch.dtype | None = None,
    device: str | torch.device | None = None,
) -> LipschitzResult:
    """Lower and certified upper Lipschitz bounds for each model (see the module docstring for the rows).

    Args:
        models: registry names (built with ``size`` and ``checkpoint``: ``"zoo"``, a path, or ``None``/``"none"``
            for untrained weights) or ready ``nn.Module`` objects (never modified: estimators run on a copy
            when the attention path, mode or dtype has to change).
        n_examples: examples per model, selected by a seeded permutation of the test split.
        method: ``exact`` (dense Jacobian), ``power`` (power iteration) or ``ratio`` (pair-ratio ascent).
        bounds: compute the certified global/local bounds and the certified radius.
        per_layer: add per-block rows (implies the bound trace).
        data: ``fashion-mnist`` / ``austen`` (defaults per family), ``synthetic``, or ignored when ``inputs``
            is given (images in [0, 1], token ids or embeddings; ``labels`` optional).
        rho: radius of the ball B(x0, rho) of the local bound and of the pair-ratio ascent.
        dtype: default float64 on CPU and float32 (TF32 off) on GPU.
    """
    m = _validate(n_examples, method, rho, batch_size, power_iters, ratio_steps, tol)
    if not models:
        raise RobfiltError("no models given; pass e.g. --model deit,deit-grc.")
    device = torch.device(device) if device is not None else torch.device("cpu")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RobfiltError("--device cuda was requested but no CUDA device is available; use --device cpu.")
    ctx = distributed.init(str(device))
    device = torch.device(distributed.local_device(str(device), ctx))
    if dtype is None:
        dtype = torch.float64 if device.type == "cpu" else torch.float32
    elif isinstance(dtype, str):
        dtype = {"float32": torch.float32, "float64": torch.float64}.get(dtype)
        if dtype is None:
            raise RobfiltError("dtype must be 'float32' or 'float64' (never half precision for certificates).")
    progress = progress or null_progress
    settings = _Settings(m, bool(bounds), bool(per_layer), float(rho), int(power_iters), float(tol),
                         int(ratio_steps), int(batch_size), int(seed))  # fmt: skip
    settings.rhos = [rho * 10 ** (-k / 2) for k in range(2 * RHO_GRID_DECADES + 1)]

    # 1. validate and build everything before any output folder exists
    named = [x for x in models if isinstance(x, str)]
    for name in named:
        resolve_spec(name, size)
    if len({str(x) for x in named}) != len(named):
        raise RobfiltError("a model is listed twice; list each once.")
    built = [_load_model(x, size, checkpoint, seed) if isinstance(x, str) else x for x in models]
    targets = [make_target(mdl, dtype=dtype, device=device) for mdl in built]
    if len({t.name for t in targets}) != len(targets):
        raise RobfiltError("two models share a name; give each model object a distinct robfilt_spec or pass names.")
    model_inputs: list[Inputs] = []
    for t in targets:
        if inputs is not None:
            if len(inputs) < n_examples:
                raise RobfiltError(f"inputs hold {len(inputs)} examples but n_examples is {n_examples}.")
            y = labels[:n_examples] if labels is not None else None
            model_inputs.append(Inputs(x=inputs[:n_examples], y=y, ids=torch.arange(n_examples)))
        else:
            model_inputs.append(load_inputs(t, data, n_examples, seed, seq_len))
    factors: dict[str, list[dict]] = {}
    if settings.bounds or settings.per_layer:
        for t, inp in zip(targets, model_inputs, strict=True):
            factors[t.name] = trace_bounds(t, t.inputs(inp.x[:1]), settings.rhos[:1]).factors  # coverage check

    config = {
        "models": [t.name for t in targets],
        "weights": {t.name: _weights_hash(t.model) for t in targets},
        "size": size, "checkpoint": None if checkpoint is None else str(checkpoint),
        "n_examples": n_examples, "method": m.value, "bounds": settings.bounds, "per_layer": settings.per_layer,
        "data": "inputs:" + _tensor_hash(inputs) if inputs is not None else data, "rho": settings.rho,
        "power_iters": settings.power_iters, "tol": settings.tol, "ratio_steps": settings.ratio_steps,
        "batch_size": settings.batch_size, "seq_len": seq_len, "dtype": str(dtype).replace("torch.", ""),
    }  # fmt: skip

    batches = [slice(i, i + batch_size) for i in range(0, n_examples, batch_size)]
    units = [(ti, j) for ti in range(len(targets)) for j in range(len(batches))]  # sharded whole, never split
    keys = {u: f"{targets[u[0]].name}-{u[1]:04d}" for u in units}
    mine = distributed.shard(units, ctx.rank, ctx.world_size)

    def make_writer(primary: bool) -> RunWriter:
        return RunWriter(out, KIND, config, seed=seed, resume=resume, overwrite=overwrite, primary=primary)

    def compute(writer: RunWriter | None) -> dict[str, pd.DataFrame]:
        frames: dict[str, pd.DataFrame] = {}
        totals = {ti: sum(1 for u in mine if u[0] == ti) for ti, _ in mine}
        counts = dict.fromkeys(totals, 0)
        for ti, j in mine:
            t, key = targets[ti], keys[(ti, j)]
            if writer is not None and writer.is_done(key):
                frames[key] = writer.load_part(key)
            else:
                gen = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(key.encode()))
                frames[key] = _batch_rows(t, model_inputs[ti], batches[j], settings, gen)
                if writer is not None:
                    writer.write_part(key, frames[key])
            counts[ti] += 1
            progress(f"lipschitz {t.name}", counts[ti], totals[ti])
        return frames

    def merge(writer: RunWriter | None, frames: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, dict[str, Any]]:
        """All units in one-process order (other ranks' units from their part files), the summary, the folder."""
        if writer is not None:
            writer.refresh()
            missing = [k for k in keys.values() if k not in frames and not writer.is_done(k)]
            if missing:
                raise RunStateError(
                    f"{len(missing)} units have no part file (first: {missing[0]}); with several nodes, --out must "
                    "be on a filesystem they all share. Finish the run with --resume."
                )
        rows = pd.concat(
            [frames[k] if k in frames else writer.load_part(k) for k in keys.values()],  # type: ignore[union-attr]
            ignore_index=True,
        )
        summary = summarize(rows, factors)
        if writer is not None:
            writer.finish(rows, summary)
        return rows, summary

    with contextlib.ExitStack() as stack:
        stack.enter_context(_no_tf32())
        writer = stack.enter_context(distributed.shared_run(ctx, make_writer)) if out is not None else None
        frames = distributed.all_or_none(ctx, lambda: compute(writer))
        if writer is None:  # no shared folder: every rank gets every rank's rows
            frames = {k: f for part in distributed.all_gather(ctx, frames) for k, f in part.items()}
        primary_merges = writer is None or ctx.is_primary
        merged = distributed.all_or_none(ctx, lambda: merge(writer, frames) if primary_merges else None)
    if merged is not None:
        rows, summary = merged
    else:  # the other ranks read what rank 0 merged
        run = load_run(out)
        rows, summary = run.rows, {k: v for k, v in run.summary.items() if k not in ("schema_version", "fingerprint")}
    log.info("%d examples x %d models done", n_examples, len(targets))
    is_model = rows["layer"] == MODEL_LAYER
    return LipschitzResult(
        examples=rows[is_model].reset_index(drop=True),
        layers=rows[~is_model].reset_index(drop=True),
        summary=summary,
        path=Path(out) if out is not None else None,
    )


__all__ = ["COLUMNS", "DEFINITIONS", "LipschitzResult", "Kind", "estimate_lipschitz", "summarize"]
