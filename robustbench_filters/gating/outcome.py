"""What a gate decided: the :class:`Requirement` a spec states, one :class:`Outcome` per check, the planned
minimum detectable effects (:class:`PlannedCheck`) and the :class:`GateResult` of a whole gate.

These are plain records: the decisions come from :mod:`.decide` (through :mod:`.judge`), the files from
:mod:`.output`. Statuses are the strings ``pass`` / ``warn`` / ``fail`` so the JSON output stays plain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..core.errors import RegressionError
from .metrics import ACCURACIES, condition
from .modes import BaselinePolicy, Mode, Status

PASS, WARN, FAIL = Status.PASS.value, Status.WARN.value, Status.FAIL.value
RULE = (
    "thresholds: interval mode fails when the whole 95% CI misses the limit, point mode when the value does; "
    "baselines: paired mode fails when a one-sided test on the same examples (exact McNemar, the margin score "
    "test, or a sign-flip test for perplexity) gives p < alpha after Holm's correction across paired checks, "
    "interval mode when the CIs widened by the tolerance no longer overlap, point mode on the values; a vacuous "
    "certified Lipschitz value (bound > 1e6 x lower bound, radius < 1e-6 x the lower bound's) never passes: a pass "
    "on it is a warning; certified accuracies (randomized smoothing) are judged like accuracies, and one no "
    "certificate could reach (every example abstained, or a radius past what n draws certify) is vacuous too; "
    "verified accuracies (bound propagation) are judged like accuracies."
)
PERCENT = ACCURACIES | {"token_acc"}
RATIO = frozenset({"ppl", "word_perplexity", "byte_perplexity", "bits_per_byte"})


@dataclass(frozen=True)
class Requirement:
    """One threshold of a spec: model, condition, metric, bound, how it is judged and where it was written."""

    family: str
    model: str
    attack: str  # "clean", an attack name, "certified:sigma<s>" (certify) or "-" (Lipschitz)
    eps: float | None  # the budget (the L2 radius of a certified accuracy)
    metric: str
    bound: str  # "min" or "max"
    threshold: float
    where: str  # "[[image.require]] #2" for messages
    mode: Mode = Mode.INTERVAL

    @property
    def condition(self) -> str:
        if self.attack in ("clean", "-"):
            return self.attack
        assert self.eps is not None
        return condition(self.attack, self.eps)

    @property
    def label(self) -> str:
        op = ">=" if self.bound == "min" else "<="
        return f"{self.model} {self.condition} {self.metric} {op} {self.threshold:g}"


def short_mde(metric: str, mde: float | None) -> str:
    """The MDE as a table cell: '5.0 pp', '+3.1%', 'any change' (no sampling error) or 'unknown'."""
    if mde is None or not math.isfinite(mde):
        return "unknown"
    if mde == 0.0:
        return "any change"
    if metric in RATIO:
        return f"+{100 * mde:.1f}%"
    return f"{100 * mde:.1f} pp" if metric in PERCENT else f"{mde:.4g}"


@dataclass
class Outcome:
    """One gate decision; it becomes one row of the diff table and one JUnit test case."""

    kind: str  # threshold | baseline | sanity
    family: str
    model: str
    condition: str
    metric: str
    expected: str
    value: float | None
    lo: float | None
    hi: float | None
    status: str
    detail: str
    run: str = ""
    mode: str = ""  # interval | point | paired ("" for sanity checks)
    p_value: float | None = None  # the paired test's one-sided p
    p_adjusted: float | None = None  # after Holm's correction across the gate's paired checks
    mde: float | None = None  # smallest effect detected with 80% power (acc: fraction; ppl: relative rise)
    mde_text: str = ""  # the MDE with its assumptions, one line
    mde_assumption: str = ""
    seconds: float = 0.0  # wall time of the check

    @property
    def name(self) -> str:
        return f"{self.model} {self.condition} {self.metric} {self.expected}".strip()

    @property
    def test_name(self) -> str:
        """A stable JUnit name: baseline values stay out of it, so CI history follows one check across runs."""
        limit = f" {self.expected}" if self.kind == "threshold" else ""
        return f"[{self.kind}] {self.model} {self.condition} {self.metric}{limit}"

    @property
    def detects(self) -> str:
        return "" if self.kind == "sanity" else short_mde(self.metric, self.mde)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


@dataclass(frozen=True)
class PlannedCheck:
    """A check as planned before any run: what it can detect at the spec's n (80% power)."""

    kind: str  # threshold | baseline
    family: str
    model: str
    condition: str
    metric: str
    mode: str
    n: int | None
    mde: float | None
    mde_text: str
    mde_assumption: str

    @property
    def detects(self) -> str:
        return short_mde(self.metric, self.mde)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def footnotes(items: Iterable[Outcome | PlannedCheck]) -> tuple[dict[str, int], list[str]]:
    """Number the distinct MDE assumptions (most rows share one), for a table's footnotes."""
    index: dict[str, int] = {}
    for item in items:
        if item.mde_assumption and item.mde_assumption not in index:
            index[item.mde_assumption] = len(index) + 1
    return index, [f"[{i}] {text}" for text, i in index.items()]


@dataclass
class GateResult:
    """A whole gate: every outcome, the plan made before the runs, the runs and their wall times."""

    name: str
    outcomes: list[Outcome]
    runs: list[str]
    out: Path
    junit: Path | None = None
    summary: Path | None = None
    baseline: str | None = None
    policy: BaselinePolicy | None = None
    paired_checks: int = 0  # size of the Holm family
    rule: str = RULE
    notes: list[str] = field(default_factory=list)
    plan: list[PlannedCheck] = field(default_factory=list)
    run_seconds: dict[str, float | None] = field(default_factory=dict)

    @property
    def tolerance(self) -> float:
        return self.policy.tolerance if self.policy else 0.0

    def count(self, status: str) -> int:
        return sum(o.status == status for o in self.outcomes)

    @property
    def passed(self) -> bool:
        return self.count(FAIL) == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else RegressionError.exit_code

    def raise_for_regressions(self) -> None:
        if not self.passed:
            failed = [o.name for o in self.outcomes if o.status == FAIL]
            more = f" (+{len(failed) - 3} more)" if len(failed) > 3 else ""
            raise RegressionError(f"{len(failed)} robustness regression(s): {'; '.join(failed[:3])}{more}.")

    def to_dict(self) -> dict[str, Any]:
        policy = None
        if self.policy is not None:
            policy = {k: v if isinstance(v, bool | float | int) else str(v) for k, v in asdict(self.policy).items()}
        return {
            "name": self.name,
            "passed": self.passed,
            "counts": {s: self.count(s) for s in (PASS, WARN, FAIL)},
            "runs": self.runs,
            "run_seconds": {r: self.run_seconds.get(r) for r in self.runs},
            "baseline": self.baseline,
            "tolerance": self.tolerance,
            "policy": policy,
            "paired_checks": self.paired_checks,
            "rule": self.rule,
            "junit": str(self.junit) if self.junit else None,
            "summary": str(self.summary) if self.summary else None,
            "plan": [p.to_dict() for p in self.plan],
            "outcomes": [o.to_dict() for o in self.outcomes],
            "notes": self.notes,
        }


def ordered(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """Failures first, then warnings, then passes; passed sanity checks are left out (counted instead)."""
    order = {FAIL: 0, WARN: 1, PASS: 2}
    shown = [o for o in outcomes if o.kind != "sanity" or o.status != PASS]
    return sorted(shown, key=lambda o: order[o.status])


__all__ = [
    "FAIL",
    "PASS",
    "PERCENT",
    "RULE",
    "WARN",
    "GateResult",
    "Outcome",
    "PlannedCheck",
    "Requirement",
    "footnotes",
    "ordered",
    "short_mde",
]
