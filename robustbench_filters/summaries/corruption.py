"""The summary of a corruption run (kind ``corruption``): accuracy per corruption and severity, mean accuracy and
(m)CE against the baseline model, as :meth:`robustbench_filters.attacks.corruption.Corruptions.summarise` writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import Check, Checked, ChecksSummary, RunHead, Summary
from .image import Accuracy
from .record import Record, optional


@dataclass(frozen=True, kw_only=True)
class SeverityAccuracy(Record):
    severity: int
    acc: float
    lo: float
    hi: float
    n: int
    correct: int


@dataclass(frozen=True, kw_only=True)
class CorruptionResult(Record):
    by_severity: list[SeverityAccuracy]
    mean_acc: float
    ce: float | None = optional()  # only with a baseline model in the run
    relative_ce: float | None = optional()


@dataclass(frozen=True, kw_only=True)
class CorruptionModelResults(Record):
    clean: Accuracy
    corruptions: dict[str, CorruptionResult]
    mean_acc: float
    mean_acc_lo: float | None = optional()
    mean_acc_hi: float | None = optional()
    mce: float | None
    relative_mce: float | None


@dataclass(frozen=True, kw_only=True)
class CorruptionSummary(Checked, RunHead, Summary):
    attacks: list[str]
    corruptions: list[str]
    severities: list[int]
    parameters: list[dict[str, Any]]  # each corruption's parameters per severity
    baseline: str | None
    models: dict[str, CorruptionModelResults]
    checks: list[Check]
    checks_summary: ChecksSummary


__all__ = ["CorruptionModelResults", "CorruptionResult", "CorruptionSummary", "SeverityAccuracy"]
