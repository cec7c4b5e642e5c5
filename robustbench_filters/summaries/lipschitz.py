"""The summary of a Lipschitz run (kind ``lipschitz``), as :func:`robustbench_filters.lipschitz.summary.summarize`
writes it: per model the lower bounds, the certified local and global upper bounds with their vacuity flags
(:mod:`robustbench_filters.stats.vacuity`; older runs lack the flags), per block the same, and with ``--gap`` the median
log10 of each bound per layer and ball radius.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Check, Checked, ChecksSummary, Summary
from .record import Record, optional


@dataclass(frozen=True, kw_only=True)
class LipschitzLayer(Record):
    """One block's bounds (``--per-layer``)."""

    layer: str
    lower_mean: float
    lower_mean_lo: float | None = optional()
    lower_mean_hi: float | None = optional()
    lower_max: float
    local_upper_median: float
    global_upper: float
    global_upper_vacuous: bool | None = optional()
    local_upper_vacuous: bool | None = optional()


@dataclass(frozen=True, kw_only=True)
class LipschitzModel(Record):
    """A model's bounds over the examples (``None`` where a bound was not computed, e.g. ``--no-bounds``)."""

    n_examples: int
    method: str
    lower_mean: float
    lower_mean_lo: float | None = optional()
    lower_mean_hi: float | None = optional()
    lower_max: float
    local_upper_median: float | None
    global_upper: float | None
    log10_global_upper: float | None
    ratio_upper_lower: float | None
    ratio_local_lower_median: float | None
    radius_mean: float | None
    sandwich_ok: bool | None
    global_upper_vacuous: bool | None = optional()
    local_upper_vacuous: bool | None = optional()
    radius_vacuous: bool | None = optional()
    layers: list[LipschitzLayer]
    factors: list[dict[str, Any]] = optional()  # the certified factor table (depends on the weights only)


@dataclass(frozen=True, kw_only=True)
class GapMedian(Record):
    """Median log10 of each bound over the examples, per (model, layer, rho) (``--gap``)."""

    model: str
    layer: str
    rho: float
    empirical: float | None
    layerwise_estimate: float | None
    local_upper: float | None
    local_first_order: float | None
    local_taylor: float | None
    baseline_local: float | None
    global_upper: float | None
    local_crown: float | None = optional()  # written since 2026-12-06 (issue 43)
    local_upper_vacuous: bool | None = optional()
    local_crown_vacuous: bool | None = optional()
    global_upper_vacuous: bool | None = optional()


@dataclass(frozen=True, kw_only=True)
class LipschitzSummary(Checked, Summary):
    models: dict[str, LipschitzModel]
    definitions: dict[str, str]
    vacuity: dict[str, Any] = optional()  # the rule that flags a certified number as vacuous
    gap_log10_median: list[GapMedian] = optional()
    checks: list[Check]
    checks_summary: ChecksSummary


__all__ = ["GapMedian", "LipschitzLayer", "LipschitzModel", "LipschitzSummary"]
