"""Verified robustness: lower bounds of the margins ``z_y - z_t`` over ``B_inf(x0, eps) ∩ [0, 1]^d``.

Methods (the cost grows down the list, and so does the tightness):

- ``ibp``: interval bound propagation alone;
- ``crown-ibp``: relaxations built on the IBP intervals, then CROWN's backward pass from the margins;
- ``crown`` (default): relaxations built on forward linear bounds of every intermediate node (met with IBP's),
  re-tightened by back-substitution (``refresh``: ``deep``, the default, re-weights every error since the input at
  the residual stream after each attention sublayer; ``full`` also every residual and LayerNorm variance; ``all``
  every bound a relaxation reads, about 6 times ``full``'s cost; ``inner`` stops at the previous sublayer, about a
  third of ``deep``'s cost and much looser beyond eps ~ 1e-4 on the zoo DeiTs; ``none``), then the backward pass
  from the margins.

Every method's margins are met with the cheaper ones' (elementwise max), so ``crown`` is never looser than IBP.
An example is verified when every margin lower bound exceeds ``min_margin`` (default 1e-4 logits): the bound is
of the model's function computed in float64, and the default keeps a float32 evaluation of the same model (what
an attack runs) from contradicting it by rounding.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import torch
from torch import nn

from ..core.errors import RobfiltError
from .build import build_graph
from .domain import Domain, linf_domain
from .graph import Graph
from .propagate import REFRESH_SUFFIXES, Cost, backsub, ibp_pass, linear_pass, relax_on

log = logging.getLogger(__name__)

METHODS = ("ibp", "crown-ibp", "crown")
REFRESH = tuple(REFRESH_SUFFIXES)
MIN_MARGIN = 1e-4


@dataclass(frozen=True)
class Verdict:
    """One example at one eps: the margin lower bounds (NaN at the label), the status and what it cost."""

    index: int  # position in the inputs given
    label: int
    eps: float
    method: str
    margins: tuple[float, ...]
    verified: bool
    passes: float  # model-equivalent forward passes spent on this example
    seconds: float  # wall time of its batch divided by the batch size

    @property
    def worst(self) -> float:
        """The smallest margin lower bound over the wrong classes (> min_margin iff verified)."""
        return min((m for i, m in enumerate(self.margins) if i != self.label), default=math.inf)


@dataclass(frozen=True)
class Settings:
    method: str = "crown"
    refresh: str = "deep"
    window: int = 0
    min_margin: float = MIN_MARGIN
    chunk: int = 512


def margin_bounds(graph: Graph, domain: Domain, y: torch.Tensor, settings: Settings, cost: Cost) -> torch.Tensor:
    """Lower bounds (B, C) of z_y - z_t over ``domain`` (the entry at y is meaningless)."""
    g = graph.with_margin(y)
    ibp = ibp_pass(g, domain, cost)
    lower = ibp[g.output].lo
    if settings.method == "ibp":
        return lower
    return torch.fmax(lower, torch.nan_to_num(_linear_bounds(g, domain, ibp, settings, cost), nan=-torch.inf))


def _linear_bounds(g: Graph, domain: Domain, ibp: list, settings: Settings, cost: Cost) -> torch.Tensor:
    """The margin lower bounds of the two linear methods (NaN where an overflow left no bound)."""
    lower = ibp[g.output].lo
    b, c = lower.shape
    lam = torch.eye(c, dtype=lower.dtype, device=lower.device).expand(b, c, c)
    if settings.method == "crown-ibp":
        prop = relax_on(g, domain, ibp)
        lam_in, mid, err = backsub(g, prop.rels, g.output, lam, cost)
        return domain.concretize_rows(lam_in).lo + mid - err
    prop = linear_pass(g, domain, ibp, cost, refresh=settings.refresh, window=settings.window, chunk=settings.chunk)
    lam_in, mid, err = backsub(g, prop.rels, g.output, lam, cost)
    crown = domain.concretize_rows(lam_in).lo + mid - err
    return torch.fmax(prop.bounds[g.output].lo, crown)


class Verifier:
    """The graph of one model, built and checked once; :meth:`verify` bounds batches of examples with it.

    ``model``: a robfilt/timm DeiT or a plain ``nn.Sequential`` (:data:`.support.SUPPORTED`); anything else raises a
    one-line :class:`RobfiltError`. ``device``: where the bounds are computed (default: the model's).
    """

    def __init__(
        self,
        model: nn.Module,
        input_shape: tuple[int, ...],
        *,
        device: torch.device | str | None = None,
        dtype: torch.dtype = torch.float64,
        name: str | None = None,
    ) -> None:
        param = next(model.parameters(), None)
        own = param.device if param is not None else torch.device("cpu")
        self.device = torch.device(device) if device is not None else own
        self.dtype = dtype
        self.graph = build_graph(model, tuple(input_shape), dtype=dtype, device=self.device, name=name)

    def verify(
        self,
        x: torch.Tensor,
        y: torch.Tensor,
        eps: float,
        *,
        method: str = "crown",
        refresh: str = "deep",
        window: int = 0,
        min_margin: float = MIN_MARGIN,
        batch_size: int = 1,
        offset: int = 0,
    ) -> list[Verdict]:
        """One :class:`Verdict` per example of ``x`` (B, *input_shape) in [0, 1] with labels ``y`` (B,)."""
        settings = _settings(method, refresh, window, min_margin, eps)
        x = x.to(self.device, self.dtype)
        y = y.to(self.device, torch.long)
        if x.shape[0] != y.shape[0]:
            raise RobfiltError(f"got {x.shape[0]} inputs and {y.shape[0]} labels; pass one label per input.")
        out: list[Verdict] = []
        with torch.no_grad():
            for start in range(0, x.shape[0], max(1, int(batch_size))):
                xb, yb = x[start : start + batch_size], y[start : start + batch_size]
                cost = Cost(self.graph.macs() * xb.shape[0])
                t0 = time.perf_counter()
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                lower = margin_bounds(self.graph, linf_domain(xb, eps), yb, settings, cost)
                if self.device.type == "cuda":
                    torch.cuda.synchronize(self.device)
                seconds = (time.perf_counter() - t0) / xb.shape[0]
                lower = torch.nan_to_num(lower, nan=-math.inf).cpu()
                for i in range(xb.shape[0]):
                    label = int(yb[i])
                    row = [float("nan") if t == label else float(v) for t, v in enumerate(lower[i].tolist())]
                    wrong = [v for t, v in enumerate(row) if t != label]
                    out.append(Verdict(offset + start + i, label, float(eps), settings.method, tuple(row),
                                       bool(wrong) and min(wrong) > settings.min_margin, cost.passes, seconds))  # fmt: skip
        return out


def _settings(method: str, refresh: str, window: int, min_margin: float, eps: float) -> Settings:
    if method not in METHODS:
        raise RobfiltError(f"unknown bound method {method!r}; use one of {', '.join(METHODS)}.")
    if refresh not in REFRESH:
        raise RobfiltError(f"unknown refresh {refresh!r}; use one of {', '.join(REFRESH)}.")
    if not (eps >= 0 and math.isfinite(eps)):
        raise RobfiltError(f"eps must be a finite number >= 0, got {eps}.")
    return Settings(method, refresh, int(window), float(min_margin))


def verify(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    eps: float,
    *,
    method: str = "crown",
    device: torch.device | str | None = None,
    batch_size: int = 1,
    **options,
) -> list[Verdict]:
    """Bound the margins of ``model`` at every example of ``x`` over B_inf(x, eps) ∩ [0, 1]^d (see the module
    docstring); ``options`` go to :meth:`Verifier.verify` (``refresh``, ``window``, ``min_margin``)."""
    verifier = Verifier(model, tuple(x.shape[1:]), device=device)
    return verifier.verify(x, y, eps, method=method, batch_size=batch_size, **options)
