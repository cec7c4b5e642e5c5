"""The gate's plan, made before any run: what each check can detect at the spec's n, so users can size n.

A passing gate says little unless it could have failed. Before the fresh runs start, every threshold and every
baseline metric gets its minimum detectable effect (80% power) at the number of examples the spec will measure,
from the same :class:`~.power.CheckPlan` the verdict uses afterwards. Perplexity needs a spread: it comes from
the baseline's bootstrap interval (rescaled to the planned n) when a baseline holds the metric, else the
figure is known only after the run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .baseline import Baseline
from .decide import baseline_plan, metric_log_se, threshold_plan
from .metrics import ACCURACIES, Metric, find
from .modes import BaselinePolicy, Correction, Mode
from .outcome import PlannedCheck, Requirement
from .power import DETERMINISTIC_METRICS, RATIO_LOG_METRICS, minimum_detectable

PAIRED_METRICS = ACCURACIES | {"ppl", "token_acc"}


def _known_spread(known: Sequence[Metric], req: Requirement, n: int | None) -> float | None:
    m = find(known, req.model, req.condition, req.metric)
    return metric_log_se(m, n) if m is not None else None


def plan_thresholds(
    requirements: Sequence[Requirement], n_by_family: Mapping[str, int | None], known: Sequence[Metric] = ()
) -> list[PlannedCheck]:
    """Each threshold's MDE at its section's n (``known`` metrics lend perplexity its spread)."""
    out = []
    for req in requirements:
        n = n_by_family.get(req.family)
        bound = "min" if req.bound == "min" else "max"
        mde = minimum_detectable(threshold_plan(req.metric, req.mode, n, req.threshold, bound,
                                                _known_spread(known, req, n)))  # fmt: skip
        text, note = mde.text(), mde.assumption
        if mde.effect is None and req.metric in RATIO_LOG_METRICS:
            note = "perplexity: known after the run (its spread comes from the measured bootstrap interval)"
            text = f"minimum detectable effect unknown before the run ({note})"
        out.append(PlannedCheck("threshold", req.family, req.model, req.condition, req.metric, str(req.mode), n,
                                mde.effect, text, note))  # fmt: skip
    return out


def planned_mode(baseline: Baseline, base: Metric, policy: BaselinePolicy) -> Mode:
    """The mode a baseline metric will be judged in: paired needs stored outcomes, else the interval fallback."""
    if policy.mode is not Mode.PAIRED or base.metric in DETERMINISTIC_METRICS:
        return policy.mode
    if base.metric not in PAIRED_METRICS:  # no paired test exists (lm-eval's word/byte metrics): intervals
        return Mode.INTERVAL
    has_outcomes = base.metric in PAIRED_METRICS and baseline.series_for(base.family, base.model, base.condition)
    return Mode.PAIRED if has_outcomes or not policy.interval_fallback else Mode.INTERVAL


def plan_baseline(
    baseline: Baseline, policy: BaselinePolicy, n_by_family: Mapping[str, int | None]
) -> list[PlannedCheck]:
    """Each baseline metric's MDE at the planned n, in the mode it will be judged in (Holm family included)."""
    modes = [planned_mode(baseline, b, policy) for b in baseline.metrics]
    paired = sum(
        m is Mode.PAIRED and b.metric not in DETERMINISTIC_METRICS for m, b in zip(modes, baseline.metrics, strict=True)
    )
    tests = paired if policy.correction is Correction.HOLM else 1
    out = []
    for base, mode in zip(baseline.metrics, modes, strict=True):
        n = n_by_family.get(base.family) or base.n
        plan = baseline_plan(base, mode, n, policy.tolerance, policy.alpha, policy.discordance,
                             tests if mode is Mode.PAIRED else 1)  # fmt: skip
        mde = minimum_detectable(plan)
        out.append(PlannedCheck("baseline", base.family, base.model, base.condition, base.metric, str(mode), n,
                                mde.effect, mde.text(), mde.assumption))  # fmt: skip
    return out


__all__ = ["plan_baseline", "plan_thresholds", "planned_mode"]
