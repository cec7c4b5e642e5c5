"""Verdicts on the paper's claims, derived only from the numbers (per-seed paired differences).

The unit of replication is the training seed: every model is trained once per seed and measured on the same
examples, so for a claim "variant V beats baseline B on metric M" we have one paired difference per seed,
d_s = M(V, s) - M(B, s). Orient it so that positive means "in the claimed direction" (d'_s = direction * d_s)
and take the mean and the 95% Student-t interval [lo, hi] across seeds (:func:`..stats.intervals.mean_interval`, a paired t-interval). With ``delta`` the smallest effect the claim would need to matter:

- **supported**: lo > 0 (the interval excludes 0 in the claimed direction);
- **not supported**: hi < 0 (it excludes 0 in the opposite direction), or the mean is <= 0 and hi < delta
  (the estimate goes the other way and the interval excludes the claimed effect size);
- **inconclusive at this scale**: anything else, including fewer than two seeds (no interval), a
  measurement that was not made, or certified Lipschitz bounds that are vacuous in some seed
  (:mod:`robustbench_filters.stats.vacuity`: a difference between two bounds that say nothing about the constants is
  not evidence about the constants).

A claim about the combination being *best* holds only if it beats every other variant: supported when all its
comparisons are supported, not supported when any is not supported, inconclusive otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

import pandas as pd

from ..core.names import DEFAULT_IMAGE_ATTACK
from ..stats.intervals import mean_interval
from .scores import VACUOUS_SCORES, vacuous_cells
from .tables import domain

MIN_SEEDS = 2


class Verdict(str, Enum):
    SUPPORTED = "supported"
    NOT_SUPPORTED = "not supported"
    INCONCLUSIVE = "inconclusive at this scale"


@dataclass(frozen=True)
class Comparison:
    """variant vs baseline on one (family, metric, condition) of the scores table."""

    family: str
    metric: str
    condition: str
    baseline: str
    variant: str
    direction: int  # +1: the claim says the variant is higher; -1: lower
    delta: float  # smallest effect (metric units, > 0) the claim needs to matter


@dataclass(frozen=True)
class ClaimSpec:
    id: str
    claim: str
    scope: str
    evidence: str  # what the metric is, in words
    comparisons: tuple[Comparison, ...]
    primary: bool = True


@dataclass
class ComparisonResult:
    comparison: Comparison
    diffs: dict[int, float]  # seed -> variant - baseline (raw orientation)
    mean: float
    lo: float
    hi: float
    verdict: Verdict
    reason: str


@dataclass
class ClaimResult:
    spec: ClaimSpec
    verdict: Verdict
    reason: str
    results: list[ComparisonResult] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "id": self.spec.id,
            "claim": self.spec.claim,
            "scope": self.spec.scope,
            "evidence": self.spec.evidence,
            "primary": self.spec.primary,
            "verdict": self.verdict.value,
            "reason": self.reason,
            "comparisons": [
                {
                    "baseline": r.comparison.baseline,
                    "variant": r.comparison.variant,
                    "metric": r.comparison.metric,
                    "condition": r.comparison.condition,
                    "direction": r.comparison.direction,
                    "delta": r.comparison.delta,
                    "diffs": {str(k): v for k, v in r.diffs.items()},
                    "mean": r.mean,
                    "lo": r.lo,
                    "hi": r.hi,
                    "verdict": r.verdict.value,
                    "reason": r.reason,
                }
                for r in self.results
            ],
        }


def judge(diffs: Sequence[float], delta: float, min_seeds: int = MIN_SEEDS) -> tuple[Verdict, str]:
    """The verdict rule of the module docstring, on differences already oriented (positive = as claimed)."""
    values = [float(d) for d in diffs]
    if len(values) < min_seeds:
        return Verdict.INCONCLUSIVE, f"{len(values)} seed(s): no interval across seeds (needs >= {min_seeds})"
    if not all(math.isfinite(v) for v in values):
        return Verdict.INCONCLUSIVE, "a per-seed value is not finite"
    mean, lo, hi = mean_interval(values)
    if lo > 0:
        return Verdict.SUPPORTED, "95% CI excludes 0 in the claimed direction"
    if hi < 0:
        return Verdict.NOT_SUPPORTED, "95% CI excludes 0 in the opposite direction"
    if mean <= 0 and hi < delta:
        way = "goes the other way" if mean < 0 else "is zero"
        return Verdict.NOT_SUPPORTED, f"estimate {way} and the CI excludes the claimed effect ({delta:g})"
    return Verdict.INCONCLUSIVE, "95% CI includes 0"


def paired_diffs(scores: pd.DataFrame, c: Comparison) -> dict[int, float]:
    """seed -> value(variant) - value(baseline), over the seeds where both were measured."""
    if scores.empty:
        return {}
    sel = scores[(scores["family"] == c.family) & (scores["metric"] == c.metric) & (scores["condition"] == c.condition)]
    base = sel[sel["model"] == c.baseline].set_index("seed")["value"]
    var = sel[sel["model"] == c.variant].set_index("seed")["value"]
    seeds = sorted(set(base.index) & set(var.index))
    return {int(s): float(var[s] - base[s]) for s in seeds}


def compare(scores: pd.DataFrame, c: Comparison, min_seeds: int = MIN_SEEDS) -> ComparisonResult:
    diffs = paired_diffs(scores, c)
    if not diffs:
        nan = float("nan")
        return ComparisonResult(c, {}, nan, nan, nan, Verdict.INCONCLUSIVE, "not measured in this study")
    mean, lo, hi = mean_interval(list(diffs.values()), domain(c.metric, difference=True))  # e.g. [-1, 1] for acc
    verdict, reason = judge([c.direction * d for d in diffs.values()], c.delta, min_seeds)
    vacuous = sorted(m for m, cond in vacuous_cells(scores, c.family, c.metric) if cond == c.condition)
    if c.metric in VACUOUS_SCORES and ({c.baseline, c.variant} & set(vacuous)):
        verdict = Verdict.INCONCLUSIVE
        reason = (f"vacuous certified bounds ({', '.join(v for v in vacuous if v in (c.baseline, c.variant))}: "
                  "more than 1e6 x the lower bound); their difference is not evidence")  # fmt: skip
    return ComparisonResult(c, diffs, mean, lo, hi, verdict, reason)


def combine(results: Sequence[ComparisonResult]) -> tuple[Verdict, str]:
    """One comparison: its verdict. Several ("best"): supported iff all are, not supported iff any is not."""
    if len(results) == 1:
        return results[0].verdict, results[0].reason
    verdicts = [r.verdict for r in results]
    if all(v is Verdict.SUPPORTED for v in verdicts):
        return Verdict.SUPPORTED, "beats every other variant (each 95% CI excludes 0)"
    losers = [r.comparison.baseline for r in results if r.verdict is Verdict.NOT_SUPPORTED]
    if losers:
        return Verdict.NOT_SUPPORTED, f"not better than {', '.join(losers)}"
    unmeasured = [r.comparison.baseline for r in results if not r.diffs]
    if unmeasured:
        return Verdict.INCONCLUSIVE, f"not measured against {', '.join(unmeasured)}"
    open_ = [r for r in results if r.verdict is Verdict.INCONCLUSIVE]
    reasons = {r.reason for r in open_}
    why = reasons.pop() if len(reasons) == 1 else "no clear difference"
    return Verdict.INCONCLUSIVE, f"vs {', '.join(r.comparison.baseline for r in open_)}: {why}"


def evaluate_claims(
    scores: pd.DataFrame, specs: Sequence[ClaimSpec] | None = None, min_seeds: int = MIN_SEEDS
) -> list[ClaimResult]:
    """Verdict per claim from a scores table (columns family, model, seed, metric, condition, value)."""
    out = []
    for spec in CLAIMS if specs is None else specs:
        results = [compare(scores, c, min_seeds) for c in spec.comparisons]
        verdict, reason = combine(results)
        out.append(ClaimResult(spec, verdict, reason, results))
    return out


# --- the paper's claims -------------------------------------------------------------------------------------

ACC_DELTA = 0.01  # 1 percentage point of accuracy
LOG_PPL_DELTA = 0.01  # ~1% perplexity
LOG10_DELTA = 0.05  # ~12% of a Lipschitz bound
SLOPE_DELTA = 0.05  # growth exponent
RADIUS_DELTA = 0.01  # certified L2 radius on the [0, 1] pixel scale


def _vs(family: str, metric: str, condition: str, base: str, var: str, direction: int, delta: float) -> Comparison:
    return Comparison(family, metric, condition, base, var, direction, delta)


def _best(family: str, metric: str, condition: str, best: str, others: Sequence[str], direction: int, delta: float):
    return tuple(_vs(family, metric, condition, o, best, direction, delta) for o in others)


VISION = "vision: DeiT micro, Fashion-MNIST"
STRONG = DEFAULT_IMAGE_ATTACK  # the default image attack: the strongest ensemble robfilt offers
LANGUAGE = "language: LM micro, Austen"

CLAIMS: tuple[ClaimSpec, ...] = (
    # Robustness claims are judged under the strongest attack robfilt has (STRONG); the attack a claim names (PGD-20,
    # FGSM: weaker, upper bounds) is a secondary line below, so a reader sees where a verdict depended on the attack.
    ClaimSpec("a", "Boosting (GRC) raises PGD robustness", VISION,
              f"Linf robust accuracy under {STRONG} (the strongest attack), mean over the eps grid",
              (_vs("image", "acc_mean", STRONG, "deit", "deit-grc", +1, ACC_DELTA),)),
    ClaimSpec("b", "Boosting (GRC) raises FGSM robustness", VISION,
              f"Linf robust accuracy under {STRONG} (the strongest attack), mean over the eps grid",
              (_vs("image", "acc_mean", STRONG, "deit", "deit-grc", +1, ACC_DELTA),)),
    ClaimSpec("c", "Boosting (GRC) lowers the Lipschitz constant", VISION,
              "log10 of the layerwise estimate (product of the exact per-sublayer Jacobian norms at each input; "
              "not certified), median over examples",
              (_vs("image", "lip_log10_layerwise", "model", "deit", "deit-grc", -1, LOG10_DELTA),)),
    ClaimSpec("d", "BSA lowers contaminated perplexity", LANGUAGE,
              "log perplexity under word swap, mean over the rates > 0",
              (_vs("lm", "log_ppl_mean", "wordswap", "lm", "lm-bsa", -1, LOG_PPL_DELTA),)),
    ClaimSpec("e", "BSA's perturbation grows more slowly with sequence length", LANGUAGE,
              "growth exponent of the last-token logit change vs context length N (log-log slope)",
              (_vs("lm", "seqlen_slope", "last-token gain", "lm", "lm-bsa", -1, SLOPE_DELTA),)),
    ClaimSpec("f", "BSA + boosting together is best", VISION,
              f"Linf robust accuracy under {STRONG}, mean over the eps grid, vs each other variant",
              _best("image", "acc_mean", STRONG, "deit-bsa-grc", ("deit", "deit-bsa", "deit-grc"), +1, ACC_DELTA)),
    ClaimSpec("f", "BSA + boosting together is best", LANGUAGE,
              "word-swap log perplexity, mean over the rates > 0, vs each other variant",
              _best("lm", "log_ppl_mean", "wordswap", "lm-bsa-grc", ("lm", "lm-bsa", "lm-grc"), -1, LOG_PPL_DELTA)),
    # secondary evidence: the robustness claims under the attack they name (weaker: upper bounds), ...
    ClaimSpec("a", "Boosting (GRC) raises PGD robustness", VISION,
              "PGD-20 Linf robust accuracy (a weaker attack), mean over the eps grid",
              (_vs("image", "acc_mean", "pgd", "deit", "deit-grc", +1, ACC_DELTA),), primary=False),
    ClaimSpec("b", "Boosting (GRC) raises FGSM robustness", VISION,
              "FGSM Linf robust accuracy (a weaker attack), mean over the eps grid",
              (_vs("image", "acc_mean", "fgsm", "deit", "deit-grc", +1, ACC_DELTA),), primary=False),
    ClaimSpec("f", "BSA + boosting together is best", VISION,
              "PGD-20 Linf robust accuracy (a weaker attack), mean over the eps grid, vs each other variant",
              _best("image", "acc_mean", "pgd", "deit-bsa-grc", ("deit", "deit-bsa", "deit-grc"), +1, ACC_DELTA),
              primary=False),
    # ... and the same claims in the other family / at the layer level
    ClaimSpec("a", "Boosting (GRC) raises PGD robustness", LANGUAGE,
              "log perplexity under embedding PGD, mean over the eps grid",
              (_vs("lm", "log_ppl_mean", "pgd", "lm", "lm-grc", -1, LOG_PPL_DELTA),), primary=False),
    ClaimSpec("b", "Boosting (GRC) raises FGSM robustness", LANGUAGE,
              "log perplexity under embedding FGSM, mean over the eps grid",
              (_vs("lm", "log_ppl_mean", "fgsm", "lm", "lm-grc", -1, LOG_PPL_DELTA),), primary=False),
    ClaimSpec("c", "Boosting (GRC) lowers the Lipschitz constant", VISION,
              "certified L2 radius of the Gaussian-smoothed classifier (randomized smoothing, sigma 0.12), mean "
              "over examples (0 where not certified)",
              (_vs("image", "certified_radius_mean", "sigma=0.12", "deit", "deit-grc", +1, RADIUS_DELTA),),
              primary=False),
    ClaimSpec("c", "Boosting (GRC) lowers the Lipschitz constant", VISION,
              "log10 of the certified global Lipschitz upper bound",
              (_vs("image", "lip_log10_upper", "model", "deit", "deit-grc", -1, LOG10_DELTA),), primary=False),
    ClaimSpec("c", "Boosting (GRC) lowers the Lipschitz constant", VISION,
              "log10 of the certified local Lipschitz bound of linear bound propagation (CROWN; l2 ball of radius "
              "1e-3 around each image, pixels to logits), median over examples",
              (_vs("image", "lip_log10_crown", "rho=0.001", "deit", "deit-grc", -1, LOG10_DELTA),), primary=False),
    ClaimSpec("c", "Boosting (GRC) lowers the Lipschitz upper bound", LANGUAGE,
              "log10 of the certified global Lipschitz upper bound",
              (_vs("lm", "lip_log10_upper", "model", "lm", "lm-grc", -1, LOG10_DELTA),), primary=False),
    ClaimSpec("d", "BSA lowers contaminated perplexity, relative to its own clean perplexity", LANGUAGE,
              "perplexity under word swap / clean perplexity (log scale), mean over the rates > 0: separates "
              "robustness from a better clean fit",
              (_vs("lm", "log_ppl_increase", "wordswap", "lm", "lm-bsa", -1, LOG_PPL_DELTA),), primary=False),
    ClaimSpec("d", "BSA lowers contaminated error (images: corruptions)", VISION,
              "accuracy under the corruption suite, mean over corruptions and severities",
              (_vs("image", "corruption_acc", "mean", "deit", "deit-bsa", +1, ACC_DELTA),), primary=False),
    ClaimSpec("e", "BSA's perturbation grows more slowly with sequence length", "one attention layer, synthetic",
              "growth exponent of the RMS output change vs N (softmax + sinusoidal positions vs Gaussian BSA)",
              (_vs("layer", "seqlen_slope", "attention layer", "softmax+pos", "bsa-gaussian", -1, SLOPE_DELTA),),
              primary=False),
)  # fmt: skip
