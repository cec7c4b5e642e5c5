"""The study's headline figure: every claim's per-seed paired differences and 95% interval (a forest plot).

One row per comparison ("deit-grc vs deit" for claim (a), three rows for "together is best"). Each training
seed contributes one paired difference (a dot); the bar is the 95% Student-t interval across seeds and the
diamond its mean: exactly the numbers :mod:`.claims` decides the verdicts from, drawn in the same orientation
(positive = the direction the paper claims), so a bar right of zero is "supported", left of zero "not
supported", and one across zero "inconclusive" (see the verdict rule; the dotted line marks delta, the smallest
effect the claim needs). Rows are coloured by their verdict. Metrics differ in units, so rows are grouped into
one panel per unit (accuracy in percentage points, perplexity as 100 x log ratio, Lipschitz bounds in
decades, growth exponents as plain differences).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..report.style import MIN_PT, OKABE_ITO, TWO_COLUMN, label_figure, legend_below, new_figure, paper_style
from .claims import ClaimResult, Verdict

# metric -> (scale applied to the difference, unit group shown as the panel's x label)
UNITS: dict[str, tuple[float, str]] = {
    "acc": (100.0, "accuracy difference (percentage points)"),
    "acc_mean": (100.0, "accuracy difference (percentage points)"),
    "corruption_acc": (100.0, "accuracy difference (percentage points)"),
    "mce": (1.0, "mCE difference"),
    "log_ppl": (100.0, "perplexity: 100 \u00d7 log ratio (\u2248 % change)"),
    "log_ppl_mean": (100.0, "perplexity: 100 \u00d7 log ratio (\u2248 % change)"),
    "log_ppl_increase": (100.0, "perplexity: 100 \u00d7 log ratio (\u2248 % change)"),
    "lip_log10_upper": (1.0, "global Lipschitz upper bound (decades, log10)"),
    "lip_layer_log10_upper": (1.0, "global Lipschitz upper bound (decades, log10)"),
    "lip_log10_layerwise": (1.0, "Lipschitz layerwise estimate (decades, log10)"),
    "lip_log10_crown": (1.0, "CROWN local Lipschitz bound, rho 1e-3 (decades, log10)"),
    "certified_radius_mean": (1.0, "certified L2 radius difference"),
    "seqlen_slope": (1.0, "growth exponent (log-log slope)"),
}
VERDICT_STYLE: dict[Verdict, dict] = {
    Verdict.SUPPORTED: {"color": OKABE_ITO["green"], "marker": "D", "filled": True},
    Verdict.NOT_SUPPORTED: {"color": OKABE_ITO["vermillion"], "marker": "X", "filled": True},
    Verdict.INCONCLUSIVE: {"color": "0.45", "marker": "D", "filled": False},
}
FRAME_COLUMNS = (
    "row", "claim_id", "claim", "scope", "primary", "claim_verdict", "variant", "baseline", "metric", "condition",
    "unit", "delta", "seed", "diff", "mean", "lo", "hi", "verdict",
)  # fmt: skip


def _unit(metric: str) -> tuple[float, str]:
    return UNITS.get(metric, (1.0, metric.replace("_", " ")))


def claims_frame(claims: Sequence[ClaimResult]) -> pd.DataFrame:
    """One row per (claim, comparison, seed), differences oriented (+ = as claimed) and scaled to the unit.

    A comparison that was not measured keeps one row with NaN numbers, so it still shows up (as inconclusive).
    """
    records = []
    for k, c in enumerate(claims):
        for r in c.results:
            cmp_ = r.comparison
            scale, unit = _unit(cmp_.metric)
            sign = cmp_.direction * scale
            lo, hi = sorted((sign * r.lo, sign * r.hi)) if math.isfinite(r.lo) else (math.nan, math.nan)
            base = {
                "row": f"{k}:{cmp_.variant}:{cmp_.baseline}", "claim_id": c.spec.id, "claim": c.spec.claim,
                "scope": c.spec.scope, "primary": c.spec.primary, "claim_verdict": c.verdict.value,
                "variant": cmp_.variant, "baseline": cmp_.baseline, "metric": cmp_.metric,
                "condition": cmp_.condition, "unit": unit, "delta": cmp_.delta * scale, "mean": sign * r.mean,
                "lo": lo, "hi": hi, "verdict": r.verdict.value,
            }  # fmt: skip
            seeds = r.diffs.items() or [(math.nan, math.nan)]
            records += [{**base, "seed": s, "diff": sign * d} for s, d in seeds]
    return pd.DataFrame(records, columns=list(FRAME_COLUMNS))


def _label(row: pd.Series, several: bool) -> str:
    """Claim, then 'variant vs baseline [scope]'; a claim judged on several rows also names its own verdict."""
    scope = str(row["scope"]).split(":", 1)[0]
    tag = "" if row["primary"] else ", secondary"
    overall = f"; claim: {row['claim_verdict']}" if several else ""
    return f"({row['claim_id']}) {row['claim']}\n{row['variant']} vs {row['baseline']} [{scope}{tag}]{overall}"


def _draw_row(ax, y: float, rows: pd.DataFrame) -> None:
    first = rows.iloc[0]
    style = VERDICT_STYLE[Verdict(first["verdict"])]
    color = style["color"]
    diffs = rows["diff"].to_numpy(float)
    finite = np.isfinite(diffs)
    if finite.any():
        offsets = np.linspace(-0.16, 0.16, int(finite.sum())) if finite.sum() > 1 else np.zeros(1)
        ax.scatter(diffs[finite], y + offsets, s=7, color=color, alpha=0.75, lw=0, zorder=3)
    if math.isfinite(first["lo"]):
        ax.plot([first["lo"], first["hi"]], [y, y], color=color, lw=1.6, solid_capstyle="butt", zorder=2)
    if math.isfinite(first["mean"]):
        face = color if style["filled"] else "white"
        ax.plot([first["mean"]], [y], marker=style["marker"], ms=4.5, mfc=face, mec=color, mew=0.9, zorder=4,
                linestyle="none")  # fmt: skip
    else:
        ax.text(0, y, "not measured", fontsize=MIN_PT, color="0.4", va="center", ha="left")


def forest_figure(frame: pd.DataFrame, sources: Sequence[str], subtitle: str, *, paper: bool = False) -> Figure:
    """Per unit a panel; per comparison a row: seeds (dots), 95% interval (bar), mean (diamond), zero line."""
    units = list(dict.fromkeys(frame["unit"]))
    rows_per_unit = [list(dict.fromkeys(frame.loc[frame["unit"] == u, "row"])) for u in units]
    height = 0.9 + sum(0.3 * len(r) + 0.45 for r in rows_per_unit)
    per_claim = frame.drop_duplicates("row").groupby(frame["row"].str.split(":").str[0]).size()
    with paper_style():
        fig = new_figure(TWO_COLUMN, height, paper=paper)
        axes = fig.subplots(len(units), 1, squeeze=False, height_ratios=[len(r) + 1.3 for r in rows_per_unit])[:, 0]
        for ax, unit, rows in zip(axes, units, rows_per_unit, strict=True):
            labels = []
            for i, row_id in enumerate(rows):
                sub = frame[frame["row"] == row_id]
                _draw_row(ax, -i, sub)
                labels.append(_label(sub.iloc[0], per_claim[row_id.split(":")[0]] > 1))
            ax.set_yticks([-i for i in range(len(rows))], labels, fontsize=MIN_PT)
            for tick, row_id in zip(ax.get_yticklabels(), rows, strict=True):
                if not frame.loc[frame["row"] == row_id, "primary"].iloc[0]:
                    tick.set_color("0.4")
            ax.set_ylim(-len(rows) + 0.4, 0.6)
            ax.axvline(0, color="0.1", lw=0.7, zorder=1)
            delta = frame.loc[frame["unit"] == unit, "delta"].iloc[0]
            ax.axvline(delta, color="0.4", lw=0.6, linestyle=":", zorder=1)
            ax.set_xlabel(f"{unit}; positive = as claimed", fontsize=6)
            ax.grid(True, axis="x")
            ax.spines["left"].set_visible(False)
            ax.tick_params(axis="y", length=0)
        handles = [
            Line2D([], [], color=s["color"], marker=s["marker"], mfc=s["color"] if s["filled"] else "white",
                   mec=s["color"], lw=1.6, label=v.value)
            for v, s in VERDICT_STYLE.items()
        ] + [
            Line2D([], [], color="0.3", marker="o", ms=2.5, lw=0, label="one training seed"),
            Line2D([], [], color="0.4", lw=0.6, linestyle=":", label="\u03b4 (smallest effect that matters)"),
        ]  # fmt: skip
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig, handles)
    return fig
