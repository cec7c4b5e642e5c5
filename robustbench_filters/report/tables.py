"""Report tables, recomputed from per-example rows (never from a run's summary).

Every function returns a tidy pandas DataFrame of numbers (one row per model and condition); that is what the
CSV files hold. :mod:`.render` turns these into paper layouts (one column per model, "acc [lo, hi]" cells) for
Markdown and LaTeX.

Statistics:
- accuracies carry a 95% Wilson score interval over examples (:func:`robustbench_filters.stats.wilson_interval`);
- a variant is compared with the baseline on the *same* examples: the paired difference in accuracy and
  McNemar's exact two-sided p-value from the discordant counts ``b`` (only the baseline is right) and ``c``
  (only the variant is right);
- perplexity is exp(sum nll / sum tokens) over examples, with a 95% percentile bootstrap interval over
  examples (tokens of one example are not independent, so examples are the resampling unit); token accuracy
  (sum correct / sum tokens) gets the same bootstrap, so both intervals stay inside their domains.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from .. import vacuity
from ..stats import bootstrap_ratio_interval, lm_eval_columns, mcnemar_exact, wilson_interval
from .format import eps_key

CLEAN = "clean"
CORRUPTION_PREFIX = "corruption:"
MODEL_LAYER = "model"
GAP_PREFIX = "gap/"  # how a Lipschitz run folder marks its gap rows (robfilt lipschitz --gap)
BASELINES: tuple[str, ...] = ("deit", "lm")


def eps_label(eps: float) -> str:
    """A budget in a condition key ('pgd@8/255'): every digit needed to parse it back (:func:`.format.eps_key`).

    Tables, axes and terminal lines show budgets with :func:`.format.eps_text` (k/255 or 3 significant digits).
    """
    return eps_key(eps)


def model_order(rows: pd.DataFrame) -> list[str]:
    """Models in order of first appearance (the order the user listed them)."""
    return list(dict.fromkeys(rows["model"].tolist())) if "model" in rows.columns else []


def pick_baseline(models: Sequence[str], preferred: str | None = None) -> str | None:
    """The explicit choice, else ``deit`` / ``lm``, else the first model."""
    if not models:
        return None
    if preferred is not None:
        return preferred if preferred in models else None
    for name in BASELINES:
        if name in models:
            return name
    return models[0]


def _wilson_row(correct: pd.Series) -> dict[str, float]:
    n, k = int(len(correct)), int(correct.astype(bool).sum())
    lo, hi = wilson_interval(k, n)
    return {"n": n, "correct": k, "acc": k / n if n else math.nan, "lo": lo, "hi": hi}


def is_corruption(attack: pd.Series) -> pd.Series:
    return attack.astype(str).str.startswith(CORRUPTION_PREFIX)


def _binary(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows of classifiers (a boolean ``correct`` per example)."""
    if rows.empty or "correct" not in rows.columns or "nll_sum" in rows.columns:
        return rows.iloc[0:0]
    return rows


def accuracy_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Clean and robust accuracy per (model, attack, eps) with 95% Wilson intervals; clean first (eps 0)."""
    rows = _binary(rows)
    rows = rows[~is_corruption(rows["attack"])] if not rows.empty else rows
    records = []
    for model in model_order(rows):
        sub = rows[rows["model"] == model]
        clean = sub[sub["attack"] == CLEAN]
        if len(clean):
            records.append({"model": model, "attack": CLEAN, "eps": 0.0, **_wilson_row(clean["correct"])})
        for (attack, eps), grp in sub[sub["attack"] != CLEAN].groupby(["attack", "eps"], sort=True):
            records.append({"model": model, "attack": attack, "eps": float(eps), **_wilson_row(grp["correct"])})
    return pd.DataFrame(records, columns=["model", "attack", "eps", "n", "correct", "acc", "lo", "hi"])


def ledger_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The compute ledger per (model, attack, eps): model passes per example and in total, and the share of the
    examples each stage broke. Empty for rows from before the ledger (no ``fwd`` column)."""
    rows = _binary(rows)
    if rows.empty or "fwd" not in rows.columns:
        return pd.DataFrame()
    adv = rows[(rows["attack"] != CLEAN) & ~is_corruption(rows["attack"])]
    records = []
    for model in model_order(adv):
        for (attack, eps), grp in adv[adv["model"] == model].groupby(["attack", "eps"], sort=True):
            n = len(grp)
            broken = grp["fooled_by"][grp["fooled_by"] != ""].value_counts()
            records.append({
                "model": model, "attack": attack, "eps": float(eps),
                "passes_per_example": float(grp["fwd"].sum() + grp["bwd"].sum()) / n,
                "passes": float(grp["fwd"].sum() + grp["bwd"].sum()),
                "exact": bool(grp["cost_exact"].all()),
                "broken_by": ", ".join(f"{k} {100 * v / n:.1f}%" for k, v in broken.items()),
            })  # fmt: skip
    return pd.DataFrame(records)


def corruption_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Accuracy (classifiers) or perplexity (LMs) per (model, corruption, severity); clean as severity 0."""
    if rows.empty or "attack" not in rows.columns:
        return pd.DataFrame()
    corrupt = rows[is_corruption(rows["attack"])]
    if corrupt.empty:
        return pd.DataFrame()
    models = model_order(corrupt)
    records = []
    for model in models:
        sub = rows[rows["model"] == model]
        clean = sub[sub["attack"] == CLEAN]
        groups = [("clean", 0.0, clean)] if len(clean) else []
        cs = sub[is_corruption(sub["attack"])]
        groups += [(a[len(CORRUPTION_PREFIX) :], float(s), g) for (a, s), g in cs.groupby(["attack", "eps"], sort=True)]
        for name, severity, grp in groups:
            record = {"model": model, "corruption": name, "severity": severity}
            record.update(_lm_stats(grp) if "nll_sum" in grp.columns else _wilson_row(grp["correct"]))
            records.append(record)
    return pd.DataFrame(records)


def corruption_means(table: pd.DataFrame) -> pd.DataFrame:
    """Mean over corruptions per (model, severity) (RobustBench-style), without an interval: corruptions share
    the same examples, so pooling them is not a sample of independent draws."""
    if table.empty:
        return table
    metric = "acc" if "acc" in table.columns and "ppl" not in table.columns else "ppl"
    sub = table[table["corruption"] != "clean"]
    means = sub.groupby(["model", "severity"], sort=False)[metric].mean().reset_index()
    means.insert(1, "corruption", "mean")
    return means


def corruption_error_table(table: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Corruption error vs the baseline (Hendrycks & Dietterich 2019, the baseline in AlexNet's place).

    ``CE_c = sum_s err(model, c, s) / sum_s err(baseline, c, s)`` over the severities run; ``mCE`` is the mean
    over corruptions with a defined CE (1.0 = as robust as the baseline, lower is better). Classifiers only.
    """
    if table.empty or "acc" not in table.columns or "ppl" in table.columns:
        return pd.DataFrame()
    models = model_order(table)
    base = pick_baseline(models, baseline)
    if base is None:
        return pd.DataFrame()
    sub = table[table["corruption"] != "clean"].assign(err=lambda d: 1.0 - d["acc"])
    base_err = sub[sub["model"] == base].groupby("corruption", sort=False)["err"].sum()
    records = []
    for model in models:
        errs = sub[sub["model"] == model].groupby("corruption", sort=False)["err"].sum()
        ces = []
        for corruption, err in errs.items():
            denom = base_err.get(corruption, math.nan)
            ce = err / denom if denom and denom > 0 else math.nan
            ces.append(ce)
            records.append({"model": model, "baseline": base, "corruption": corruption, "ce": ce})
        defined = [c for c in ces if math.isfinite(c)]
        mce = sum(defined) / len(defined) if defined else math.nan
        records.append({"model": model, "baseline": base, "corruption": "mCE", "ce": mce})
    return pd.DataFrame(records)


def _base_name(model: str) -> str:
    return model.split(" [", 1)[0]  # 'deit [run-b]' (renamed for a second example set) -> 'deit'


def paired_table(rows: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Each variant minus the baseline on the same examples, per (attack, eps): difference, b, c, McNemar p.

    ``b`` counts examples only the baseline gets right, ``c`` examples only the variant gets right; the paired
    difference in accuracy is (c - b) / n. Rows pair on (example_set, example_id): with runs on different
    example sets (``--allow-mixed``) each set is compared with its own baseline, never across sets.
    """
    rows = _binary(rows)
    columns = ["variant", "baseline", "attack", "eps", "n", "acc_baseline", "acc_variant", "diff", "b", "c", "p_value"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    if "example_set" not in rows.columns:
        rows = rows.assign(example_set=0)
    key = ["example_id", "attack", "eps"]
    records = []
    for _, group in rows.groupby("example_set", sort=True):
        models = model_order(group)
        base_names = [_base_name(m) for m in models]
        chosen = pick_baseline(base_names, baseline)
        if chosen is None or len(models) < 2:
            continue
        base = models[base_names.index(chosen)]
        b_rows = group[group["model"] == base][[*key, "correct"]]
        for variant in models:
            if variant == base:
                continue
            v_rows = group[group["model"] == variant][[*key, "correct"]]
            joined = b_rows.merge(v_rows, on=key, suffixes=("_b", "_v"))
            joined = joined.assign(_clean=joined["attack"] != CLEAN)
            for (_, attack, eps), grp in joined.groupby(["_clean", "attack", "eps"], sort=True):
                yb, yv = grp["correct_b"].astype(bool), grp["correct_v"].astype(bool)
                n, b, c = len(grp), int((yb & ~yv).sum()), int((~yb & yv).sum())
                records.append(
                    {
                        "variant": variant,
                        "baseline": base,
                        "attack": attack,
                        "eps": float(eps),
                        "n": n,
                        "acc_baseline": float(yb.mean()),
                        "acc_variant": float(yv.mean()),
                        "diff": (c - b) / n,
                        "b": b,
                        "c": c,
                        "p_value": mcnemar_exact(b, c),
                    }
                )
    return pd.DataFrame(records, columns=columns)


def _lm_stats(grp: pd.DataFrame) -> dict[str, float]:
    nll, tok = grp["nll_sum"].to_numpy(float), grp["n_tokens"].to_numpy(float)
    total_tok = tok.sum()
    ppl = math.exp(nll.sum() / total_tok) if total_tok > 0 else math.nan
    lo, hi = bootstrap_ratio_interval(nll, tok)
    out = {"n": int(len(grp)), "n_tokens": int(total_tok), "ppl": ppl, "ppl_lo": lo, "ppl_hi": hi}
    if "correct_tokens" in grp.columns and total_tok > 0:
        correct = grp["correct_tokens"].to_numpy(float)
        out["token_acc"] = float(correct.sum() / total_tok)
        # the same bootstrap over sequences: a ratio of sums of proportions, so it stays in [0, 1]
        out["token_acc_lo"], out["token_acc_hi"] = bootstrap_ratio_interval(correct, tok, transform=_identity)
    return {**out, **lm_eval_columns(grp)}  # lm-eval's word/byte metrics, for rows scored lm-eval style


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def perplexity_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Perplexity (and token accuracy) per (model, kind, attack, eps) for LM runs; corruptions excluded.

    ``ppl`` is per token (per character for robfilt's character-level LMs); models scored as lm-eval scores
    documents (Hugging Face models) add ``word_perplexity``, ``byte_perplexity`` and ``bits_per_byte``."""
    if rows.empty or "nll_sum" not in rows.columns:
        return pd.DataFrame()
    rows = rows[~is_corruption(rows["attack"])]
    records = []
    for model in model_order(rows):
        sub = rows[rows["model"] == model]
        for (attack, eps), grp in sub.groupby(["attack", "eps"], sort=True):
            kind = str(grp["kind"].iloc[0]) if "kind" in grp.columns else ""
            records.append({"model": model, "kind": kind, "attack": attack, "eps": float(eps), **_lm_stats(grp)})
    table = pd.DataFrame(records)
    if table.empty:
        return table
    order = {CLEAN: 0}
    table["_o"] = table["attack"].map(lambda a: order.get(a, 1))
    table["_m"] = table["model"].map({m: i for i, m in enumerate(model_order(rows))})
    return table.sort_values(["_m", "_o", "attack", "eps"]).drop(columns=["_o", "_m"]).reset_index(drop=True)


def _finite(s: pd.Series) -> pd.Series:
    return s[np.isfinite(s.to_numpy(dtype=float))]


def lipschitz_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model: lower bounds (mean, max over examples), certified local (median) and global upper bounds, the
    mean certified radius, and whether each certified number is vacuous (:mod:`robustbench_filters.vacuity`)."""
    if rows.empty or "lower" not in rows.columns:
        return pd.DataFrame()
    examples = rows[rows["layer"] == MODEL_LAYER] if "layer" in rows.columns else rows
    records = []
    for model in model_order(examples):
        g = examples[examples["model"] == model]
        local, glob, radius = _finite(g.get("local_upper", pd.Series(dtype=float))), None, None
        if "global_upper" in g.columns and len(_finite(g["global_upper"])):
            glob = float(_finite(g["global_upper"]).max())
        if "radius" in g.columns and len(_finite(g["radius"])):
            radius = float(_finite(g["radius"]).mean())
        lower_max = float(g["lower"].max())
        flags = (
            vacuity.model_vacuity(g)
            if {"local_upper", "global_upper"} <= set(g.columns)
            else dict.fromkeys(("global_upper_vacuous", "local_upper_vacuous", "radius_vacuous"))
        )
        records.append(
            {
                "model": model,
                "method": str(g["method"].iloc[0]) if "method" in g.columns else "",
                "n": int(len(g)),
                "lower_mean": float(g["lower"].mean()),
                "lower_max": lower_max,
                "local_upper_median": float(local.median()) if len(local) else math.nan,
                "global_upper": glob if glob is not None else math.nan,
                "upper_over_lower": glob / lower_max if glob and lower_max > 0 else math.nan,
                "radius_mean": radius if radius is not None else math.nan,
                **flags,
            }
        )
    return pd.DataFrame(records)


def lipschitz_layer_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model and block: mean/max empirical gain and the certified block constants (needs --per-layer)."""
    if rows.empty or "layer" not in rows.columns:
        return pd.DataFrame()
    layer_names = rows["layer"].astype(str)
    layers = rows[(layer_names != MODEL_LAYER) & ~layer_names.str.startswith(GAP_PREFIX)]  # gap rows: own table
    if layers.empty:
        return pd.DataFrame()
    records = []
    for (model, layer), g in layers.groupby(["model", "layer"], sort=False):
        block = str(layer).rsplit(".", 1)[-1]
        records.append(
            {
                "model": model,
                "layer": layer,
                "block": int(block) if block.isdigit() else -1,
                "lower_mean": float(g["lower"].mean()),
                "lower_max": float(g["lower"].max()),
                "local_upper_median": float(_finite(g["local_upper"]).median())
                if len(_finite(g["local_upper"]))
                else math.nan,
                "global_upper": float(_finite(g["global_upper"]).max())
                if len(_finite(g["global_upper"]))
                else math.nan,
                **vacuity.block_vacuity(g),
            }
        )
    table = pd.DataFrame(records)
    order = {m: i for i, m in enumerate(model_order(layers))}
    return table.sort_values(["model", "block"], key=lambda s: s.map(order) if s.name == "model" else s).reset_index(
        drop=True
    )


def seqlen_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The sequence-length study, one row per (kind, n)."""
    if rows.empty or not {"n", "kind", "mean_perturbation"} <= set(rows.columns):
        return pd.DataFrame()
    cols = [c for c in ("kind", "n", "mean_perturbation", "std_perturbation", "noise", "trials", "upper") if c in rows]
    order = {k: i for i, k in enumerate(dict.fromkeys(rows["kind"]))}
    return (
        rows[cols]
        .sort_values(["kind", "n"], key=lambda s: s.map(order) if s.name == "kind" else s)
        .reset_index(drop=True)
    )
