"""Per-model aggregates recomputed from a run's per-example rows: what report tables show and gate metrics judge.

Every function returns a tidy pandas DataFrame (one row per model and condition). They live below both readers
(:mod:`robustbench_filters.report.tables` lays them out for papers; :mod:`robustbench_filters.gating.metrics`
turns them into named metrics) so the gate judges exactly the numbers a report prints, without importing the
report.

Statistics:
- accuracies carry a 95% Wilson score interval over examples (:func:`robustbench_filters.stats.intervals.wilson_interval`);
- perplexity is exp(sum nll / sum tokens) over examples, with a 95% percentile bootstrap interval over
  examples (tokens of one example are not independent, so examples are the resampling unit); token accuracy
  (sum correct / sum tokens) gets the same bootstrap, so both intervals stay inside their domains;
- Lipschitz bounds carry no interval (a certified bound is not a sample); each certified one says whether it is
  vacuous (:mod:`robustbench_filters.stats.vacuity`).
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import numpy as np
import pandas as pd

from ..core.budgets import eps_key
from ..core.names import ATTACK_SPECS, WEAK
from ..summaries.image import Accuracy, ImageModelResults, RobustAccuracy
from ..summaries.record import ABSENT
from . import vacuity
from .intervals import BOOTSTRAP, bootstrap_ratio_interval, lm_eval_columns, wilson_interval

#: the convergence column of a survivor the rerun attacked
CHECKED = ("held", "broken", "covered")

CLEAN = "clean"
CORRUPTION_PREFIX = "corruption:"
MODEL_LAYER = "model"


def eps_label(eps: float) -> str:
    """A budget in a condition key ('pgd@8/255'): every digit needed to parse it back (:func:`..core.budgets.eps_key`).

    Tables, axes and terminal lines show budgets with :func:`..core.budgets.eps_text` (k/255 or 3 significant digits).
    """
    return eps_key(eps)


def model_order(rows: pd.DataFrame) -> list[str]:
    """Models in order of first appearance (the order the user listed them)."""
    return list(dict.fromkeys(rows["model"].tolist())) if "model" in rows.columns else []


def accuracy(correct: pd.Series) -> dict[str, Any]:
    """Accuracy with its 95% Wilson interval over the examples, their count ``n`` and the count ``correct``: the one
    place an accuracy is computed (run summaries, report tables and gate metrics all take it from here)."""
    n, k = int(len(correct)), int(correct.astype(bool).sum())
    lo, hi = wilson_interval(k, n)
    return {"n": n, "correct": k, "acc": k / n if n else math.nan, "lo": lo, "hi": hi}


def mean_cell_accuracy(rows: pd.DataFrame) -> dict[str, Any]:
    """Mean accuracy of a corruption run's rows over every corruption and severity (``acc``), with a Wilson
    interval over the ``n`` examples (``lo``, ``hi``).

    The cells of one example are correlated, so they are not n x cells independent trials. Each example's score
    (its share of correct cells) lies in [0, 1] with variance at most p(1 - p), so a Wilson interval at the example
    count is at least as wide as the truth needs (asymptotically): conservative, never too narrow.
    """
    cells = rows[rows.kind == "contamination"]
    per_example = cells.groupby("example_id").correct.mean()
    n = len(per_example)
    p = float(per_example.mean())
    lo, hi = wilson_interval(p * n, n)  # type: ignore[arg-type]
    return {"acc": p, "lo": lo, "hi": hi, "n": n}


def compute_ledger(sub: pd.DataFrame) -> dict[str, Any]:
    """The compute ledger of some attack rows: passes in total and per example, who broke the examples (counts,
    "clean" for those the model got wrong unattacked), and the convergence check's tally. Empty for rows from
    before it."""
    if "fwd" not in sub.columns:
        return {}
    n = max(len(sub), 1)
    fwd, bwd = float(sub.fwd.sum()), float(sub.bwd.sum())
    broken = sub.fooled_by[sub.fooled_by != ""].value_counts()
    order = (["clean"] if "clean" in broken.index else []) + [k for k in broken.index if k != "clean"]
    out: dict[str, Any] = {
        "cost": {
            "fwd": fwd,
            "bwd": bwd,
            "fwd_per_example": fwd / n,
            "bwd_per_example": bwd / n,
            "exact": bool(sub.cost_exact.all()),
        },  # fmt: skip
        "broken_by": {k: int(broken[k]) for k in order},
    }
    conv = sub[sub.convergence.isin(CHECKED)]
    if len(conv):
        out["convergence"] = {
            "checked": len(conv),
            "broken": int((conv.convergence == "broken").sum()),
            "covered": int((conv.convergence == "covered").sum()),  # held at a larger eps (the cascade's phase 2)
            "fwd": float(sub.conv_fwd.sum()),
            "bwd": float(sub.conv_bwd.sum()),
        }
    return out


def _strength(spec: Any, sub: pd.DataFrame, cut: bool) -> str | None:
    """The attack's strength as run: weaker than its name when the user cut its budget (``cut``), or when an
    escalating attack (the default) saw no rerun (the check turned off) and so stopped before its last stage; its
    numbers are then upper bounds like a weaker attack's."""
    if spec is None:
        return None
    skipped = "convergence" in sub.columns and bool(sub.correct.any()) and not sub.convergence.isin(CHECKED).any()
    return WEAK if cut or (spec.escalates and skipped) else spec.strength


def attack_accuracies(rows: pd.DataFrame, cut: Collection[str] = ()) -> dict[str, ImageModelResults]:
    """Per model of an image attack run: clean accuracy and robust accuracy per attack and eps, with Wilson
    intervals, each attack's strength (``cut``: the attacks whose budget the user lowered below their own, weaker
    whatever their name), and the compute ledger (per attack and eps, and per attack over the whole eps grid)."""
    out: dict[str, ImageModelResults] = {}
    for label, grp in rows.groupby("model", sort=False):
        clean = grp[grp.attack == CLEAN]
        robust = []
        attacked = grp[grp.attack != CLEAN]
        for (attack, eps), sub in attacked.groupby(["attack", "eps"], sort=True):
            strength = _strength(ATTACK_SPECS.get(attack), sub, attack in cut)
            robust.append(
                RobustAccuracy(attack=attack, eps=float(eps), **accuracy(sub.correct), strength=strength,
                               **compute_ledger(sub))
            )  # fmt: skip
        cost: Any = ABSENT
        if "fwd" in grp.columns:
            n = max(clean.example_id.nunique(), 1)
            cost = {}
            for attack, sub in attacked.groupby("attack", sort=False):
                conv = float(sub.conv_fwd.sum() + sub.conv_bwd.sum())
                passes = float(sub.fwd.sum() + sub.bwd.sum())
                cost[attack] = {"passes": passes, "per_example": passes / n, "convergence_passes": conv}
        out[label] = ImageModelResults(
            clean=Accuracy(**accuracy(clean.correct), **compute_ledger(clean)), robust=robust, cost=cost
        )
    return out


def is_corruption(attack: pd.Series) -> pd.Series:
    return attack.astype(str).str.startswith(CORRUPTION_PREFIX)


def classifier_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows of classifiers (a boolean ``correct`` per example)."""
    if rows.empty or "correct" not in rows.columns or "nll_sum" in rows.columns:
        return rows.iloc[0:0]
    return rows


def accuracy_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Clean and robust accuracy per (model, attack, eps) with 95% Wilson intervals; clean first (eps 0)."""
    rows = classifier_rows(rows)
    rows = rows[~is_corruption(rows["attack"])] if not rows.empty else rows
    records = []
    for model in model_order(rows):
        sub = rows[rows["model"] == model]
        clean = sub[sub["attack"] == CLEAN]
        if len(clean):
            records.append({"model": model, "attack": CLEAN, "eps": 0.0, **accuracy(clean["correct"])})
        for (attack, eps), grp in sub[sub["attack"] != CLEAN].groupby(["attack", "eps"], sort=True):
            records.append({"model": model, "attack": attack, "eps": float(eps), **accuracy(grp["correct"])})
    return pd.DataFrame(records, columns=["model", "attack", "eps", "n", "correct", "acc", "lo", "hi"])


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
            record.update(_lm_stats(grp) if "nll_sum" in grp.columns else accuracy(grp["correct"]))
            records.append(record)
    return pd.DataFrame(records)


def _lm_stats(grp: pd.DataFrame) -> dict[str, float]:
    nll, tok = grp["nll_sum"].to_numpy(float), grp["n_tokens"].to_numpy(float)
    total_tok = tok.sum()
    ppl = math.exp(nll.sum() / total_tok) if total_tok > 0 else math.nan
    lo, hi = bootstrap_ratio_interval(nll, tok)
    out = {"n": int(len(grp)), "n_tokens": int(total_tok), "ppl": ppl, "ppl_lo": lo, "ppl_hi": hi}
    if "correct_tokens" in grp.columns and total_tok > 0:
        correct = grp["correct_tokens"].to_numpy(float)
        out["token_acc"] = float(correct.sum() / total_tok)
        # the same bootstrap over documents: a ratio of sums of proportions, so it stays in [0, 1]
        out["token_acc_lo"], out["token_acc_hi"] = bootstrap_ratio_interval(correct, tok, transform=_identity)
    if "fwd" in grp.columns:  # the compute ledger: model passes (forward + backward), in total and per document
        out["passes"] = float(grp["fwd"].sum() + grp["bwd"].sum())
        out["passes_per_example"] = out["passes"] / max(len(grp), 1)
    return {**out, **lm_eval_columns(grp)}  # lm-eval's word/byte metrics, for rows scored lm-eval style


def _identity(x: np.ndarray) -> np.ndarray:
    return x


def perplexity_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Perplexity (and token accuracy) per (model, kind, attack, eps) for LM runs; corruptions excluded.

    ``ppl`` is per token (per character for robfilt's character-level LMs), ``x_clean`` its ratio to the model's
    clean perplexity; rows scored as lm-eval scores documents add ``word_perplexity``, ``byte_perplexity`` and
    ``bits_per_byte``, and rows with a compute ledger the model ``passes`` (in total and per document)."""
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
    clean = table[table["attack"] == CLEAN].set_index("model")["ppl"]
    table["x_clean"] = table["ppl"] / table["model"].map(clean)  # NaN for a model without clean rows
    table["_o"] = table["attack"].map(lambda a: order.get(a, 1))
    table["_m"] = table["model"].map({m: i for i, m in enumerate(model_order(rows))})
    return table.sort_values(["_m", "_o", "attack", "eps"]).drop(columns=["_o", "_m"]).reset_index(drop=True)


def finite_values(s: pd.Series) -> pd.Series:
    return s[np.isfinite(s.to_numpy(dtype=float))]


def lipschitz_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per model: lower bounds (mean, max over examples), certified local (median) and global upper bounds, the
    mean certified radius, and whether each certified number is vacuous (:mod:`robustbench_filters.stats.vacuity`)."""
    if rows.empty or "lower" not in rows.columns:
        return pd.DataFrame()
    examples = rows[rows["layer"] == MODEL_LAYER] if "layer" in rows.columns else rows
    records = []
    for model in model_order(examples):
        g = examples[examples["model"] == model]
        local, glob, radius = finite_values(g.get("local_upper", pd.Series(dtype=float))), None, None
        if "global_upper" in g.columns and len(finite_values(g["global_upper"])):
            glob = float(finite_values(g["global_upper"]).max())
        if "radius" in g.columns and len(finite_values(g["radius"])):
            radius = float(finite_values(g["radius"]).mean())
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


__all__ = [
    "BOOTSTRAP",
    "CLEAN",
    "CORRUPTION_PREFIX",
    "MODEL_LAYER",
    "accuracy",
    "accuracy_table",
    "attack_accuracies",
    "bootstrap_ratio_interval",
    "classifier_rows",
    "compute_ledger",
    "corruption_table",
    "eps_label",
    "finite_values",
    "is_corruption",
    "lipschitz_table",
    "lm_eval_columns",
    "mean_cell_accuracy",
    "model_order",
    "perplexity_table",
]
