"""Figure: where the certified Lipschitz bounds lose, per model and per block.

Input: the tidy rows of :func:`robustbench_filters.lipschitz.research.gap.gap_rows` (columns ``model``, ``layer``,
``rho``, ``empirical``, ``layerwise_estimate``, ``local_upper``, ``global_upper``; optional ``local_taylor`` and
``local_crown``).
For every layer (each block, then the whole model) one column of markers on a log axis, medians over examples:

- empirical gain (a lower bound), the product of exact per-sublayer norms (layerwise estimate, not certified),
  the certified local bound for each rho and the certified global bound;
- the vertical segments between them are the losses: empirical -> layerwise is lost to composing layer
  constants, layerwise -> certified local to the layer bounds themselves (and to the radius they propagate),
  local -> global to the domain;
- on the model column, the second-order bound and linear bound propagation's (CROWN) certified local bound per rho,
  where the rows hold them.

Pure matplotlib OO API, no pyplot, in the reporter's style (:mod:`.style`: column widths, print fonts, the
setting and source lines unless ``paper``); the caller saves the figure (:func:`.figures.save_figure`, 300 dpi).
The legend lists only the kinds of marker the panels hold.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from ..core.errors import RobfiltError
from ..stats import vacuity
from .style import ONE_COLUMN, TWO_COLUMN, drawn, label_figure, legend_below, mark, new_figure, paper_style
from .tables import GAP_PREFIX

REQUIRED = ("model", "layer", "rho", "empirical", "layerwise_estimate", "local_upper", "global_upper")
COMPOSITION = "#d95f02"
LAYER_BOUNDS = "#7570b3"
DOMAIN = "#999999"
TAYLOR = "#e7298a"
CROWN = "#1f78b4"
MARKERS = {"empirical": ("o", "#1b9e77"), "layerwise_estimate": ("s", COMPOSITION), "global_upper": ("_", "#333333")}


def _layer_order(layers: Sequence[str]) -> list[str]:
    blocks = sorted({x for x in layers if x != "model"}, key=lambda s: (len(s), s))
    return blocks + (["model"] if "model" in set(layers) else [])


def _medians(rows: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in ("empirical", "layerwise_estimate", "local_upper", "local_taylor", "local_crown", "global_upper")
            if c in rows]  # fmt: skip
    return rows.groupby(["model", "layer", "rho"], sort=False)[cols].median().reset_index()


def _segment(ax, x: float, lo: float, hi: float, color: str, what: str) -> None:
    if np.isfinite(lo) and np.isfinite(hi) and hi > lo > 0:
        mark(ax.plot([x, x], [lo, hi], color=color, lw=3.0, alpha=0.55, solid_capstyle="butt", zorder=1)[0], what)


def _rho_colors(n: int) -> list[tuple[float, float, float]]:
    """Dark (smallest rho) to light (largest): one colour per radius."""
    return [(0.45 + 0.5 * i / max(1, n - 1), 0.05 + 0.35 * i / max(1, n - 1), 0.25 + 0.3 * i / max(1, n - 1))
            for i in range(n)]  # fmt: skip


def _panel(ax, med: pd.DataFrame, rhos: list[float], title: str) -> None:
    layers = _layer_order(med["layer"].tolist())
    shades = _rho_colors(len(rhos))
    for xi, layer in enumerate(layers):
        mine = med[med["layer"] == layer]
        first = mine.iloc[0]
        emp, lw, glob = (float(first[c]) for c in ("empirical", "layerwise_estimate", "global_upper"))
        locs = [float(mine[mine["rho"] == r]["local_upper"].iloc[0]) for r in rhos]
        _segment(ax, xi - 0.12, emp, lw, COMPOSITION, "lost composition")
        _segment(ax, xi, lw, min(locs), LAYER_BOUNDS, "lost layer bounds")
        _segment(ax, xi + 0.12, max(locs), glob, DOMAIN, "lost domain")
        for key in ("empirical", "layerwise_estimate", "global_upper"):
            marker, color = MARKERS[key]
            value = float(first[key])
            if np.isfinite(value) and value > 0:
                ax.plot([xi], [value], marker=marker, color=color, ms=4 if key != "global_upper" else 9, mew=1.2,
                        ls="none", zorder=3, gid=key)  # fmt: skip
        for k, (shade, value) in enumerate(zip(shades, locs, strict=True)):
            if np.isfinite(value) and value > 0:
                ax.plot([xi + 0.06], [value], marker="v", color=shade, ms=4, ls="none", zorder=3, gid=f"local {k}")
        if "local_taylor" in mine and layer == "model":
            for value in mine.set_index("rho").reindex(rhos)["local_taylor"]:
                if np.isfinite(value) and 0 < value < glob:
                    ax.plot([xi + 0.18], [value], marker="D", color=TAYLOR, ms=3, ls="none", zorder=3, gid="taylor")
        if "local_crown" in mine and layer == "model":
            for value in mine.set_index("rho").reindex(rhos)["local_crown"]:
                if np.isfinite(value) and value > 0:
                    ax.plot([xi + 0.24], [value], marker="*", color=CROWN, ms=6, ls="none", zorder=3, gid="crown")
    ax.set_yscale("log")
    ax.set_xticks(range(len(layers)), [s.replace("blocks.", "block ") for s in layers], rotation=30, ha="right",
                  rotation_mode="anchor")  # fmt: skip
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3, lw=0.5)


def lipschitz_gap_figure(
    rows: pd.DataFrame,
    rhos: Sequence[float] | None = None,
    sources: Sequence[str] = (),
    subtitle: str | None = None,
    *,
    paper: bool = False,
) -> Figure:
    """One panel per model: empirical, layerwise estimate, certified local (each rho) and global per layer."""
    missing = [c for c in REQUIRED if c not in rows.columns]
    if missing:
        raise RobfiltError(f"the Lipschitz gap figure needs columns {missing}; build the rows with gap_rows().")
    if rows.empty:
        raise RobfiltError("the Lipschitz gap figure got no rows; run the Lipschitz measurement first.")
    rhos = sorted(set(rows["rho"].astype(float))) if rhos is None else [float(r) for r in rhos]
    rows = rows[rows["rho"].astype(float).isin(rhos)]
    med = _medians(rows)
    models = list(dict.fromkeys(med["model"]))
    subtitle = gap_subtitle(rows) if subtitle is None else subtitle
    with paper_style():
        fig = new_figure(ONE_COLUMN if len(models) == 1 else TWO_COLUMN, 3.8 if len(models) == 1 else 3.3, paper=paper)
        axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
        for ax, model in zip(axes, models, strict=True):
            _panel(ax, med[med["model"] == model], rhos, model)
        axes[0].set_ylabel("Lipschitz constant (l2, log scale)")
        label_figure(fig, subtitle, sources, paper=paper)
        legend_below(fig, _legend_handles(fig, rhos))
    return fig


def gap_subtitle(rows: pd.DataFrame) -> str:
    """'n = 4 examples per model · no attack: l2 Lipschitz constants of the logits, medians over examples'."""
    counts = rows.groupby(["model", "layer", "rho"])["empirical"].count()
    n = int(counts.min()) if len(counts) else 0
    head = f"n = {n} examples per model" if n else "n not recorded"
    return f"{head} \u00b7 no attack: l2 Lipschitz constants of the logits, medians over examples"


def _legend_handles(fig: Figure, rhos: Sequence[float]) -> list[Line2D]:
    """A key for each kind of marker or segment the panels hold, in reading order."""
    tags = drawn(fig)
    keys = [
        ("empirical", Line2D([], [], marker="o", color=MARKERS["empirical"][1], ls="none", label="empirical (lower bound)")),
        ("layerwise_estimate", Line2D([], [], marker="s", color=COMPOSITION, ls="none",
                                      label="layerwise estimate (not certified)")),
        *[(f"local {k}", Line2D([], [], marker="v", color=c, ls="none", label=f"certified local, \u03c1 = {r:g}"))
          for k, (r, c) in enumerate(zip(rhos, _rho_colors(len(rhos)), strict=True))],
        ("global_upper", Line2D([], [], marker="_", color="#333333", ls="none", ms=9, label="certified global")),
        ("lost composition", Line2D([], [], color=COMPOSITION, lw=3, alpha=0.55, label="lost to composition")),
        ("lost layer bounds", Line2D([], [], color=LAYER_BOUNDS, lw=3, alpha=0.55,
                                     label="lost to layer bounds, radii")),
        ("lost domain", Line2D([], [], color=DOMAIN, lw=3, alpha=0.55, label="lost to the domain")),
        ("taylor", Line2D([], [], marker="D", color=TAYLOR, ls="none", ms=3, label="second-order bound (model)")),
        ("crown", Line2D([], [], marker="*", color=CROWN, ls="none", ms=6,
                         label="certified local, linear bound propagation (model)")),
    ]  # fmt: skip
    return [handle for tag, handle in keys if tag in tags]


def gap_rows_of(rows: pd.DataFrame) -> pd.DataFrame:
    """The gap rows of a Lipschitz run's table, with the ``gap/`` prefix taken off their layer names."""
    if "layer" not in rows or not all(c in rows.columns for c in REQUIRED):
        return rows.iloc[0:0]
    gap = rows[rows["layer"].astype(str).str.startswith(GAP_PREFIX)]
    return gap.assign(layer=gap["layer"].astype(str).str.slice(len(GAP_PREFIX)))


def gap_table(gap: pd.DataFrame) -> pd.DataFrame:
    """log10 medians over examples per (model, layer, rho), and the decades lost at each step.

    ``composition`` = layerwise estimate - empirical (lost by multiplying exact layer norms),
    ``layer bounds`` = certified local - layerwise estimate (lost by the layer bounds and the radii they carry);
    ``local_crown``: linear bound propagation's certified local bound (model rows; NaN where the rows lack it);
    ``*_vacuous``: the certified median is more than six decades above the empirical one."""
    med = _medians(gap)
    if "local_crown" not in med:
        med["local_crown"] = np.nan
    logs = med[["model", "layer", "rho"]].copy()
    for c in ("empirical", "layerwise_estimate", "local_upper", "local_crown", "global_upper"):
        logs[c] = np.log10(med[c].astype(float).where(med[c] > 0))
    logs["lost_composition"] = logs["layerwise_estimate"] - logs["empirical"]
    logs["lost_layer_bounds"] = logs["local_upper"] - logs["layerwise_estimate"]
    for c in ("local_upper", "local_crown", "global_upper"):
        logs[f"{c}_vacuous"] = [vacuity.log10_vacuous(u, e) for u, e in zip(logs[c], logs["empirical"], strict=True)]
    logs["n"] = gap.groupby(["model", "layer", "rho"], sort=False)["empirical"].count().to_numpy()
    order = {name: i for i, name in enumerate(_layer_order(list(dict.fromkeys(logs["layer"]))))}
    return logs.sort_values(["model", "rho", "layer"], key=lambda s: s.map(order) if s.name == "layer" else s)


def gap_layout(table: pd.DataFrame) -> pd.DataFrame:
    """The gap table for people: decades (log10) with two decimals; a certified median more than six decades above
    the empirical one is labelled vacuous (:mod:`robustbench_filters.stats.vacuity`)."""

    def dec(values: pd.Series) -> pd.Series:
        return values.map(lambda v: "-" if pd.isna(v) else f"{v:.2f}")

    def certified(col: str) -> list[str]:
        return [vacuity.label(t, f, "log") for t, f in zip(dec(table[col]), table[f"{col}_vacuous"], strict=True)]

    return pd.DataFrame(
        {
            "model": table["model"],
            "layer": table["layer"],
            "rho": table["rho"].map(lambda r: f"{r:g}"),
            "n": table["n"],
            "empirical": dec(table["empirical"]),
            "layerwise estimate (not certified)": dec(table["layerwise_estimate"]),
            "certified local": certified("local_upper"),
            "certified local (CROWN)": certified("local_crown"),
            "certified global": certified("global_upper"),
            "lost to composition": dec(table["lost_composition"]),
            "lost to layer bounds": dec(table["lost_layer_bounds"]),
        }
    )
