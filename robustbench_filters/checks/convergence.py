"""The convergence check, with power: how much may a stronger attack still break, as an upper bound in points.

Carlini et al. advise checking that more effort changes nothing. The attacks that have a stronger rerun (twice the
steps and a restart more; the default: its targeted stage at twice the steps on every target) rerun it on a sample of each eps's survivors; the rows record which of the
checked survivors it broke. From ``k`` broken among ``m`` checked of ``N`` survivors, the exact hypergeometric
bound (:func:`~..stats.intervals.hypergeom_upper`, sampling without replacement from the finite set of survivors) gives the
upper 95% bound ``K`` on how many of all ``N`` survivors the stronger attack would break, so robust accuracy may be
overstated by up to ``100 K / n`` points (``n`` examples). Checking every survivor gives the count itself.

**Fails** when that bound exceeds :data:`THRESHOLD_POINTS` at any eps, and whenever the rerun broke every survivor
it checked (then nothing it checked held, whatever the bound says). A failed check marks the robust accuracy as an
upper bound (exit 3).

**The sample size the bound needs.** With ``n`` examples the bound passes only if ``K <= floor(0.005 n)``
(:func:`allowed`). When the rerun breaks none of the ``m`` checked, the bound is the largest ``K`` for which missing
all ``K`` in the sample still has probability above 5%, about ``(1 - m/N)^(K+1) > 0.05``, so the check can pass only
if ``m / N >= 1 - 0.05^(1 / (floor(0.005 n) + 1))``: 78% of the survivors at n = 256 (one example allowed), 63% at
n = 500, 39% at n = 1000, 6% at n = 10,000. Below about 1,280 examples that is most of them, so every survivor is
checked (the count is then exact); above, each survivor is checked with probability
``max(1.25 x that fraction, 1280 / n)``: the margin keeps a strong attack's check from failing on an unlucky small
sample, and the floor gives at least 64 checked survivors on average while at least 5% of the examples survive.
"""

from __future__ import annotations

import math

import pandas as pd

from ..core.names import ATTACK_SPECS
from ..stats.intervals import hypergeom_upper
from .base import FAIL, PASS, Check, model_rows

#: the convergence column of a survivor that held the rerun at a larger eps of the grid (:mod:`..attacks.cascade`)
COVERED = "covered"
#: ``fooled_by`` of the examples an escalating attack's stronger rerun broke (the attacks' name for it)
RERUN = "rerun"
#: the check fails when the upper bound on the overstatement of robust accuracy exceeds this (percentage points)
THRESHOLD_POINTS = 0.5
LEVEL = 0.95
#: below this many examples every survivor is checked (1280 / n >= 1)
CHECK_ALL_BELOW = 1280
#: rounds of the stronger rerun, at most, for an attack whose rerun escalates (its breaks count; the default)
ROUNDS = 3


def allowed(n: int) -> int:
    """Survivors the stronger attack may break, at most, for the check to pass on ``n`` examples."""
    return math.floor(THRESHOLD_POINTS / 100 * n + 1e-9)


def needed_fraction(n: int) -> float:
    """The share of the survivors a check with no break must cover to pass (the large-population limit, which
    the exact finite-population bound never needs more than)."""
    return 1.0 - (1.0 - LEVEL) ** (1.0 / (allowed(n) + 1))


def sample_probability(n: int) -> float:
    """Each survivor's chance to be checked in a run of ``n`` examples (see the module docstring)."""
    if n <= CHECK_ALL_BELOW:
        return 1.0
    return min(1.0, max(1.25 * needed_fraction(n), CHECK_ALL_BELOW / n))


def overstatement(broken: int, checked: int, survivors: int, n: int, looks: int = 1) -> tuple[int, float]:
    """(upper 95% bound on the survivors the stronger attack would break, the same in points of ``n``).

    ``looks``: rounds whose sample could each have stopped the escalation; a sampled bound is then taken at level
    ``1 - 0.05 / looks`` (Bonferroni), so stopping at the first clean-looking sample cannot inflate the false-pass
    rate. A census (every survivor checked) has no sampling error and needs no correction."""
    level = LEVEL if checked >= survivors else 1.0 - (1.0 - LEVEL) / looks
    upper = hypergeom_upper(broken, checked, survivors, level) if survivors else 0
    return upper, 100.0 * upper / max(n, 1)


def check_convergence(rows: pd.DataFrame, model: str) -> list[Check]:
    """One check per attack that reran: at every eps, survivors, checked, broken and the bound in points."""
    if "convergence" not in rows.columns:
        return []
    adv = model_rows(rows, model, "adversarial")
    rerun = set(adv.loc[adv.convergence.isin(["held", "broken", COVERED]), "attack"])
    out = []
    for attack in [a for a in adv.attack.unique() if a in rerun]:
        cells, failed = [], False
        for eps, sub in adv[adv.attack == attack].groupby("eps", sort=True):
            # covered: held the rerun at a larger eps, whose ball contains this one (the cascade's phase 2)
            covered = sub.convergence == COVERED
            held, hit = (sub.convergence == "held") | covered, sub.convergence == "broken"
            # an escalating attack's last round breaks count (those examples are no longer correct): they were
            # survivors when that round began
            n, broken, checked = len(sub), int(hit.sum()), int((held | hit).sum())
            survivors = int(sub.correct.sum()) + int((hit & ~sub.correct).sum())
            # a checked attack searches each eps from the clean points (the cascade runs its grid largest eps
            # first), so the rerun breaks in this eps's rows are its own escalation's; more than its last round
            # broke: several rounds ran. (Rows of an older, ascending run carry a smaller eps's rerun breaks up the
            # grid: counted here too, they can only make the bound more conservative.)
            escalated = int((sub.fooled_by == RERUN).sum()) if "fooled_by" in sub else 0
            upper, points = overstatement(broken, checked, survivors, n, ROUNDS if escalated > broken else 1)
            everything = checked > 0 and broken == checked
            failed |= points > THRESHOLD_POINTS + 1e-9 or everything
            extra = f", the escalation broke {escalated}" if escalated else ""
            extra += f", {int(covered.sum())} held at a larger eps" if covered.any() else ""
            cells.append(f"eps {eps:g}: broke {broken} of {checked} checked ({survivors} survivors{extra}), "
                         f"overstated by at most {points:.2g} pts")  # fmt: skip
        how = ATTACK_SPECS[attack].rerun if attack in ATTACK_SPECS else "stronger settings"
        detail = f"stronger rerun ({how}): " + "; ".join(cells)
        if failed:
            detail += f" (> {THRESHOLD_POINTS:g}): robust accuracy is an upper bound"
        out.append(Check(f"attack converged ({attack})", model, FAIL if failed else PASS, detail))
    return out


__all__ = ["THRESHOLD_POINTS", "allowed", "check_convergence", "needed_fraction", "overstatement", "sample_probability"]
