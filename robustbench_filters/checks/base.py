"""What every sanity check shares: the :class:`~..summaries.base.Check` record it returns (status ``pass``, ``warn``
or ``fail`` and a one-line detail, the very record ``summary.json`` stores), the eps-ball tolerance and row
selection. A failing check is shown as failing, never dropped.
Checks are grouped by what they check: :mod:`.model` (probing a model), :mod:`.image`, :mod:`.lm`,
:mod:`.corruption` (rows of one kind of run). They follow Carlini et al.'s checklist and AutoAttack's flags.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..summaries.base import FAIL, PASS, WARN, Check, ChecksSummary

if TYPE_CHECKING:  # the rows are pandas frames; this module stays light to import
    import pandas as pd

EPS_TOL = 1e-5  # float32 slack when verifying the eps-ball


def ball_tolerance(eps: float) -> float:
    return eps * EPS_TOL + 1e-6


def model_rows(rows: pd.DataFrame, model: str, kind: str | None = None) -> pd.DataFrame:
    """One model's rows of a run's table, of one ``kind`` (clean, adversarial, contamination, ...) when given:
    every row check starts from this selection."""
    sub = rows[rows.model == model]
    return sub if kind is None else sub[sub["kind"] == kind]


def all_passed(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)


__all__ = ["EPS_TOL", "FAIL", "PASS", "WARN", "Check", "ChecksSummary", "all_passed", "ball_tolerance", "model_rows"]
