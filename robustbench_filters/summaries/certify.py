"""The summary of a randomized-smoothing run (kind ``certify``), as
:meth:`robustbench_filters.smoothing.run.Certify.summarise` writes it: per model and noise level (keyed ``f"{sigma:g}"``)
the certified accuracy at each radius with its Clopper-Pearson interval and the counts behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Check, Checked, ChecksSummary, RunHead, Summary
from .record import Record


@dataclass(frozen=True, kw_only=True)
class CertifiedAt(Record):
    """Certified accuracy at one L2 radius: ``certified`` of ``n_examples`` certified correct."""

    radius: float
    certified_acc: float
    ci_low: float
    ci_high: float
    certified: int
    n_examples: int


@dataclass(frozen=True, kw_only=True)
class SigmaCertificates(Record):
    """One smoothed classifier (one sigma) of a model."""

    abstain_rate: float
    clean_smoothed_acc: float
    certified: list[CertifiedAt]


@dataclass(frozen=True, kw_only=True)
class CertifySummary(Checked, RunHead, Summary):
    sigmas: list[float]
    n0: int
    n: int
    alpha: float
    max_certifiable_radius: dict[str, float]  # sigma key -> the largest radius n draws at alpha can certify
    models: dict[str, dict[str, SigmaCertificates]]  # model -> sigma key -> certificates
    curve: list[dict[str, Any]]  # certified accuracy on a radius grid (the paper's plot)
    empirical_l2: list[dict[str, Any]]  # the SmoothAdv soundness attack's accuracies
    checks: list[Check]
    checks_summary: ChecksSummary


__all__ = ["CertifiedAt", "CertifySummary", "SigmaCertificates"]
