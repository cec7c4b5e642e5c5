"""The sanity-check record every measurement reports, and how a list of them is summarised.

Each check returns a :class:`Check` with status ``pass``, ``warn`` or ``fail`` and a one-line detail. They are
shown in the console table and stored in ``summary.json``; a failing check is shown as failing, never dropped.
Checks are grouped by what they check: :mod:`.model` (probing a model), :mod:`.image`, :mod:`.lm`,
:mod:`.corruption` (rows of one kind of run). They follow Carlini et al.'s checklist and AutoAttack's flags.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the rows are pandas frames; this module stays light to import
    import pandas as pd

PASS, WARN, FAIL = "pass", "warn", "fail"
EPS_TOL = 1e-5  # float32 slack when verifying the eps-ball


@dataclass
class Check:
    name: str
    model: str
    status: str
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


def ball_tolerance(eps: float) -> float:
    return eps * EPS_TOL + 1e-6


def model_rows(rows: pd.DataFrame, model: str, kind: str | None = None) -> pd.DataFrame:
    """One model's rows of a run's table, of one ``kind`` (clean, adversarial, contamination, ...) when given:
    every row check starts from this selection."""
    sub = rows[rows.model == model]
    return sub if kind is None else sub[sub["kind"] == kind]


def all_passed(checks: list[Check]) -> bool:
    return all(c.status != FAIL for c in checks)


def summarize(checks: list[Check]) -> dict:
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, WARN, FAIL)}
    return {"passed": all_passed(checks), **counts}
