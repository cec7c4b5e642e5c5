"""Judging finished runs for the CI gate: thresholds and baselines, decided on intervals, not on noise.

This module only reads run folders (made by :mod:`robustbench_filters.gate`, or given) and decides.
Robust accuracy measured on n examples is itself uncertain (128 examples: +-8 pp), so every decision uses the
95% interval of the measured value (Wilson for accuracy, an example bootstrap for perplexity; certified
Lipschitz bounds are deterministic and compared exactly):

**Thresholds** (``min_acc``, ``max_ppl``, ``max_lipschitz_upper``, ...):

- ``min_X = t``: FAIL when the interval's *upper* end is below t (even the most favourable reading of the
  data misses t); WARN when the point value is below t but the interval still reaches it; else PASS.
- ``max_X = t``: FAIL when the interval's *lower* end is above t; WARN when only the point value is above.

**Baseline** (a summary.json, a run folder, or a ``robfilt-baseline`` JSON; ``tolerance`` = tol):

- higher-is-better metrics (accuracy, radius): FAIL when ``fresh.hi + tol < base.lo``, i.e. the drop exceeds
  the tolerance plus the half-widths of both intervals (the intervals, widened by tol, no longer overlap; a
  bare baseline number has lo = hi = value). WARN when the point value dropped by more than tol.
- lower-is-better metrics (perplexity, Lipschitz bounds), tolerance relative: FAIL when
  ``fresh.lo > base.hi * (1 + tol)``; WARN when ``fresh > base * (1 + tol)``.

Non-overlap of two 95% intervals is a deliberately conservative test (roughly p < 0.01 for equal widths): a
gate that flakes gets switched off. To detect smaller regressions, raise ``n_examples``, not the sensitivity.

**Sanity checks** recorded in a run (eps-ball, monotonicity, gradients, ...) count as FAIL, WARN or nothing
depending on the spec's ``sanity`` key (default ``warn``).

Exit codes (CLI): 0 no FAIL, 1 at least one FAIL (:class:`RegressionError`), 2 usage errors (malformed or
unknown spec keys, a required metric missing from a run, paths outside the project).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import RegressionError, RobfiltError
from ..runs.folder import Run
from .metrics import DIRECTION, RELATIVE, Metric, find
from .runs import family_of
from .tables import eps_label

log = logging.getLogger(__name__)

PASS, WARN, FAIL = "pass", "warn", "fail"
RULE = (
    "min thresholds fail when the 95% CI upper end is below them, max thresholds when the lower end is above; "
    "baselines fail when the drop exceeds tolerance + both CI half-widths (intervals no longer overlap)."
)


@dataclass(frozen=True)
class Requirement:
    """One threshold of a spec: model, condition, metric, bound and where it was written (for messages)."""

    family: str
    model: str
    attack: str  # "clean", an attack name, or "-" (Lipschitz)
    eps: float | None
    metric: str
    bound: str  # "min" or "max"
    threshold: float
    where: str  # "[[image.require]] #2" for messages

    @property
    def condition(self) -> str:
        if self.attack in ("clean", "-"):
            return self.attack
        return f"{self.attack}@{eps_label(self.eps)}"

    @property
    def label(self) -> str:
        op = ">=" if self.bound == "min" else "<="
        return f"{self.model} {self.condition} {self.metric} {op} {self.threshold:g}"


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

    @property
    def name(self) -> str:
        return f"{self.model} {self.condition} {self.metric} {self.expected}".strip()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **asdict(self)}


@dataclass
class GateResult:
    name: str
    outcomes: list[Outcome]
    runs: list[str]
    out: Path
    junit: Path | None = None
    summary: Path | None = None
    baseline: str | None = None
    tolerance: float = 0.0
    rule: str = RULE
    notes: list[str] = field(default_factory=list)

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
        return {
            "name": self.name,
            "passed": self.passed,
            "counts": {s: self.count(s) for s in (PASS, WARN, FAIL)},
            "runs": self.runs,
            "baseline": self.baseline,
            "tolerance": self.tolerance,
            "rule": self.rule,
            "junit": str(self.junit) if self.junit else None,
            "summary": str(self.summary) if self.summary else None,
            "outcomes": [o.to_dict() for o in self.outcomes],
            "notes": self.notes,
        }


def _fmt(metric: str, v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    if metric in ("acc", "token_acc"):
        return f"{100 * v:.1f}%"
    return f"{v:.4g}"


def _interval(m: Metric) -> str:
    if not m.has_interval:
        return _fmt(m.metric, m.value)
    return f"{_fmt(m.metric, m.value)} [{_fmt(m.metric, m.lo)}, {_fmt(m.metric, m.hi)}]"


def _lo_hi(m: Metric) -> tuple[float, float]:
    lo = m.lo if math.isfinite(m.lo) else m.value
    hi = m.hi if math.isfinite(m.hi) else m.value
    return lo, hi


def judge_threshold(req: Requirement, m: Metric) -> Outcome:
    """PASS / WARN (within noise) / FAIL (the whole 95% interval is on the wrong side) for one threshold."""
    lo, hi = _lo_hi(m)
    t = req.threshold
    if req.bound == "min":
        status = PASS if m.value >= t else (FAIL if hi < t else WARN)
        op = ">="
    else:
        status = PASS if m.value <= t else (FAIL if lo > t else WARN)
        op = "<="
    if status == PASS:
        detail = f"{_interval(m)} {op} {_fmt(m.metric, t)}"
    elif status == WARN:
        detail = f"{_interval(m)}: point value misses {_fmt(m.metric, t)}, but the 95% CI reaches it (noise)"
    else:
        side = "upper" if req.bound == "min" else "lower"
        detail = f"{_interval(m)}: the 95% CI {side} end misses {_fmt(m.metric, t)}"
    return Outcome("threshold", req.family, req.model, req.condition, m.metric, f"{op} {_fmt(m.metric, t)}",
                   m.value, lo, hi, status, detail, m.source)  # fmt: skip


def judge_baseline(base: Metric, fresh: Metric, tolerance: float) -> Outcome:
    """Compare with a baseline value: FAIL only when the intervals (widened by the tolerance) are disjoint."""
    blo, bhi = _lo_hi(base)
    flo, fhi = _lo_hi(fresh)
    higher = DIRECTION[fresh.metric]
    rel = fresh.metric in RELATIVE
    if higher:
        fail = fhi + tolerance < blo
        worse = fresh.value < base.value - tolerance
        better = flo - tolerance > bhi
    else:
        widen = (lambda x: x * (1 + tolerance)) if rel else (lambda x: x + tolerance)
        fail = flo > widen(bhi)
        worse = fresh.value > widen(base.value)
        better = fhi < blo / (1 + tolerance) if rel else fhi + tolerance < blo
    status = FAIL if fail else (WARN if worse else PASS)
    delta = fresh.value - base.value
    d = f"{100 * delta:+.1f} pp" if fresh.metric in ("acc", "token_acc") else f"{delta:+.4g}"
    if status == FAIL:
        detail = f"{d}: beyond tolerance and both 95% CIs (baseline {_interval(base)})"
    elif status == WARN:
        detail = f"{d}: worse than the baseline by more than the tolerance, but within noise"
    else:
        detail = f"{d}" + ("; significantly better: consider updating the baseline" if better else "")
    tol = f" ±{tolerance:g}{'×' if rel else ''}" if tolerance else ""
    expected = f"≈ {_interval(base)}{tol}"
    return Outcome("baseline", fresh.family or base.family, fresh.model, fresh.condition, fresh.metric, expected,
                   fresh.value, flo, fhi, status, detail, fresh.source)  # fmt: skip


def _available(metrics: Sequence[Metric], model: str, metric: str) -> str:
    conds = sorted({m.condition for m in metrics if m.model == model and m.metric == metric})
    if conds:
        return f"it has {model} {metric} at: {', '.join(conds)}"
    models = sorted({m.model for m in metrics})
    return f"its models are: {', '.join(models) or 'none'}"


def check_requirements(
    requirements: dict[str, list[Requirement]], runs: Sequence[Run], metrics: dict[str, list[Metric]], source: str
) -> list[Outcome]:
    """Judge every requirement (per family section) against the metrics of that family's runs."""
    out = []
    for fam, reqs in requirements.items():
        fam_runs = [r for r in runs if family_of(r) == fam]
        if reqs and not fam_runs:
            raise RobfiltError(f"{source} has [{fam}] requirements but no {fam} run was given or made.")
        pool = [m for r in fam_runs for m in metrics[r.run_id]]
        for req in reqs:
            m = find(pool, req.model, req.condition, req.metric)
            if m is None:
                raise RobfiltError(
                    f"metric '{req.model} {req.condition} {req.metric}' required by {req.where} is missing from "
                    f"the {fam} run(s) ({_available(pool, req.model, req.metric)})."
                )
            out.append(judge_threshold(req, m))
    return out


def check_baseline(base: list[Metric], pool: list[Metric], tolerance: float, source: str) -> list[Outcome]:
    if not base:
        raise RobfiltError(f"baseline {source} holds no metrics.")
    out = []
    for b in base:
        f = find(pool, b.model, b.condition, b.metric)
        if f is None:
            raise RobfiltError(
                f"metric '{b.model} {b.condition} {b.metric}' of baseline {source} is missing from the run(s) "
                f"({_available(pool, b.model, b.metric)})."
            )
        out.append(judge_baseline(b, f, tolerance))
    return out


def sanity_outcomes(runs: Sequence[Run], mode: str) -> list[Outcome]:
    if mode == "ignore":
        return []
    out = []
    for run in runs:
        for c in run.summary.get("checks", []) or []:
            status = {"pass": PASS, "warn": WARN, "fail": FAIL if mode == "fail" else WARN}.get(c.get("status"), WARN)
            out.append(Outcome("sanity", family_of(run), c.get("model", ""), "-", c.get("name", "check"),
                               "", None, None, None, status, c.get("detail", ""), run.run_id))  # fmt: skip
    return out


__all__ = [
    "FAIL",
    "PASS",
    "RULE",
    "WARN",
    "GateResult",
    "Outcome",
    "Requirement",
    "check_baseline",
    "check_requirements",
    "judge_baseline",
    "judge_threshold",
    "sanity_outcomes",
]
