"""Paper layouts of the tidy tables, and writers for Markdown, CSV and LaTeX (booktabs).

CSV files hold the tidy numbers (for re-analysis); Markdown and LaTeX hold the layout a paper shows: one row
per condition, one column per model, "85.2 [81.0, 88.7]" cells (accuracy % with its 95% interval), and column
headers written for readers ("gain (mean)", not ``lower_mean``). LaTeX is a complete ``table`` float with caption,
label and booktabs rules (:mod:`.latex`). Markdown is serialised here from the DataFrame because pandas'
``to_markdown`` needs the optional ``tabulate`` package, which robfilt does not depend on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..core.budgets import eps_text
from ..core.io import atomic_write_text
from ..stats import vacuity
from .latex import format_number, label_for, latex_table
from .tables import CLEAN, model_order

FORMATS: tuple[str, ...] = ("md", "csv", "tex")


def pct(acc: float, lo: float | None = None, hi: float | None = None) -> str:
    if acc is None or (isinstance(acc, float) and math.isnan(acc)):
        return "-"
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi):
        return f"{100 * acc:.1f}"
    return f"{100 * acc:.1f} [{100 * lo:.1f}, {100 * hi:.1f}]"


def sci(value: float | None) -> str:
    """3 significant digits, e-notation outside [1e-3, 1e4); '-' when missing."""
    if value is None or not math.isfinite(value):
        return "-"
    return format_number(value)


def pvalue(p: float) -> str:
    return "<0.001" if p < 1e-3 else f"{p:.3f}"


def _condition(attack: str, eps: float) -> tuple[str, str]:
    return (attack, "-" if attack == CLEAN else eps_text(eps))


def _by_condition(table: pd.DataFrame, cell) -> tuple[list[str], list[list[str]]]:
    """Rows keyed by (attack, eps value), so two budgets that print alike (3 digits) never share a row."""
    models = model_order(table)
    conds = list(dict.fromkeys((a, float(e)) for a, e in table[["attack", "eps"]].itertuples(index=False)))
    cells = {(r.model, r.attack, float(r.eps)): cell(r) for r in table.itertuples()}
    data = [[*_condition(a, e), *[cells.get((m, a, e), "-") for m in models]] for a, e in conds]
    return models, data


def accuracy_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Rows (attack, eps), one column per model, accuracy % [95% CI]."""
    if table.empty:
        return pd.DataFrame()
    models, data = _by_condition(table, lambda r: pct(r.acc, r.lo, r.hi))
    return pd.DataFrame(data, columns=["attack", "eps", *models])


def paired_layout(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "variant": table["variant"],
            "vs": table["baseline"],
            "attack": table["attack"],
            "eps": [_condition(a, e)[1] for a, e in zip(table["attack"], table["eps"], strict=True)],
            "n": table["n"],
            "baseline %": [f"{100 * v:.1f}" for v in table["acc_baseline"]],
            "variant %": [f"{100 * v:.1f}" for v in table["acc_variant"]],
            "diff (pp)": [f"{100 * v:+.1f}" for v in table["diff"]],
            "b": table["b"],
            "c": table["c"],
            "McNemar p": [pvalue(p) for p in table["p_value"]],
        }
    )


def perplexity_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Rows (attack, eps or rate), one column per model: perplexity [95% bootstrap CI]."""
    if table.empty:
        return pd.DataFrame()
    models, data = _by_condition(table, _ppl_cell)
    return pd.DataFrame(data, columns=["attack", "eps / rate", *models])


def _ppl_cell(r: Any) -> str:
    """'12.31 [11.80, 12.90] x1.42': perplexity [95% bootstrap CI] and, under attack, its ratio to clean ('-' when
    no token was predicted: never a number)."""
    if not math.isfinite(r.ppl):
        return "-"
    cell = f"{r.ppl:.2f}" + (f" [{r.ppl_lo:.2f}, {r.ppl_hi:.2f}]" if math.isfinite(r.ppl_lo) else "")
    ratio = getattr(r, "x_clean", math.nan)
    return cell + (f" x{ratio:.2f}" if r.attack != "clean" and math.isfinite(ratio) else "")


def lm_eval_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Rows (attack, eps or rate), one column per lm-eval-scored model: word_perplexity [95% CI] · byte_perplexity
    · bits_per_byte."""
    sub = table[table["word_perplexity"].notna()] if "word_perplexity" in table.columns else table.iloc[:0]
    if sub.empty:
        return pd.DataFrame()
    models = model_order(sub)
    conds = list(dict.fromkeys(_condition(a, e) for a, e in sub[["attack", "eps"]].itertuples(index=False)))
    sub = sub[np.isfinite(sub["word_perplexity"].to_numpy(float))]
    cells = {
        (r.model, _condition(r.attack, r.eps)): f"{r.word_perplexity:.4g}"
        + (f" [{r.word_perplexity_lo:.4g}, {r.word_perplexity_hi:.4g}]" if math.isfinite(r.word_perplexity_lo) else "")
        + f" · {r.byte_perplexity:.4g} · {r.bits_per_byte:.3f}"
        for r in sub.itertuples()
    }
    data = [[a, e, *[cells.get((m, (a, e)), "-") for m in models]] for a, e in conds]
    return pd.DataFrame(data, columns=["attack", "eps / rate", *models])


def corruption_layout(table: pd.DataFrame, means: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    models = model_order(table)
    is_lm = "ppl" in table.columns
    cells: dict[tuple[str, str, str], str] = {}
    for r in table.itertuples():
        sev = "-" if r.corruption == "clean" else f"{r.severity:g}"
        cells[(r.model, r.corruption, sev)] = (
            f"{r.ppl:.2f}" + (f" [{r.ppl_lo:.2f}, {r.ppl_hi:.2f}]" if math.isfinite(r.ppl_lo) else "")
            if is_lm
            else pct(r.acc, r.lo, r.hi)
        )
    for r in means.itertuples():
        cells[(r.model, "mean", f"{r.severity:g}")] = f"{r.ppl:.2f}" if is_lm else pct(r.acc)
    conds = list(dict.fromkeys((c, s) for _, c, s in cells))
    conds.sort(key=lambda cs: (cs[0] == "mean", cs[0] != "clean"))
    data = [[c, s, *[cells.get((m, c, s), "-") for m in models]] for c, s in conds]
    return pd.DataFrame(data, columns=["corruption", "severity", *models])


def corruption_error_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Rows: corruptions then mCE; one column per model; CE relative to the baseline (lower is better)."""
    if table.empty:
        return pd.DataFrame()
    models = model_order(table)
    conds = list(dict.fromkeys(table["corruption"]))
    conds.sort(key=lambda c: c == "mCE")
    cells = {(r.model, r.corruption): "-" if not math.isfinite(r.ce) else f"{r.ce:.3f}" for r in table.itertuples()}
    data = [[c, *[cells.get((m, c), "-") for m in models]] for c in conds]
    return pd.DataFrame(data, columns=["corruption", *models])


def _certified(values: pd.Series, flags: pd.Series, kind: str = "upper") -> pd.Series:
    """A certified bound or radius as shown: the number, or ``vacuous (...)`` (never a bare vacuous number)."""
    text = values.map(lambda v: "inf" if v == math.inf else sci(v))
    return pd.Series([vacuity.label(t, f, kind) for t, f in zip(text, flags, strict=True)], index=values.index)


def _bounds(table: pd.DataFrame, names: tuple[str, str, str, str]) -> dict[str, pd.Series]:
    """The lower bound (mean, max) and the certified local and global upper bounds, under ``names``."""
    lower_mean, lower_max, local, upper = names
    return {
        lower_mean: table["lower_mean"].map(sci),
        lower_max: table["lower_max"].map(sci),
        local: _certified(table["local_upper_median"], table["local_upper_vacuous"]),
        upper: _certified(table["global_upper"], table["global_upper_vacuous"]),
    }


def lipschitz_layout(table: pd.DataFrame) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame()
    bounds = _bounds(table, ("lower (mean)", "lower (max)", "local upper (median)", "certified upper"))
    return pd.DataFrame(
        {
            "model": table["model"],
            "method": table["method"],
            "n": table["n"],
            **bounds,
            "upper / lower": table["upper_over_lower"].map(sci),
            "radius (mean)": _certified(table["radius_mean"], table["radius_vacuous"], "radius"),
        }  # fmt: skip
    )


def lipschitz_layer_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Per model and block: the empirical gain (mean, max over examples) and the certified block constants."""
    if table.empty:
        return pd.DataFrame()
    names = ("gain (mean)", "gain (max)", "certified local (median)", "certified block constant")
    return pd.DataFrame({"model": table["model"], "block": table["block"], **_bounds(table, names)})


def seqlen_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Per attention kind and sequence length: the RMS output change (mean, sd over trials)."""
    if table.empty:
        return pd.DataFrame()
    out = {"kind": table["kind"], "N": table["n"], "RMS change (mean)": table["mean_perturbation"].map(sci)}
    if "std_perturbation" in table.columns:
        out["RMS change (sd)"] = table["std_perturbation"].map(sci)
    if "trials" in table.columns:
        out["trials"] = table["trials"]
    if "upper" in table.columns:
        out["certified bound (softmax)"] = table["upper"].map(sci)
    return pd.DataFrame(out)


def generic_layout(table: pd.DataFrame) -> pd.DataFrame:
    """Numbers in 3 significant digits, everything else as text; snake_case headers become words."""
    out = table.copy()
    for col in out.columns:
        if pd.api.types.is_float_dtype(out[col]):
            out[col] = out[col].map(sci)
    return out.rename(columns=lambda c: str(c).replace("_", " "))


def markdown(table: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table; numeric-looking columns are right-aligned."""
    if table.empty:
        return "_(empty)_\n"

    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    cols = [cell(c) for c in table.columns]
    right = [
        i > 0 and all(str(v).lstrip("+-<").replace(".", "", 1)[:1].isdigit() or str(v) == "-" for v in table[c])
        for i, c in enumerate(table.columns)
    ]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" if r else ":---" for r in right) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def latex(table: pd.DataFrame, caption: str, sources: Sequence[str], label: str = "tab:robfilt") -> str:
    """A ``table`` float (caption, label, booktabs rules); see :func:`.latex.latex_table`."""
    return latex_table(table, caption, label, sources)


def write_table(
    out_dir: Path,
    stem: str,
    tidy: pd.DataFrame,
    layout: pd.DataFrame,
    caption: str,
    sources: Sequence[str],
    formats: Sequence[str],
) -> list[Path]:
    """Write ``stem.{md,csv,tex}``; CSV gets the tidy numbers, Markdown and LaTeX the paper layout."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        if fmt == "csv":
            atomic_write_text(path, tidy.to_csv(index=False))
        elif fmt == "md":
            atomic_write_text(path, f"{caption}\n\n{markdown(layout)}\nsource: {'; '.join(sources)}\n")
        elif fmt == "tex":
            atomic_write_text(path, latex(layout, caption, sources, label_for(stem)))
        written.append(path)
    return written
