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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..checks import Check
from ..checks.logits import check_finite_rows, require_logits
from ..checks.model import require_model_device
from ..configs import LipschitzConfig
from ..configs.options import is_module
from ..core.errors import RobfiltError, UserCodeError
from ..core.family import Family
from ..core.names import Method
from ..core.seeds import derived_seed
from ..data.labels import check_labels_fit
from ..models import create_model
from ..models.factory import UNTRAINED, wants_untrained
from ..models.ref import ModelRef
from ..runs.measurement import Measurement, PrepareContext, Tick
from ..runs.units import Unit, batch_slices, example_count
from ..summaries import LipschitzSummary
from .constants import empirical_only

if TYPE_CHECKING:
    from ..runs.runner import RunResult
from .certify import certified_radius, margins, trace_bounds
from .chain import build_chain
from .data import DEFAULT_DATA, Inputs, given_inputs, load_inputs
from .jacobian import jacobian_norm_exact, jacobian_norm_power
from .profile import layer_profile
from .ratio import pair_ratio_ascent
from .summary import COLUMNS, DEFINITIONS, GAP, MODEL_LAYER, lipschitz_checks, summarize
from .target import Target, make_target

log = logging.getLogger(__name__)

RHO_GRID_DECADES = 6  # the certified radius also tries rho * 10^(-k/2), k = 1..12 (each radius is valid)


@dataclass
class LipschitzResult:
    """Per-example rows, per-block rows, the summary and the run folder (if written)."""

    examples: pd.DataFrame
    layers: pd.DataFrame
    summary: LipschitzSummary
    path: Path | None = None
    gap: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([self.examples, self.layers, self.gap], ignore_index=True)


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


def _load_model(ref: ModelRef, config: LipschitzConfig) -> nn.Module:
    """Build by name directly on the manual attention path (no copy needed; see :mod:`.target`).

    Untrained weights (``checkpoint="none"``; None is the zoo default) are drawn from a seeded, forked RNG, so the same seed gives
    the same model (and ``--resume`` finds the same run) without touching the caller's RNG state. ``timm:`` and
    factory references (and any with arguments or ``--model-arg``) load like everywhere else
    (:func:`..models.loading.load_model`); the target switches a fused-attention copy to the manual path.
    """
    from ..models.loading import Loading, load_model
    from ..models.ref import ModelKind

    how = Loading.of(config)
    size, checkpoint, seed = how.size, how.checkpoint, how.seed
    if ref.kind is not ModelKind.REGISTRY or ref.args:
        return load_model(ref, how).module
    name = ref.target
    if wants_untrained(checkpoint):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derived_seed(seed, 1_000_003, zlib.crc32(name.encode())))
            return create_model(name, size, checkpoint=UNTRAINED, fused_attn=False)
    return create_model(name, size, checkpoint=checkpoint, fused_attn=False)


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


def _check_outputs(target: Target, inputs: Inputs, data: str) -> int:
    """Refuse, before any folder is written, a model whose outputs are not finite logits ((batch, outputs);
    (batch, seq, vocab) for an LM), or labels that are not indices of those outputs; return the output width."""
    x = target.inputs(inputs.x[:2])
    try:
        with torch.no_grad():
            out = target.model.forward_embeddings(x) if target.family is Family.LM else target.model(x)
    except Exception as exc:  # noqa: BLE001 - the user's forward may raise anything
        raise UserCodeError.wrap(target.name, "its first forward pass", exc, "fix it, then rerun") from None
    rank = 3 if target.family is Family.LM else 2
    width = require_logits(out, len(x), model=target.name, rank=rank, min_classes=1, where="the first examples")
    inputs.settle_labels(width, target.name, data)  # an image folder's labels depend on the class count
    if inputs.y is not None:
        check_labels_fit(inputs.y, width, model=target.name, data=data)
    return width


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
    finite = torch.isfinite(output).all(1).to(pred.device)  # a non-finite output is no prediction (never class 0)
    pred = torch.where(finite, pred, -1)
    margin = torch.where(finite.to(margin.device), margin, math.nan)
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


def _gap_rows(
    target: Target, inputs: Inputs, batch: slice, config: LipschitzConfig, gen: torch.Generator
) -> pd.DataFrame:
    """Empirical gain, layerwise estimate (not certified), certified local and global, per example and block."""
    from .research import LocalOptions, gap_rows

    x = target.inputs(inputs.x[batch])
    ids = inputs.ids[batch].cpu().numpy()
    options = LocalOptions() if config.gap_taylor else LocalOptions(taylor=False)
    rows = gap_rows(target, x, ids, config.gap_rhos, options=options, power_iters=config.power_iters, generator=gen,
                    crown=config.gap_crown_refresh if config.gap_crown else None)  # fmt: skip
    rows["layer"] = GAP + rows["layer"].astype(str)
    return rows


class Lipschitz(Measurement):
    """Per-example lower bounds and certified upper bounds (and per-block profiles) for each model."""

    config: LipschitzConfig

    def prepare(self, ctx: PrepareContext) -> None:
        c = self.config
        self.device = ctx.device
        self.dtype = {"float32": torch.float32, "float64": torch.float64}.get(c.dtype or "") or (
            torch.float64 if ctx.device.type == "cpu" else torch.float32
        )
        self.settings = _Settings(Method(c.method), bool(c.bounds), bool(c.per_layer), float(c.rho),
                                  int(c.power_iters), float(c.tol), int(c.ratio_steps), int(c.batch_size), int(c.seed))  # fmt: skip
        self.settings.rhos = [c.rho * 10 ** (-k / 2) for k in range(2 * RHO_GRID_DECADES + 1)]
        self.built = [m if is_module(m) else _load_model(m, c) for m in c.refs]
        for m, label in zip(self.built, c.labels, strict=True):
            require_model_device(m, label, ctx.device)
        # a reference's label (its display name or the reference, with --model-arg merged in) names it, as in
        # attack and certify runs
        names_given = [None if is_module(m) else label for m, label in zip(c.refs, c.labels, strict=True)]
        self.targets = [
            make_target(m, name=name, dtype=self.dtype, device=ctx.device)
            for m, name in zip(self.built, names_given, strict=True)
        ]
        for t in self.targets:
            if (self.settings.bounds or self.settings.per_layer or c.gap) and hasattr(t.model, "rolling"):
                raise RobfiltError(
                    f"{t.name}: certified bounds cover robfilt's own DeiTs and LMs, not Hugging Face models; "
                    f"{empirical_only()} (in embedding space)."
                )
        names = [t.name for t in self.targets]
        if len(set(names)) != len(names):
            raise RobfiltError(
                f"two models share a name ({', '.join(names)}); give them distinct names (name=ref for references)."
            )
        self.inputs: list[Inputs] = []
        self.outputs: list[int] = []  # each model's output width (classes); its labels must index it
        for t in self.targets:
            if c.inputs is not None:
                inp = given_inputs(t, c.inputs, c.input_labels, example_count(len(c.inputs), c.n_examples))
            else:
                select = lambda total, n, name=t.name: ctx.select(total, n, name=name, ordered=False)  # noqa: E731
                inp = load_inputs(t, c, select)
            ctx.record_data(t.name, _tensor_hash(inp.x))
            data = "the inputs" if c.inputs is not None else c.data or DEFAULT_DATA.get(t.family, "the data")
            self.outputs.append(_check_outputs(t, inp, data))
            if inp.class_map is not None:  # the labels a class map gave enter the fingerprint, with the map
                ctx.examples[t.name]["labels"] = {**inp.class_map, "labels_sha256": _tensor_hash(inp.y)}
            self.inputs.append(inp)
        if c.gap:  # a model the gap's certified rows (or CROWN's) cannot cover is refused before any unit runs
            from .research.gap import require_crown

            for t, inp in zip(self.targets, self.inputs, strict=True):
                x1 = t.inputs(inp.x[:1])
                build_chain(t, x1)
                if c.gap_crown:
                    require_crown(t, tuple(x1.shape[1:]))
        self.factors: dict[str, list[dict]] = {}
        if self.settings.bounds or self.settings.per_layer:
            for t, inp in zip(self.targets, self.inputs, strict=True):
                self.factors[t.name] = trace_bounds(t, t.inputs(inp.x[:1]), self.settings.rhos[:1]).factors
        self.n_examples = len(self.inputs[0].x)
        self.batches = batch_slices(self.n_examples, c.batch_size)

    @property
    def labels(self) -> list[str]:
        return [t.name for t in self.targets]

    def modules(self) -> list[nn.Module]:
        return list(self.built)

    def describe(self) -> dict[str, Any]:
        c, s = self.config, self.settings
        return {
            "models": self.labels, "size": c.size, "checkpoint": None if c.checkpoint is None else str(c.checkpoint),
            "n_examples": self.n_examples, "method": s.method.value, "bounds": s.bounds, "per_layer": s.per_layer,
            "data": "inputs:" + _tensor_hash(c.inputs) if c.inputs is not None else c.data, "rho": s.rho,
            "power_iters": s.power_iters, "tol": s.tol, "ratio_steps": s.ratio_steps, "batch_size": s.batch_size,
            "seq_len": c.seq_len, "dtype": str(self.dtype).replace("torch.", ""),
            **({"gap_rhos": list(c.gap_rhos), "gap_taylor": c.gap_taylor} if c.gap else {}),
            **({"gap_crown": True} if c.gap_crown else {}),  # absent when off: older --gap runs still resume
            # absent at its first value (all) for the same reason: --gap-crown runs made before the option resume
            **({"gap_crown_refresh": c.gap_crown_refresh} if c.gap_crown and c.gap_crown_refresh != "all" else {}),
        }  # fmt: skip

    def plan(self) -> list[Unit]:
        parts = ["lipschitz", "gap"] if self.config.gap else ["lipschitz"]
        return [Unit(ti, p, j) for ti in range(len(self.targets)) for p in parts for j in range(len(self.batches))]

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        with _no_tf32():
            yield

    def measure(self, unit: Unit, tick: Tick) -> pd.DataFrame:
        t = self.targets[unit.model]
        key = f"{t.name}-{unit.batch:04d}"  # the generator seed keeps the name-based key of format 1 runs
        gen = torch.Generator().manual_seed(derived_seed(self.settings.seed, 1_000_003, zlib.crc32(key.encode())))
        if unit.part == "gap":
            rows = _gap_rows(t, self.inputs[unit.model], self.batches[unit.batch], self.config, gen)
        else:
            rows = _batch_rows(t, self.inputs[unit.model], self.batches[unit.batch], self.settings, gen)
        tick(1)
        return rows

    def row_checks(self, rows: pd.DataFrame, label: str) -> list[Check]:
        width = self.outputs[self.labels.index(label)]
        examples = rows[(rows["model"] == label) & (rows["layer"] == MODEL_LAYER)]
        bad = ~np.isfinite(examples["lower"].to_numpy(float))
        if width > 1:  # pred is -1 exactly where the logits were not finite (a single output has no prediction)
            bad |= examples["pred"].to_numpy() < 0
        return [check_finite_rows(pd.Series(bad), label, "examples"), *lipschitz_checks(rows, label)]

    def summarise(self, rows: pd.DataFrame, checks: list[Check]) -> LipschitzSummary:
        return summarize(rows, self.factors, checks)


def lipschitz_result(result: RunResult) -> LipschitzResult:
    """A finished Lipschitz run as its three tables (model rows, per-block rows, gap rows) and summary."""
    layer = result.rows["layer"].astype(str)
    is_model, is_gap = layer == MODEL_LAYER, layer.str.startswith(GAP)
    return LipschitzResult(
        examples=result.rows[is_model].reset_index(drop=True)[list(COLUMNS)],
        layers=result.rows[~is_model & ~is_gap].reset_index(drop=True)[list(COLUMNS)],
        gap=result.rows[is_gap].reset_index(drop=True),
        summary=result.summary,
        path=result.out,
    )


__all__ = ["COLUMNS", "DEFINITIONS", "Lipschitz", "LipschitzResult", "lipschitz_result", "summarize"]
