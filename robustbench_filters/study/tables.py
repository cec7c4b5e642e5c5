"""Across-seed tables for the write-up: mean and 95% t-interval per model, paired differences, McNemar.

Each cell aggregates the per-seed values of one (model, metric, condition) with
:func:`robustbench_filters.stats.intervals.mean_interval`. Perplexities and Lipschitz bounds are averaged on the log
scale, so a perplexity cell is a geometric mean across seeds with its interval mapped back through ``exp``, and a
paired perplexity difference is a ratio (variant / baseline).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from ..stats.intervals import NONNEGATIVE, PROPORTION, UNBOUNDED, Domain, difference_domain, mean_interval

Fmt = Callable[[float], str]


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _pp(x: float) -> str:
    return f"{100 * x:+.1f}"


def _exp(x: float) -> str:
    return f"{math.exp(x):.3g}" if math.isfinite(x) else "-"


def _ratio(x: float) -> str:
    return f"x{math.exp(x):.3f}" if math.isfinite(x) else "-"


def _g(x: float) -> str:
    return f"{x:.3g}"


def _f2(x: float) -> str:
    return f"{x:.2f}"


def _sf2(x: float) -> str:
    return f"{x:+.2f}"


def _f3(x: float) -> str:
    return f"{x:.3f}"


def _sf3(x: float) -> str:
    return f"{x:+.3f}"


# metric -> (cell formatter, paired-difference formatter, what the cell shows)
METRICS: dict[str, tuple[Fmt, Fmt, str]] = {
    "acc": (_pct, _pp, "accuracy %"),
    "acc_mean": (_pct, _pp, "accuracy % (mean over eps)"),
    "corruption_acc": (_pct, _pp, "accuracy % (mean over severities)"),
    "mce": (_f3, _sf3, "mCE vs the baseline (lower is better)"),
    "log_ppl": (_exp, _ratio, "perplexity (geometric mean over seeds)"),
    "log_ppl_mean": (_exp, _ratio, "perplexity (geometric mean over eps / rates > 0)"),
    "log_ppl_increase": (_ratio, _ratio, "perplexity / clean perplexity"),
    "lip_lower_mean": (_g, _sf3, "mean per-example lower bound"),
    "lip_lower_max": (_g, _sf3, "max per-example lower bound"),
    "lip_log10_upper": (_f2, _sf2, "log10 certified global upper bound"),
    "lip_log10_layerwise": (_f2, _sf2, "log10 layerwise estimate (product of exact sublayer norms; not certified)"),
    "lip_log10_local": (_f2, _sf2, "log10 certified local upper bound"),
    "lip_log10_crown": (_f2, _sf2, "log10 certified local bound of linear bound propagation (CROWN; median)"),
    "certified_radius_mean": (_f3, _sf3, "certified L2 radius of the smoothed classifier (mean)"),
    "certified_acc": (_pct, _pp, "certified accuracy % of the smoothed classifier (radius > 0)"),
    "lip_layer_lower_mean": (_g, _sf3, "per-block gain at the hidden states (mean)"),
    "lip_layer_log10_upper": (_f2, _sf2, "log10 certified block constant"),
    "seqlen_slope": (_f3, _sf3, "growth exponent (log-log slope)"),
    "seqlen_gain": (_g, _sf3, "last-token logit gain"),
    "seqlen_perturbation": (_g, _sf3, "RMS output change"),
}


#: the values each metric can take: its intervals across seeds stay inside (stats.mean_interval clips to it)
DOMAINS: dict[str, Domain] = {
    "acc": PROPORTION,
    "acc_mean": PROPORTION,
    "corruption_acc": PROPORTION,
    "certified_acc": PROPORTION,
    "mce": NONNEGATIVE,
    "log_ppl": NONNEGATIVE,  # perplexity >= 1
    "log_ppl_mean": NONNEGATIVE,
    "lip_lower_mean": NONNEGATIVE,
    "lip_lower_max": NONNEGATIVE,
    "certified_radius_mean": NONNEGATIVE,
    "lip_layer_lower_mean": NONNEGATIVE,
    "seqlen_gain": NONNEGATIVE,
    "seqlen_perturbation": NONNEGATIVE,
}


def domain(metric: str, difference: bool = False) -> Domain:
    """The domain of ``metric`` (or of a paired difference of it); unbounded for log10 bounds and slopes."""
    d = DOMAINS.get(metric, UNBOUNDED)
    return difference_domain(d) if difference else d


def interval_cell(values: Sequence[float], fmt: Fmt, within: Domain = UNBOUNDED) -> str:
    """'m [lo, hi]' across seeds (the t-interval clipped to ``within``); just 'm' for one seed; '-' for none."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return "-"
    mean, lo, hi = mean_interval(values, within)
    if len(values) < 2:
        return fmt(mean)
    return f"{fmt(mean)} [{fmt(lo)}, {fmt(hi)}]"


def _select(scores: pd.DataFrame, family: str, metric: str) -> pd.DataFrame:
    if scores.empty:
        return scores
    return scores[(scores["family"] == family) & (scores["metric"] == metric)]


def seed_table(
    scores: pd.DataFrame, family: str, metric: str, models: Sequence[str] | None = None, label: str = "condition"
) -> pd.DataFrame:
    """Rows: conditions (column ``label``); columns: models; cells: mean [95% t-CI] across seeds."""
    sel = _select(scores, family, metric)
    if sel.empty:
        return pd.DataFrame()
    fmt = METRICS[metric][0]
    models = [m for m in (models or pd.unique(sel["model"])) if m in set(sel["model"])]
    rows = []
    for cond in pd.unique(sel["condition"]):
        c = sel[sel["condition"] == cond]
        rows.append([cond, *[interval_cell(list(c[c["model"] == m]["value"]), fmt, domain(metric)) for m in models]])
    return pd.DataFrame(rows, columns=[label, *models])


def paired_table(
    scores: pd.DataFrame, family: str, metric: str, baseline: str, conditions: Sequence[str] | None = None
) -> pd.DataFrame:
    """Per variant and condition: variant - baseline per seed, and its mean [95% paired t-CI] across seeds."""
    sel = _select(scores, family, metric)
    if sel.empty or baseline not in set(sel["model"]):
        return pd.DataFrame()
    fmt = METRICS[metric][1]
    rows = []
    for variant in [m for m in pd.unique(sel["model"]) if m != baseline]:
        for cond in conditions or pd.unique(sel["condition"]):
            c = sel[sel["condition"] == cond]
            base = c[c["model"] == baseline].set_index("seed")["value"]
            var = c[c["model"] == variant].set_index("seed")["value"]
            seeds = sorted(set(base.index) & set(var.index))
            if not seeds:
                continue
            diffs = [float(var[s] - base[s]) for s in seeds]
            cell = interval_cell(diffs, fmt, domain(metric, difference=True))
            rows.append([variant, cond, cell, ", ".join(fmt(d) for d in diffs), len(seeds)])
    return pd.DataFrame(rows, columns=["variant", "condition", f"diff vs {baseline}", "per seed", "seeds"])


def mcnemar_table(mcnemar: pd.DataFrame) -> pd.DataFrame:
    """Per variant and condition: 'b/c, p' for every seed (b: only the baseline right, c: only the variant)."""
    if mcnemar.empty:
        return pd.DataFrame()
    rows = []
    for (variant, attack, eps), g in mcnemar.groupby(["variant", "attack", "eps"], sort=False):
        cond = "clean" if attack == "clean" else f"{attack}@{eps:g}"
        cells = [f"s{int(r.seed)}: {r.b}/{r.c}, p={_p(r.p)}" for r in g.sort_values("seed").itertuples()]
        rows.append([g["baseline"].iloc[0], variant, cond, int(g["n"].iloc[0]), "; ".join(cells)])
    return pd.DataFrame(rows, columns=["baseline", "variant", "condition", "n", "b/c, McNemar exact p per seed"])


def _p(p: float) -> str:
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


def markdown(table: pd.DataFrame) -> str:
    """A GitHub Markdown table from a DataFrame (pandas' own needs the optional ``tabulate`` package)."""
    if table.empty:
        return "_(no data)_\n"

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = [
        "| " + " | ".join(cell(c) for c in table.columns) + " |",
        "|" + "|".join(":---" for _ in table.columns) + "|",
    ]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"
