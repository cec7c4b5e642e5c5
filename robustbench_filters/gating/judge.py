"""The gate's one judging path: every check of finished runs, decided by :mod:`.decide` and timed.

- thresholds (:func:`judge_requirements`): find each required metric (one line naming what exists when it is
  missing) and apply :func:`.decide.decide_threshold` in the requirement's mode;
- a baseline (:func:`judge_baseline`): find the fresh metric, pair the per-example outcomes when the mode is
  ``paired`` (refusing different examples), run the paired tests, correct their p-values together (Holm,
  unless the policy says ``none``), then give every verdict with :func:`.decide.paired_decision`;
- sanity checks recorded in the runs (:func:`sanity_outcomes`), as FAIL, WARN or nothing.

Everything here reads finished, verified run folders only. Each check's wall time is measured for the JUnit XML.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ..core.errors import RobfiltError
from ..runs.folder import Run
from ..stats.intervals import holm
from ..summaries.lm import LM_EVAL
from .baseline import Baseline
from .decide import PairedTest, baseline_check, decide_threshold, fmt, paired_decision, vacuous_decision
from .junit import Stopwatch, TimedCase
from .metrics import RELATIVE, Metric, find, metrics_from_run
from .modes import DEFAULT_ALPHA, DEFAULT_DISCORDANCE, Correction, Decision, Mode
from .outcome import Outcome, Requirement

log = logging.getLogger(__name__)
ModeChoice = Mode | str | Callable[[Metric], Mode | str]


def _interval(m: Metric) -> str:
    if not m.has_interval:
        return fmt(m.metric, m.value)
    return f"{fmt(m.metric, m.value)} [{fmt(m.metric, m.lo)}, {fmt(m.metric, m.hi)}]"


def _bounds(m: Metric) -> tuple[float, float]:
    return (m.lo if math.isfinite(m.lo) else m.value), (m.hi if math.isfinite(m.hi) else m.value)


def _outcome(kind: str, m: Metric, expected: str, d: Decision, run: str, seconds: float, family: str) -> Outcome:
    lo, hi = _bounds(m)
    return Outcome(kind, family, m.model, m.condition, m.metric, expected, m.value, lo, hi, d.status.value, d.detail,
                   run, d.mode.value, d.p_value, d.p_adjusted, d.mde, d.mde_text, d.mde_assumption, seconds)  # fmt: skip


@dataclass(frozen=True)
class Judged:
    """One baseline check: the two metrics, the decision, the run it came from and its wall time."""

    base: Metric
    fresh: Metric
    decision: Decision
    run: str
    seconds: float
    tolerance: float = 0.0

    @property
    def name(self) -> str:
        return f"{self.fresh.model} {self.fresh.condition} {self.fresh.metric}"

    def outcome(self) -> Outcome:
        tol = f" ±{self.tolerance:g}{'×' if self.fresh.metric in RELATIVE else ''}" if self.tolerance else ""
        family = self.fresh.family or self.base.family
        return _outcome("baseline", self.fresh, f"≈ {_interval(self.base)}{tol}", self.decision, self.run, self.seconds,
                        family)  # fmt: skip


def _available(metrics: Sequence[Metric], model: str, metric: str) -> str:
    conds = sorted({m.condition for m in metrics if m.model == model and m.metric == metric})
    if conds:
        return f"it has {model} {metric} at: {', '.join(conds)}"
    models = sorted({m.model for m in metrics})
    return f"its models are: {', '.join(models) or 'none'}"


def judge_requirements(
    requirements: Mapping[str, Sequence[Requirement]],
    runs: Sequence[Run],
    metrics: Mapping[str, list[Metric]],
    source: str,
) -> list[Outcome]:
    """Judge every requirement (per family section) against the metrics of that family's runs."""
    out = []
    for fam, reqs in requirements.items():
        fam_runs = [r for r in runs if r.family == fam]
        if reqs and not fam_runs:
            raise RobfiltError(f"{source} has [{fam}] requirements but no {fam} run was given or made.")
        pool = [m for r in fam_runs for m in metrics[r.run_id]]
        for req in reqs:
            with Stopwatch() as watch:
                m = find(pool, req.model, req.condition, req.metric)
                if m is None:
                    raise RobfiltError(
                        f"metric '{req.model} {req.condition} {req.metric}' required by {req.where} is missing from "
                        f"the {fam} run(s) ({_available(pool, req.model, req.metric)})."
                    )
                decision = decide_threshold(m, req.threshold, "min" if req.bound == "min" else "max", req.mode)
            op = ">=" if req.bound == "min" else "<="
            out.append(_outcome("threshold", m, f"{op} {fmt(m.metric, req.threshold)}", decision, m.source,
                                watch.seconds, fam))  # fmt: skip
    return out


def _locate(base: Metric, runs: Sequence[Run], metrics: Mapping[str, list[Metric]], source: str) -> tuple[Run, Metric]:
    candidates = [r for r in runs if not base.family or r.family == base.family]
    for run in candidates:
        m = find(metrics[run.run_id], base.model, base.condition, base.metric)
        if m is not None:
            return run, m
    have = sorted({m.condition for r in candidates for m in metrics[r.run_id] if m.model == base.model})
    where = f"it has {base.model} at: {', '.join(have)}" if have else "no run has that model"
    raise RobfiltError(f"metric '{base.key}' of baseline {source} is missing from the run(s) ({where}).")


def judge_baseline(
    baseline: Baseline,
    runs: Sequence[Run],
    *,
    mode: ModeChoice = Mode.PAIRED,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    fallback: bool = False,
    discordance: float = DEFAULT_DISCORDANCE,
    correction: Correction | str = Correction.HOLM,
    seed: int = 0,
    metrics: Mapping[str, list[Metric]] | None = None,
) -> list[Judged]:
    """Decide every baseline metric against the runs; ``mode`` may be a function of the baseline metric.

    Paired checks are decided together: their one-sided p-values are Holm-adjusted (``correction="holm"``),
    so a model no worse than its baseline fails any of them with probability at most ``alpha``.
    """
    if not baseline.metrics:
        raise RobfiltError(f"baseline {baseline.source} holds no metrics.")
    correction = Correction.parse(correction)
    metrics = metrics if metrics is not None else {r.run_id: metrics_from_run(r) for r in runs}
    checked: list[tuple[Metric, Metric, Decision | PairedTest, str, float]] = []
    for base in baseline.metrics:
        with Stopwatch() as watch:
            run, fresh = _locate(base, runs, metrics, baseline.source)
            baseline.check_data(run)
            chosen = Mode.parse(mode(base) if callable(mode) else mode)
            if chosen is Mode.PAIRED and base.metric in LM_EVAL:  # no paired test exists: intervals, as planned
                chosen = Mode.INTERVAL  # (plan.planned_mode); token perplexity of the same rows is tested paired
            pair, why = (None, "")
            if chosen is Mode.PAIRED:
                pair, why = baseline.paired(run, fresh.model, fresh.condition, fresh.metric)
            result = baseline_check(base, fresh, mode=chosen, tolerance=tolerance, alpha=alpha, pair=pair,
                                    unpaired_reason=why, fallback=fallback, discordance=discordance, seed=seed)  # fmt: skip
        checked.append((base, fresh, result, run.run_id, watch.seconds))
    tests = [c[2] for c in checked if isinstance(c[2], PairedTest)]
    m = len(tests)
    adjusted = iter(holm([t.p for t in tests]))
    out = []
    for base, fresh, result, run_id, seconds in checked:
        with Stopwatch() as watch:
            decision = result
            if isinstance(result, PairedTest):
                p_holm = next(adjusted)
                decision = (
                    paired_decision(result, p_holm, m) if correction is Correction.HOLM else paired_decision(result)
                )
                decision = vacuous_decision(decision, fresh)  # a vacuous certified accuracy never passes silently
        out.append(Judged(base, fresh, decision, run_id, seconds + watch.seconds, tolerance))
    if m > 1 and correction is Correction.HOLM:
        log.info("check: %d paired checks, p-values Holm-adjusted (family-wise alpha %g)", m, alpha)
    return out


def paired_family(judged: Sequence[Judged]) -> int:
    """How many paired tests the correction covered."""
    return sum(j.decision.mode is Mode.PAIRED and j.decision.p_value is not None for j in judged)


def sanity_outcomes(runs: Sequence[Run], mode: str) -> list[Outcome]:
    """The sanity checks recorded in each run: ``fail`` keeps failures, ``warn`` downgrades them, ``ignore`` drops all."""
    if mode == "ignore":
        return []
    out = []
    for run in runs:
        for c in run.summary.sanity_checks():
            status = {"pass": "pass", "warn": "warn", "fail": "fail" if mode == "fail" else "warn"}.get(
                c.status, "warn"
            )
            out.append(Outcome("sanity", run.family, c.model, "-", c.name, "", None, None, None, status, c.detail,
                               run.run_id))  # fmt: skip
    return out


def junit_case(o: Outcome) -> TimedCase:
    """One outcome as a timed JUnit case (classname ``robfilt.<family>.<model>``)."""
    classname = f"robfilt.{o.family or 'run'}.{o.model}".rstrip(".")
    return TimedCase(classname, o.test_name, o.status, o.detail, o.seconds, o.run)


def junit_cases(judged: Sequence[Judged | Outcome]) -> list[TimedCase]:
    """One timed JUnit case per check."""
    return [junit_case(j.outcome() if isinstance(j, Judged) else j) for j in judged]


__all__ = [
    "Judged",
    "judge_baseline",
    "judge_requirements",
    "junit_case",
    "junit_cases",
    "paired_family",
    "sanity_outcomes",
]
