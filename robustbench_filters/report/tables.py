"""Report tables, recomputed from per-example rows (never from a run's summary).

Every function returns a tidy pandas DataFrame of numbers (one row per model and condition); that is what the
CSV files hold. :mod:`.render` turns these into paper layouts (one column per model, "acc [lo, hi]" cells) for
Markdown and LaTeX. The per-model aggregates the gate judges too (accuracy, perplexity, corruption and Lipschitz
tables, with their intervals) live in :mod:`robustbench_filters.stats.aggregates` and are re-exported here.

Statistics beyond those: a variant is compared with the baseline on the *same* examples: the paired difference in
accuracy and McNemar's exact two-sided p-value from the discordant counts ``b`` (only the baseline is right) and
``c`` (only the variant is right).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd

from ..stats import vacuity
from ..stats.aggregates import (
    CLEAN,
    CORRUPTION_PREFIX,
    MODEL_LAYER,
    accuracy_table,
    bootstrap_ratio_interval,
    classifier_rows,
    corruption_table,
    eps_label,
    finite_values,
    is_corruption,
    lipschitz_table,
    lm_eval_columns,
    model_order,
    perplexity_table,
)
from ..stats.intervals import mcnemar_exact

GAP_PREFIX = "gap/"  # how a Lipschitz run folder marks its gap rows (robfilt lipschitz --gap)
BASELINES: tuple[str, ...] = ("deit", "lm")


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


def ledger_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The compute ledger per (model, attack, eps): model passes per example and in total, and the share of the
    examples each stage broke. Empty for rows from before the ledger (no ``fwd`` column)."""
    rows = classifier_rows(rows)
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
    rows = classifier_rows(rows)
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
                "local_upper_median": float(finite_values(g["local_upper"]).median())
                if len(finite_values(g["local_upper"]))
                else math.nan,
                "global_upper": float(finite_values(g["global_upper"]).max())
                if len(finite_values(g["global_upper"]))
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


__all__ = [
    "BASELINES",
    "CLEAN",
    "CORRUPTION_PREFIX",
    "GAP_PREFIX",
    "MODEL_LAYER",
    "accuracy_table",
    "bootstrap_ratio_interval",
    "corruption_error_table",
    "corruption_means",
    "corruption_table",
    "eps_label",
    "is_corruption",
    "ledger_table",
    "lipschitz_layer_table",
    "lipschitz_table",
    "lm_eval_columns",
    "model_order",
    "paired_table",
    "perplexity_table",
    "pick_baseline",
    "seqlen_table",
]
