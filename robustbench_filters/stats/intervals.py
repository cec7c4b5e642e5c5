"""Statistics for honest robustness numbers: binomial intervals and paired tests.

Every accuracy is reported with a 95% Wilson score interval (well-behaved at 0% and 100%, unlike the normal
approximation), and every paired comparison on the same examples uses McNemar's exact test. Every interval stays
inside the domain of its quantity: a mean's t-interval is clipped to it (:func:`mean_interval`), proportions get
Wilson or Clopper-Pearson intervals, ratios of positive sums a bootstrap over examples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist
from typing import Any

Z95 = NormalDist().inv_cdf(0.975)


BOOTSTRAP = 1000  # resamples of every bootstrap interval


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion; (0, 1) when n == 0."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (only A right) and c (only B right)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


#: the values a quantity can take, (low, high), None for no bound: an interval never leaves its quantity's domain
Domain = tuple[float | None, float | None]
UNBOUNDED: Domain = (None, None)
PROPORTION: Domain = (0.0, 1.0)  # accuracies, certified and token accuracies
NONNEGATIVE: Domain = (0.0, None)  # Lipschitz bounds, gains, radii, log-perplexities, mCE


def clip(lo: float, hi: float, domain: Domain = UNBOUNDED) -> tuple[float, float]:
    """``[lo, hi]`` intersected with ``domain``. The true value lies in its domain, so an interval that covers it
    still covers it after the intersection: the coverage is unchanged, and no bound is impossible."""
    low, high = domain
    if low is not None and math.isfinite(lo):
        lo, hi = max(lo, low), max(hi, low)
    if high is not None and math.isfinite(hi):
        lo, hi = min(lo, high), min(hi, high)
    return lo, hi


def difference_domain(domain: Domain) -> Domain:
    """The domain of a difference of two quantities of ``domain`` ([0, 1] -> [-1, 1]; unbounded otherwise)."""
    low, high = domain
    if low is None or high is None:
        return UNBOUNDED
    return (low - high, high - low)


def mean_interval(values: list[float], domain: Domain = UNBOUNDED) -> tuple[float, float, float]:
    """Mean and the 95% Student-t interval of the mean (across seeds, or across examples), within ``domain``.

    For a bounded or non-negative quantity the t-interval is intersected with its domain (:func:`clip`): the
    estimand stays the arithmetic mean, and the coverage of the t-interval is kept (a log-scale interval would
    be about the geometric mean instead; a bootstrap over 2-5 values covers far less than 95%).
    """
    n = len(values)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    mean = sum(values) / n
    if n == 1:
        return mean, float("nan"), float("nan")
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    t = _t_quantile_975(n - 1)
    half = t * sd / math.sqrt(n)
    lo, hi = clip(mean - half, mean + half, domain)
    return mean, lo, hi


def finite_interval(values: list[float], domain: Domain = UNBOUNDED) -> tuple[float | None, float | None]:
    """The 95% t-interval of :func:`mean_interval` as (lo, hi), each None where undefined (fewer than 2 values):
    the form summaries record, since JSON has no NaN."""
    _, lo, hi = mean_interval(values, domain)
    return (lo, hi) if math.isfinite(lo) and math.isfinite(hi) else (None, None)


def _t_quantile_975(df: int) -> float:
    """Student-t 97.5% quantile (scipy; a table of rounded values understated or overstated it between rows)."""
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


# --- one-sided paired tests (the CI gate asks "did the fresh run get worse?", never "did it change?") ---


def normal_sf(z: float) -> float:
    """Upper tail P(Z >= z) of the standard normal."""
    return 1.0 - NormalDist().cdf(z)


def z_quantile(q: float) -> float:
    """The standard normal q-quantile (z_quantile(0.95) = 1.645)."""
    return NormalDist().inv_cdf(q)


def binom_half_sf(k: int, n: int) -> float:
    """P(X >= k) for X ~ Binomial(n, 1/2), exactly (integer sums; the division rounds once)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2**n


def mcnemar_one_sided(b: int, c: int) -> float:
    """One-sided exact McNemar p-value for "B is worse than A" on paired binary outcomes.

    ``b`` counts pairs where only A is right (A correct, B wrong), ``c`` pairs where only B is right. Given the
    b + c discordant pairs, b ~ Binomial(b + c, 1/2) when A and B are equally accurate (the conditional exact
    test; McNemar 1947, exact form as in Agresti, *Categorical Data Analysis*, 3rd ed., sec. 11.1.4), so
    p = P(Binomial(b + c, 1/2) >= b). Concordant pairs carry no information about the difference.
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    return binom_half_sf(b, b + c)


def paired_margin_score_test(b: int, c: int, n: int, margin: float) -> tuple[float, float]:
    """One-sided score test of H0: drop <= margin vs H1: drop > margin for paired proportions; (z, p).

    The drop is ``p_b - p_c`` (the probability that only A is right minus the probability that only B is
    right, i.e. acc(A) - acc(B)); ``n`` counts all pairs, concordant ones included. This is Tango's score test
    (Tango 1998, "Equivalence test and confidence interval for the difference in proportions for the
    paired-sample design", Stat. Med. 17:891-908; Nam 1997, Biometrics 53:1422-1430 for the non-inferiority
    form). The variance of (b - c)/n is evaluated at the restricted maximum-likelihood estimate of the cell
    probabilities under ``p_b - p_c = margin``:

        z = (b - c - n d) / sqrt(n (2 q + d (1 - d))),   q = (sqrt(B^2 - 4 A C) - B) / (2 A),
        A = 2n, B = -b - c + (2n - b + c) d, C = -c d (1 - d),      (q = restricted p_c, d = margin)

    Liu et al. (2002, Stat. Med. 21:231-245) found its size close to nominal for paired non-inferiority. At
    ``margin = 0`` it is McNemar's score test z = (b - c) / sqrt(b + c); use :func:`mcnemar_one_sided` there.
    """
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    if n <= 0 or b < 0 or c < 0 or b + c > n:
        raise ValueError(f"need 0 <= b + c <= n and n > 0, got b={b}, c={c}, n={n}")
    d = margin
    A = 2.0 * n
    B = -b - c + (2.0 * n - b + c) * d
    C = -c * d * (1.0 - d)
    q = (math.sqrt(max(B * B - 4 * A * C, 0.0)) - B) / (2 * A)
    var = n * (2 * q + d * (1 - d))
    num = b - c - n * d
    if var <= 0:  # margin 0 and no discordant pair: no evidence of any drop
        return 0.0, 1.0
    z = num / math.sqrt(var)
    return z, normal_sf(z)


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (Holm 1979): compare each with alpha to keep the family-wise rate.

    For a gate with many checks: an unchanged-but-retrained model fails *some* check at per-check alpha far
    more often than alpha; Holm-adjusted p-values bound that rate by alpha, uniformly more powerful than
    Bonferroni.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def clopper_pearson(successes: int, n: int, level: float = 0.95) -> tuple[float, float]:
    """Exact two-sided binomial interval (what certified accuracies are reported with); (0, 1) when n == 0."""
    from scipy import stats

    if n <= 0:
        return 0.0, 1.0
    tail = (1 - level) / 2
    low = float(stats.beta.ppf(tail, successes, n - successes + 1)) if successes > 0 else 0.0
    high = float(stats.beta.ppf(1 - tail, successes + 1, n - successes)) if successes < n else 1.0
    return low, high


def hypergeom_cdf(k: int, population: int, marked: int, sample: int) -> float:
    """P(X <= k) for X the number of marked items in a simple random sample (without replacement) of ``sample``
    items from ``population`` items of which ``marked`` are marked; exact integer arithmetic."""
    lo, hi = max(0, sample - (population - marked)), min(sample, marked)
    if k < lo:
        return 0.0
    if k >= hi:
        return 1.0
    total = math.comb(population, sample)
    hits = sum(math.comb(marked, j) * math.comb(population - marked, sample - j) for j in range(lo, k + 1))
    return hits / total


def hypergeom_upper(broken: int, sample: int, population: int, level: float = 0.95) -> int:
    """Exact one-sided upper ``level`` confidence bound on the number of marked items in a finite population, from
    ``broken`` marked ones among a simple random sample of ``sample`` drawn without replacement: the largest K
    with P(X <= broken | K) > 1 - level (the hypergeometric analogue of Clopper-Pearson). A sample of the whole
    population gives the count itself; every item of the population not sampled may be marked at worst."""
    if not 0 <= broken <= sample <= population:
        raise ValueError(f"need 0 <= broken <= sample <= population, got {broken}, {sample}, {population}")
    alpha = 1.0 - level
    upper = broken
    for marked in range(broken + 1, population - sample + broken + 1):
        if hypergeom_cdf(broken, population, marked, sample) <= alpha:
            break
        upper = marked
    return upper


def max_certifiable_radius(sigma: float, n: int, alpha: float) -> float:
    """The largest L2 radius randomized-smoothing CERTIFY can return with ``n`` noise draws at failure probability
    ``alpha``: all n draws hit the top class, so its one-sided Clopper-Pearson lower bound is alpha^(1/n) and the
    radius sigma * Phi^-1(alpha^(1/n)) (Cohen et al. 2019). n = 1000, alpha = 0.001 give 2.46 sigma; larger radii
    need more draws. (Here, not in smoothing/, because the gate judges certified accuracies from run folders.)
    """
    from scipy import stats

    return float(sigma * stats.norm.ppf(alpha ** (1.0 / n)))


def bootstrap_ratio_interval(
    num: Any, den: Any, transform: Callable[[Any], Any] | None = None, n_boot: int = BOOTSTRAP, seed: int = 0
) -> tuple[float, float]:
    """95% percentile bootstrap interval of transform(sum num / sum den) (default: exp, a perplexity), resampling
    examples (seeded, so the engine's summary and the report compute the same interval)."""
    import numpy as np

    transform = np.exp if transform is None else transform
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    if len(num) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(num), size=(n_boot, len(num)))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        stats = transform(num[idx].sum(1) / den[idx].sum(1))
    if np.isnan(stats).all():  # nothing to resample (no tokens): no interval, and no All-NaN warning
        return math.nan, math.nan
    lo, hi = np.nanpercentile(stats, [2.5, 97.5])
    return float(lo), float(hi)


def lm_eval_columns(rows: Any) -> dict[str, float]:
    """lm-eval's three metrics over per-example rows (``nll_sum``, ``n_words``, ``n_bytes``), each with the
    95% bootstrap interval over examples; empty when the rows were not scored lm-eval style (the definitions:
    :mod:`robustbench_filters.models.hf.rolling`)."""
    import numpy as np

    if "n_bytes" not in rows or not len(rows) or int(rows.n_bytes.sum()) <= 0:
        return {}
    if "n_tokens" in rows and int(rows.n_tokens.sum()) <= 0:  # no token was predicted: no perplexity at all
        names = ("word_perplexity", "byte_perplexity", "bits_per_byte")
        return {f"{m}{end}": math.nan for m in names for end in ("", "_lo", "_hi")}
    nll = rows.nll_sum.to_numpy(float)
    words, nbytes = rows.n_words.to_numpy(float), rows.n_bytes.to_numpy(float)
    word_lo, word_hi = bootstrap_ratio_interval(nll, words)
    byte_lo, byte_hi = bootstrap_ratio_interval(nll, nbytes)
    bits = bootstrap_ratio_interval(nll, nbytes, transform=lambda x: np.asarray(x) / math.log(2))
    return {
        "word_perplexity": math.exp(float(nll.sum() / words.sum())),
        "word_perplexity_lo": word_lo,
        "word_perplexity_hi": word_hi,
        "byte_perplexity": math.exp(float(nll.sum() / nbytes.sum())),
        "byte_perplexity_lo": byte_lo,
        "byte_perplexity_hi": byte_hi,
        "bits_per_byte": float(nll.sum() / nbytes.sum()) / math.log(2),
        "bits_per_byte_lo": bits[0],
        "bits_per_byte_hi": bits[1],
    }
