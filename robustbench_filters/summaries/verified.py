"""The summary of a verified-robustness run (kind ``verified``: ``robfilt certify --method ibp|crown-ibp|crown``), as
:meth:`robustbench_filters.crown.run.Verified.summarise` writes it: per model and Linf eps, how many examples are
clean-correct, robust under the default attack, verified by the bounds, and neither verified nor broken.

Every example at every eps is one of: ``verified`` (every wrong class's margin lower bound over the box is above
the run's margin), ``broken`` (misclassified, or the attack found a misclassified point within eps), ``unknown``
(neither) or ``contradicted`` (verified *and* broken: a wrong bound, which fails the run's soundness check). So
``verified <= robust <= clean`` per model and eps unless a bound is wrong, and ``unknown`` is how far apart the two
sides of the evaluation still are.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Check, Checked, ChecksSummary, RunHead, Summary
from .record import Record


@dataclass(frozen=True, kw_only=True)
class VerifiedAt(Record):
    """One model at one eps: counts of the ``n_examples`` examples and their shares (of all of them)."""

    eps: float
    n_examples: int
    clean: int  # classified correctly at the clean input
    robust: int  # clean-correct and not broken by the attack at this eps
    verified: int  # every wrong-class margin bound above min_margin (contradicted ones included)
    unknown: int  # clean-correct, neither verified nor broken
    contradicted: int  # verified and broken: a wrong bound (the soundness check fails)
    clean_acc: float
    robust_acc: float
    verified_acc: float
    unknown_share: float
    verified_of_clean: float  # verified / clean (NaN-free: 0 when nothing is clean-correct)


@dataclass(frozen=True, kw_only=True)
class VerifiedSummary(Checked, RunHead, Summary):
    method: str  # ibp | crown-ibp | crown
    refresh: str  # crown's refresh (deep | inner | none); "none" for the other methods
    min_margin: float
    attack: str  # the attack that breaks examples (robfilt's default)
    eps: list[float]
    models: dict[str, list[VerifiedAt]]  # model -> one entry per eps, ascending
    bound_passes: dict[str, float]  # model -> mean model-equivalent passes per bound computed
    checks: list[Check]
    checks_summary: ChecksSummary


__all__ = ["VerifiedAt", "VerifiedSummary"]
