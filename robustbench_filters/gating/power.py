"""Minimum detectable effect (MDE): the smallest regression a check catches with 80% power at its n.

A gate that cannot see a 10-point drop should say so before anyone trusts it. For every check this module
gives the smallest true effect that makes the check FAIL with probability ``power`` (default 0.8), from the
normal approximations below (standard planning formulas; :mod:`.power_exact` computes the exact power of the
real decision rules, and the tests hold the two within a few points of power at n = 500).

Notation: n examples, z_a = z_{1-alpha} (one-sided), z_b = z_{power}, z = 1.96 (the 95% intervals), Delta
the true drop in accuracy, pi the discordance rate (share of examples whose outcome differs between the
baseline and the fresh run; a drop of Delta needs pi >= Delta, so pi = max(assumed pi, Delta): a drop larger
than the assumed discordance is taken to be all losses), d the tolerance.

Accuracy against a baseline (baseline outcomes fixed, the observed drop D = (b - c)/n has variance
(pi - Delta^2)/n):

- paired (McNemar; with d > 0 the score test): Delta = d + (z_a sqrt(pi - d^2) + z_b sqrt(pi - Delta^2)) / sqrt(n)
  (Connor 1987, Biometrics 43:207-211, solved for Delta; the margin form as in Nam 1997).
- interval: the rule fails when the observed fresh accuracy falls below c, where the Wilson upper end of c
  equals (Wilson lower end of the baseline) - d; inverting the score interval, c = u - z sqrt(u (1 - u) / n)
  with u = lo_base - d. Then Delta = (p_base - c) + z_b sqrt((pi - Delta^2)/n).
- point: Delta = d + z_b sqrt((pi - Delta^2)/n).

Accuracy against a threshold t (true accuracy p = t - Delta, observed p^ with variance p (1 - p)/n):

- interval: Wilson upper end < t  <=>  p^ < t - z sqrt(t (1 - t)/n), so Delta = z sqrt(t (1 - t)/n) + z_b sqrt(p (1 - p)/n).
- point: Delta = z_b sqrt(p (1 - p)/n).

Perplexity (on the log scale; s = standard error of one run's log-perplexity, from its bootstrap interval,
s_D = sqrt(2 (1 - rho)) s for the paired change with run-to-run correlation rho per sequence, delta the true
log-ratio; the MDE printed is exp(delta) - 1):

- threshold: interval delta = (z + z_b) s, point delta = z_b s.
- baseline: paired delta = log(1 + d) + (z_a + z_b) s_D; interval delta = log(1 + d) + 2 z s + z_b s_D;
  point delta = log(1 + d) + z_b s_D.

Deterministic metrics (certified Lipschitz bounds) have no sampling error: any change past the limit fails.

Several paired checks corrected with Holm (``tests = m`` in :class:`CheckPlan`): a single regressed check among m
is compared with alpha / m (Holm's first step), so its MDE is computed at that level; the printed assumption says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..stats.intervals import Z95, z_quantile
from .metrics import ACCURACIES
from .modes import DEFAULT_ALPHA, DEFAULT_DISCORDANCE, Mode

# Per-sequence correlation of log-perplexities between the baseline and a changed LM on the same text.
# Measured on the study's 64 Austen sequences: 0.875-0.961 between lm and its variants (clean and word swap,
# seeds 0 and 1), 0.94-0.95 between two seeds of one model. 0.85 sits below all of them.
DEFAULT_CORRELATION = 0.85
DEFAULT_POWER = 0.8
ACCURACY_METRICS = ACCURACIES
RATIO_LOG_METRICS = frozenset({"ppl", "word_perplexity", "byte_perplexity"})
DETERMINISTIC_METRICS = frozenset({"lipschitz_upper", "lipschitz_local_upper", "lipschitz_lower", "radius"})


@dataclass(frozen=True)
class Mde:
    """The smallest effect a check detects; ``effect`` is None when it cannot be known (``why`` says why)."""

    effect: float | None
    relative: bool  # True: a relative rise (perplexity), False: absolute points (accuracy)
    assumption: str  # one line: what the figure assumes
    versus: str = "past the limit"  # or "worse than the baseline"

    def text(self) -> str:
        if self.effect is None:
            return f"minimum detectable effect unknown ({self.assumption})"
        if self.effect == 0.0:
            return f"any change past the limit fails ({self.assumption})"
        amount = f"+{100 * self.effect:.1f}%" if self.relative else f"{100 * self.effect:.1f} pp"
        return f"detects {amount} {self.versus} with 80% power ({self.assumption})"


def _bisect(f: Callable[[float], float], lo: float, hi: float, iters: int = 80) -> float | None:
    """The root of an increasing f on [lo, hi], or None when f(hi) < 0 (nothing in range is detectable)."""
    if f(hi) < 0:
        return None
    if f(lo) >= 0:
        return lo
    for _ in range(iters):
        mid = (lo + hi) / 2
        if f(mid) >= 0:
            hi = mid
        else:
            lo = mid
    return hi


def wilson_bound(p: float, n: int, upper: bool, z: float = Z95) -> float:
    """Wilson score interval end at an observed proportion p (continuous, for planning)."""
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(max(p * (1 - p), 0.0) / n + z * z / (4 * n * n)) / denom
    return min(1.0, centre + half) if upper else max(0.0, centre - half)


def _sd(pi: float, delta: float, n: int) -> float:
    """sd of the observed paired drop; a drop larger than the assumed discordance is all losses (pi = Delta)."""
    pi = max(pi, delta)
    return math.sqrt(max(pi - delta * delta, 0.0) / n)


def accuracy_baseline_mde(
    mode: Mode,
    n: int,
    base: float,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    discordance: float = DEFAULT_DISCORDANCE,
) -> float | None:
    """Smallest true accuracy drop (fraction) that fails a baseline check with the given power."""
    zb = z_quantile(power)
    pi, d = discordance, tolerance
    if mode is Mode.PAIRED:
        za = z_quantile(1 - alpha)

        def paired(x: float) -> float:
            null_sd = math.sqrt(max(max(pi, x) - d * d, 0.0) / n)
            return x - d - za * null_sd - zb * _sd(pi, x, n)

        return _bisect(paired, d, base)
    if mode is Mode.INTERVAL:
        u = wilson_bound(base, n, upper=False) - d
        if u <= 0:
            return None  # the fresh upper end can never fall below a lower end of 0
        crit = base - (u - Z95 * math.sqrt(u * (1 - u) / n))
        return _bisect(lambda x: x - crit - zb * _sd(pi, x, n), 0.0, base)
    return _bisect(lambda x: x - d - zb * _sd(pi, x, n), d, base)


def accuracy_threshold_mde(mode: Mode, n: int, threshold: float, power: float = DEFAULT_POWER) -> float | None:
    """How far below a ``min_acc`` threshold the true accuracy must be for the check to fail with the power."""
    zb = z_quantile(power)
    t = threshold
    crit = Z95 * math.sqrt(t * (1 - t) / n) if mode is Mode.INTERVAL else 0.0

    def f(x: float) -> float:
        p = t - x
        return x - crit - zb * math.sqrt(max(p * (1 - p), 0.0) / n)

    return _bisect(f, 0.0, t)


def log_se_from_interval(lo: float, hi: float, n_measured: int | None = None, n_planned: int | None = None) -> float:
    """Standard error of a log-scale estimate from its 95% interval, rescaled from n_measured to n_planned."""
    se = (math.log(hi) - math.log(lo)) / (2 * Z95)
    if n_measured and n_planned:
        se *= math.sqrt(n_measured / n_planned)
    return se


def log_ratio_mde(
    mode: Mode,
    log_se: float,
    baseline: bool,
    tolerance: float = 0.0,
    alpha: float = DEFAULT_ALPHA,
    power: float = DEFAULT_POWER,
    correlation: float = DEFAULT_CORRELATION,
) -> float:
    """Smallest relative rise (e.g. 0.03 = +3% perplexity) that fails the check with the given power."""
    zb = z_quantile(power)
    if not baseline:
        delta = (Z95 + zb) * log_se if mode is Mode.INTERVAL else zb * log_se
        return math.expm1(delta)
    s_d = math.sqrt(2 * (1 - correlation)) * log_se
    margin = math.log1p(tolerance)
    if mode is Mode.PAIRED:
        delta = margin + (z_quantile(1 - alpha) + zb) * s_d
    elif mode is Mode.INTERVAL:
        delta = margin + 2 * Z95 * log_se + zb * s_d
    else:
        delta = margin + zb * s_d
    return math.expm1(delta)


@dataclass(frozen=True)
class CheckPlan:
    """What the MDE of one check depends on; the gate builds one per check from its spec."""

    metric: str  # acc | token_acc | ppl | lipschitz_* | radius
    mode: Mode
    n: int | None  # examples (sequences for LMs) the check's run measures
    reference: float  # the threshold (threshold check) or the baseline's value (baseline check)
    baseline: bool  # True: compared with a baseline; False: with a threshold
    tolerance: float = 0.0
    alpha: float = DEFAULT_ALPHA
    power: float = DEFAULT_POWER
    discordance: float = DEFAULT_DISCORDANCE
    log_se: float | None = None  # ratio metrics: standard error of one run's log value at n
    correlation: float = DEFAULT_CORRELATION
    tests: int = 1  # paired checks in the gate's Holm family: one regression among them is judged at alpha / tests

    @property
    def level(self) -> float:
        """The one-sided level a single regressed check faces (alpha, or alpha / tests under Holm)."""
        return self.alpha / max(1, self.tests)

    def alpha_text(self) -> str:
        if self.tests > 1:
            return (
                f"one-sided alpha {self.alpha:g} Holm-adjusted over {self.tests} paired checks ({self.level:.2g} each)"
            )
        return f"one-sided alpha {self.alpha:g}"


def _acc_assumption(plan: CheckPlan) -> str:
    base = f"n = {plan.n}, {plan.mode} mode"
    if plan.baseline and plan.mode is Mode.PAIRED:
        base += f", {plan.alpha_text()}"
    if plan.baseline:
        base += f", {100 * plan.discordance:.0f}% of examples assumed to change outcome"
    return base + (f", tolerance {100 * plan.tolerance:.1f} pp" if plan.tolerance else "")


def minimum_detectable(plan: CheckPlan) -> Mde:
    """The MDE of one check, with the assumptions it rests on in one line."""
    versus = "worse than the baseline" if plan.baseline else "past the limit"
    if plan.metric in DETERMINISTIC_METRICS:
        return Mde(0.0, False, "deterministic value, no sampling error")
    if not plan.n:
        return Mde(None, False, "the number of examples is not known")
    if plan.metric in ACCURACY_METRICS:
        mode = plan.mode
        if plan.baseline:
            x = accuracy_baseline_mde(mode, plan.n, plan.reference, plan.tolerance, plan.level, plan.power,
                                      plan.discordance)  # fmt: skip
        else:
            x = accuracy_threshold_mde(mode, plan.n, plan.reference, plan.power)
        why = _acc_assumption(plan) if x is not None else _acc_assumption(plan) + "; nothing in range is detectable"
        return Mde(x, False, why, versus)
    if plan.metric in RATIO_LOG_METRICS:
        if plan.log_se is None:
            return Mde(None, True, f"no interval known for {plan.metric} at n = {plan.n}")
        x = log_ratio_mde(plan.mode, plan.log_se, plan.baseline, plan.tolerance, plan.level, plan.power,
                          plan.correlation)  # fmt: skip
        why = f"n = {plan.n}, {plan.mode} mode, log-se {plan.log_se:.3g} from the bootstrap interval"
        if plan.baseline and plan.mode is Mode.PAIRED:
            why += f", {plan.alpha_text()}"
        if plan.baseline and plan.mode is not Mode.INTERVAL:
            why += f", per-sequence correlation {plan.correlation:g} between runs assumed"
        return Mde(x, True, why, versus)
    return Mde(None, False, f"no sampling interval is recorded for {plan.metric}")


__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_CORRELATION",
    "DEFAULT_DISCORDANCE",
    "DEFAULT_POWER",
    "CheckPlan",
    "Mde",
    "accuracy_baseline_mde",
    "accuracy_threshold_mde",
    "log_ratio_mde",
    "log_se_from_interval",
    "minimum_detectable",
    "wilson_bound",
]
