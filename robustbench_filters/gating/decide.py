"""Pure decision functions of the gate: one measured metric (and a baseline) in, one :class:`Decision` out.

- :func:`decide_threshold`: ``min_X`` / ``max_X`` limits, mode ``interval`` (FAIL when the whole 95% interval
  misses the limit, WARN when only the point value does) or ``point`` (FAIL when the point value misses).
- :func:`decide_baseline`: compare with a baseline, mode ``paired`` (one-sided test on the same examples,
  FAIL when p < alpha; WARN when the point value is worse beyond the tolerance but not significantly),
  ``interval`` (FAIL when the intervals widened by the tolerance no longer overlap) or ``point``.
  A gate deciding several paired checks at once runs :func:`baseline_check` for each, adjusts the p-values
  (Holm) and lets :func:`paired_decision` give the verdicts: the same rule, one place.

Tolerances are absolute for accuracies (0.02 = 2 points) and relative for perplexity and Lipschitz bounds
(0.05 = 5%). Metrics without sampling error (certified Lipschitz bounds) are compared on their values in every
mode. Against a baseline, every value computed in floating point (perplexities and lm-eval's word/byte perplexity
and bits per byte, Lipschitz bounds, radii) is compared up to float noise (:data:`FLOAT_RTOL` relative): a change
that small is no change, neither a WARN nor evidence for a paired test. Shares of examples or tokens are ratios of
counts and reproduce exactly, so they get no such slack.
Nothing here reads files or makes runs; the gate passes :class:`~.metrics.Metric` values and, for the
paired mode, the paired per-example outcomes (:func:`.series.pair_series`).

A certified Lipschitz value that is vacuous (:mod:`robustbench_filters.stats.vacuity`: a bound more than 1e6 times the
rigorous lower bound, a radius below 1e-6 of the one the lower bound gives) certifies nothing about the model, so
:func:`vacuous_decision` never lets it pass silently: a pass becomes a WARN that says the value is vacuous (the
limit is met, but by a number that carries no information), and a FAIL keeps failing with the same note (the
bound cannot show the limit; the model itself may well meet it). The same holds for a certified accuracy no
certificate could reach (every example abstained, or the radius is past the largest one n draws can certify):
certified accuracies are judged like accuracies (Wilson intervals, McNemar on the per-example certified
outcomes against a baseline), but a vacuous one never passes silently, in any mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..core.errors import RobfiltError
from ..stats.intervals import mcnemar_one_sided, paired_margin_score_test
from ..stats.paired import PairedBinary, PairedRatio, sign_flip_ratio_test
from .metrics import ACCURACIES, DIRECTION, RELATIVE, Metric
from .modes import Decision, Mode, Status, threshold_mode
from .power import (
    DEFAULT_ALPHA,
    DEFAULT_DISCORDANCE,
    DETERMINISTIC_METRICS,
    CheckPlan,
    log_se_from_interval,
    minimum_detectable,
)

PERCENT_METRICS = ACCURACIES | {"token_acc"}
#: metrics of correct/wrong outcomes per example: paired with exact McNemar (or the margin score test)
BINARY_METRICS = ACCURACIES
# Float noise: the same computation on another CPU (its BLAS kernels, their summation order) or in another batch
# shape differs in the last digits. Certified bounds and power-iteration estimates agree to about 1e-6 relative
# across machines; perplexities (float32 log-likelihoods summed over thousands of tokens) to about 1e-7: the zoo LM's
# word-swap documents differed by at most 1.1e-4 in NLL sums of hundreds, with the same token counts. A baseline
# comparison treats a change within 1e-4 relative as none, so a committed baseline neither warns nor fails on
# another machine, while any change a user could care about (0.01% of a perplexity) still counts.
FLOAT_RTOL = 1e-4
Bound = Literal["min", "max"]


def fmt(metric: str, v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "-"
    return f"{100 * v:.1f}%" if metric in PERCENT_METRICS else f"{v:.4g}"


def _with_interval(m: Metric) -> str:
    if not m.has_interval:
        return fmt(m.metric, m.value)
    return f"{fmt(m.metric, m.value)} [{fmt(m.metric, m.lo)}, {fmt(m.metric, m.hi)}]"


def _lo_hi(m: Metric) -> tuple[float, float]:
    lo = m.lo if math.isfinite(m.lo) else m.value
    hi = m.hi if math.isfinite(m.hi) else m.value
    return lo, hi


def metric_log_se(m: Metric, n: int | None = None) -> float | None:
    """Standard error of a ratio metric's log from its 95% interval (rescaled to ``n`` examples when given)."""
    lo, hi = _lo_hi(m)
    if m.metric not in RELATIVE or not m.has_interval or lo <= 0 or hi <= lo:
        return None
    return log_se_from_interval(lo, hi, m.n, n)


def threshold_plan(metric: str, mode: Mode, n: int | None, threshold: float, bound: Bound,
                   log_se: float | None = None) -> CheckPlan:  # fmt: skip
    """What a threshold check's MDE depends on (the planner before the runs and the verdict after use this)."""
    ref = threshold if bound == "min" or metric not in PERCENT_METRICS else 1 - threshold
    return CheckPlan(metric, mode, n, ref, baseline=False, log_se=log_se)


def baseline_plan(
    base: Metric,
    mode: Mode,
    n: int | None,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    discordance: float = DEFAULT_DISCORDANCE,
    tests: int = 1,
) -> CheckPlan:
    """What a baseline check's MDE depends on, at ``n`` examples (the baseline's interval rescaled to n)."""
    return CheckPlan(base.metric, mode, n, base.value, True, tolerance, alpha, discordance=discordance,
                     log_se=metric_log_se(base, n), tests=tests)  # fmt: skip


def decide_threshold(m: Metric, threshold: float, bound: Bound, mode: Mode | str = Mode.INTERVAL) -> Decision:
    """Judge one ``min_X``/``max_X`` limit; ``paired`` is refused (one line): a limit has nothing to pair with."""
    mode = threshold_mode(mode)
    lo, hi = _lo_hi(m)
    t = threshold
    op = ">=" if bound == "min" else "<="
    ok = m.value >= t if bound == "min" else m.value <= t
    reaches = hi >= t if bound == "min" else lo <= t  # does the interval still reach the limit?
    if ok:
        status, detail = Status.PASS, f"{_with_interval(m)} {op} {fmt(m.metric, t)}"
    elif mode is Mode.POINT or not m.has_interval or not reaches:
        status = Status.FAIL
        if mode is Mode.POINT or not m.has_interval:
            detail = f"{_with_interval(m)}: the point value misses {fmt(m.metric, t)} ({mode} mode)"
        else:
            side = "upper" if bound == "min" else "lower"
            detail = f"{_with_interval(m)}: the 95% CI {side} end misses {fmt(m.metric, t)}"
    else:
        status = Status.WARN
        detail = f"{_with_interval(m)}: point value misses {fmt(m.metric, t)}, but the 95% CI reaches it (noise)"
    mde = minimum_detectable(threshold_plan(m.metric, mode, m.n, t, bound, metric_log_se(m)))
    text = mde.text()
    if mde.effect is not None and mde.effect > 0 and ok:
        text += f"; {_headroom(m, t, bound, mde.effect)}"
    return vacuous_decision(Decision(status, mode, detail, mde=mde.effect, mde_text=text,
                                     mde_assumption=mde.assumption), m)  # fmt: skip


def _headroom(m: Metric, t: float, bound: Bound, mde: float) -> str:
    """The MDE past the limit, restated from the measured value: how far the metric must move to fail."""
    if m.metric in RELATIVE:  # relative MDE past a max limit (perplexity)
        move = (t * (1 + mde)) / m.value - 1 if bound == "max" else 1 - (t * (1 - mde)) / m.value
        return f"i.e. {100 * move:+.1f}% from the measured {fmt(m.metric, m.value)}"
    move = (m.value - t + mde) if bound == "min" else (t + mde - m.value)
    unit = " pp" if m.metric in PERCENT_METRICS else ""
    amount = f"{100 * move:.1f}" if m.metric in PERCENT_METRICS else f"{move:.4g}"
    return f"i.e. a change of {amount}{unit} from the measured {fmt(m.metric, m.value)}"


def _worse_by(base: Metric, fresh: Metric) -> float:
    """How much worse fresh is: absolute for accuracies, relative for RELATIVE metrics; < 0 when better."""
    if fresh.metric in RELATIVE:  # all lower-is-better: perplexity, Lipschitz bounds
        return fresh.value / base.value - 1 if base.value else math.inf
    return (base.value - fresh.value) if DIRECTION[fresh.metric] else (fresh.value - base.value)


def _effect_text(metric: str, effect: float, noise: float = 0.0) -> str:
    if noise > 0 and abs(effect) <= noise:
        return f"unchanged up to float noise ({FLOAT_RTOL:.0e} relative)".replace("e-0", "e-")
    if metric in RELATIVE:
        return f"{100 * effect:+.1f}% worse" if effect >= 0 else f"{100 * -effect:.1f}% better"
    if metric in PERCENT_METRICS:
        return f"{-100 * effect:+.1f} pp"
    return f"{-effect:+.4g}"


def _float_noise(base: Metric) -> float:
    """How much worse a value may look from float rounding alone, in :func:`_worse_by`'s units: :data:`FLOAT_RTOL`
    for the relative metrics (perplexities, Lipschitz bounds), :data:`FLOAT_RTOL` of the value for a deterministic
    radius, 0 for shares of examples or tokens (ratios of counts: they reproduce exactly)."""
    if base.metric in RELATIVE:
        return FLOAT_RTOL
    return FLOAT_RTOL * abs(base.value) if base.metric in DETERMINISTIC_METRICS else 0.0


def _interval_or_point(base: Metric, fresh: Metric, mode: Mode, tol: float) -> tuple[Status, str]:
    """Today's interval rule, or the strict point rule; with no interval recorded both compare point values."""
    blo, bhi = _lo_hi(base)
    flo, fhi = _lo_hi(fresh)
    rel = fresh.metric in RELATIVE  # relative tolerances; all of them lower-is-better
    worse = _worse_by(base, fresh) > tol + _float_noise(base)
    if mode is Mode.POINT or fresh.metric in DETERMINISTIC_METRICS:
        return (Status.FAIL if worse else Status.PASS), (
            "worse than the baseline beyond the tolerance" if worse else ""
        )
    widened = bhi * (1 + tol) if rel else bhi + tol
    fail = (fhi + tol < blo) if DIRECTION[fresh.metric] else flo > widened
    if fail:
        return Status.FAIL, f"beyond the tolerance and both 95% CIs (baseline {_with_interval(base)})"
    if worse:
        return Status.WARN, "worse than the baseline by more than the tolerance, but within noise"
    return Status.PASS, ""


def _paired_binary(pair: PairedBinary, tol: float, alpha: float) -> tuple[float, float, str]:
    """(p worse, p better, test description) for accuracy on the same examples."""
    b, c = pair.b, pair.c
    p_better = mcnemar_one_sided(c, b)
    if tol == 0:
        return mcnemar_one_sided(b, c), p_better, "one-sided exact McNemar"
    _, p = paired_margin_score_test(b, c, pair.n, tol)
    return p, p_better, f"one-sided paired score test, margin {100 * tol:.1f} pp"


def baseline_check(
    base: Metric,
    fresh: Metric,
    *,
    mode: Mode | str = Mode.PAIRED,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    pair: PairedBinary | PairedRatio | None = None,
    unpaired_reason: str = "",
    fallback: bool = False,
    discordance: float = DEFAULT_DISCORDANCE,
    n_perm: int = 10_000,
    seed: int = 0,
) -> Decision | PairedTest:
    """The decision of a non-paired check, or the :class:`PairedTest` a paired one still has to be decided on.

    A gate with several paired checks decides them together (:func:`paired_decision` with Holm-adjusted
    p-values); :func:`decide_baseline` decides one check alone.
    """
    mode = Mode.parse(mode)
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise RobfiltError(f"tolerance must be a number >= 0, got {tolerance}.")
    if not 0 < alpha < 1:
        raise RobfiltError(f"alpha must be between 0 and 1, got {alpha}.")
    note = ""
    if mode is Mode.PAIRED and fresh.metric not in DETERMINISTIC_METRICS and pair is None:
        reason = unpaired_reason or "no per-example outcomes were given"
        if not fallback:
            raise RobfiltError(
                f"{fresh.key}: mode = 'paired' needs both runs' per-example outcomes, but {reason}; write a v2 "
                "baseline (robfilt check --write-baseline) or set mode = 'interval'."
            )
        mode, note = Mode.INTERVAL, f"paired unavailable ({reason}), interval rule used; "
    effect = _worse_by(base, fresh)
    expected_n = pair.n if pair is not None else (fresh.n or base.n)
    if mode is Mode.PAIRED and fresh.metric not in DETERMINISTIC_METRICS:
        assert pair is not None
        return paired_test(base, fresh, pair, tolerance, alpha, discordance, n_perm, seed)
    status, why = _interval_or_point(base, fresh, mode, tolerance)
    if fresh.metric in DETERMINISTIC_METRICS:
        why = (why + "; " if why else "") + "deterministic value, compared up to float noise"
    detail = note + _effect_text(fresh.metric, effect, _float_noise(base)) + (f": {why}" if why else "")
    mde = minimum_detectable(baseline_plan(base, mode, expected_n, tolerance, alpha, discordance))
    decision = Decision(status, mode, detail, effect=effect, mde=mde.effect, mde_text=mde.text(),
                        mde_assumption=mde.assumption)  # fmt: skip
    return vacuous_decision(decision, fresh)


def decide_baseline(base: Metric, fresh: Metric, **check: Any) -> Decision:
    """Judge a fresh metric against its baseline value, alone (see the module docstring for the rules); ``check``
    holds :func:`baseline_check`'s keywords (mode, tolerance, alpha, pair, ...).

    ``pair`` holds both runs' per-example outcomes for ``paired`` mode; without it, ``fallback=True`` uses the
    interval rule and says so in the detail, else a one-line :class:`RobfiltError` names ``unpaired_reason``.
    """
    checked = baseline_check(base, fresh, **check)
    return vacuous_decision(paired_decision(checked), fresh) if isinstance(checked, PairedTest) else checked


def _consistent(base: Metric, fresh: Metric, pair: PairedBinary | PairedRatio) -> None:
    """The paired outcomes must reproduce both aggregate values (else a baseline file was edited or mixed up)."""
    if isinstance(pair, PairedBinary):
        values = (float(pair.base.mean()), float(pair.fresh.mean()))
    elif fresh.metric == "ppl":
        values = (math.exp(pair.base_ratio), math.exp(pair.fresh_ratio))
    else:
        values = (pair.base_ratio, pair.fresh_ratio)
    for who, m, v in (("baseline", base, values[0]), ("fresh run", fresh, values[1])):
        if not math.isclose(m.value, v, rel_tol=1e-9, abs_tol=1e-12):
            raise RobfiltError(
                f"{fresh.key}: the {who}'s per-example outcomes give {fmt(m.metric, v)} but its metric says "
                f"{fmt(m.metric, m.value)}; the outcomes and the metrics come from different runs (rewrite the baseline)."
            )


@dataclass(frozen=True)
class PairedTest:
    """A paired test's result before its verdict: the verdict depends on the other paired checks (Holm)."""

    metric: str
    p: float  # one-sided p for "worse by more than the tolerance"
    p_better: float  # one-sided p for "better" (to suggest updating the baseline)
    effect: float  # how much worse (acc: absolute drop; ppl: relative rise)
    test: str  # e.g. "one-sided exact McNemar"
    counts: str  # e.g. " on the same 500 examples (25 lost, 10 gained)"
    tolerance: float
    alpha: float
    plan: CheckPlan
    noise: float = 0.0  # a change this small is float noise (ppl: FLOAT_RTOL), never "worse" nor "better"


def paired_test(
    base: Metric,
    fresh: Metric,
    pair: PairedBinary | PairedRatio,
    tol: float,
    alpha: float,
    discordance: float = DEFAULT_DISCORDANCE,
    n_perm: int = 10_000,
    seed: int = 0,
) -> PairedTest:
    """Run the one-sided paired test of one check (exact McNemar / margin score test / sign-flip)."""
    metric = fresh.metric
    _consistent(base, fresh, pair)
    if metric in BINARY_METRICS:
        if not isinstance(pair, PairedBinary):
            raise RobfiltError(f"{fresh.key}: accuracy needs paired correct/wrong outcomes, got {type(pair).__name__}.")
        p, p_better, test = _paired_binary(pair, tol, alpha)
        observed = (pair.b + pair.c) / pair.n if pair.n else 0.0
        counts = f" on the same {pair.n} examples ({pair.b} lost, {pair.c} gained)"
        plan = baseline_plan(base, Mode.PAIRED, pair.n, tol, alpha, max(discordance, observed))
        return PairedTest(metric, p, p_better, pair.drop, test, counts, tol, alpha, plan)
    if metric in ("ppl", "token_acc"):
        if not isinstance(pair, PairedRatio):
            raise RobfiltError(f"{fresh.key}: {metric} needs paired per-sequence values, got {type(pair).__name__}.")
        ppl = metric == "ppl"
        noise = _float_noise(base)  # the test's null: worse by at most the tolerance plus float noise
        margin = math.log1p(tol + noise) if ppl else tol + noise
        res = sign_flip_ratio_test(pair, worse="higher" if ppl else "lower", margin=margin, n_perm=n_perm, seed=seed)
        effect = math.expm1(res.difference) if ppl else -res.difference
        kind = "exact" if res.exact else f"{res.n_perm} seeded"
        test = f"one-sided paired sign-flip test ({kind} swaps)"
        plan = baseline_plan(base, Mode.PAIRED, pair.n, tol, alpha, discordance)
        return PairedTest(metric, res.p_worse, res.p_better, effect, test, f" on the same {pair.n} sequences", tol,
                          alpha, plan, noise)  # fmt: skip
    raise RobfiltError(f"{fresh.key}: mode = 'paired' has no test for {metric}; use mode = 'interval'.")


def paired_decision(t: PairedTest, p_adjusted: float | None = None, tests: int = 1) -> Decision:
    """The verdict of a paired test: FAIL when the (Holm-adjusted) p < alpha, WARN when only the point is worse.

    ``p_adjusted`` and ``tests`` come from the gate's correction over its ``tests`` paired checks; the MDE is
    then computed at the level a single regression among them faces.
    """
    p = t.p if p_adjusted is None else p_adjusted
    shown = f"{t.test} p = {t.p:.2g}"
    if p_adjusted is not None and tests > 1:
        shown += f", Holm-adjusted over {tests} paired checks p = {p_adjusted:.2g}"
    if p < t.alpha:
        status, verdict = Status.FAIL, f"{shown} < {t.alpha:g}"
    elif t.effect > t.tolerance + t.noise:
        status, verdict = Status.WARN, f"worse beyond the tolerance, but {shown} >= {t.alpha:g} (noise)"
    else:
        status, verdict = Status.PASS, shown
        if t.p_better < t.alpha and -t.effect > t.noise:
            verdict += "; significantly better: consider updating the baseline"
    mde = minimum_detectable(replace(t.plan, tests=max(1, tests)))
    detail = f"{_effect_text(t.metric, t.effect, t.noise)}{t.counts}: {verdict}"
    return Decision(status, Mode.PAIRED, detail, p_value=t.p, effect=t.effect, mde=mde.effect, mde_text=mde.text(),
                    mde_assumption=mde.assumption, p_adjusted=p_adjusted)  # fmt: skip


__all__ = [
    "FLOAT_RTOL",
    "PairedTest",
    "baseline_plan",
    "metric_log_se",
    "threshold_plan",
    "baseline_check",
    "decide_baseline",
    "decide_threshold",
    "fmt",
    "paired_decision",
    "paired_test",
]


#: why a vacuous value carries no information, per metric (the Lipschitz note for its bounds and radius)
VACUOUS_NOTES = {
    "certified_acc": "vacuous: no certificate was possible there (every example abstained at this sigma, or the "
    "radius lies past the largest one the run's n noise draws can certify at its alpha)",
}
LIPSCHITZ_VACUOUS = (
    "vacuous: it certifies nothing about the model (more than 1e6 × weaker than the measured lower bound)"
)


def vacuous_decision(decision: Decision, m: Metric) -> Decision:
    """``decision`` on ``m``, never silent about a vacuous certified value: a pass on one becomes a WARN, and both
    a pass and a fail say the value is vacuous (see the module docstring)."""
    if not m.vacuous:
        return decision
    note = VACUOUS_NOTES.get(m.metric, LIPSCHITZ_VACUOUS)
    if decision.status is Status.PASS:
        return replace(decision, status=Status.WARN, detail=f"{decision.detail}; met, but the value is {note}")
    return replace(decision, detail=f"{decision.detail}; the value is {note}")
